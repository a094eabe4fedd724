"""Iteration cost model ``t = a + b·N + c·K + d·P + e·N·W (+ o) (+ r·(N mod tile))`` and measured iteration records.

* ``N``: tokens processed in the iteration (1 per decoding request + prefill tokens);
* ``K``: KV tokens read by the decoding requests (sum of their context lengths);
* ``P``: prefill query·key pairs, ``Σ n_i·(p_i + n_i/2)`` over prefill chunks with ``n_i``
  new and ``p_i`` already cached tokens (:func:`prefill_pairs`);
* ``W``: KV cells the engine holds (every sequence, idle cached ones too). The CPU llama.cpp
  engine's KV cache is unified: each token's attention spans the cells up to the highest
  occupied one (masked, not skipped), so idle cells cost every decode
  (``benchmarks/kv_span.py``: on the 0.5B, 2 cores, 16 decodes take 118 ms alone and 160 ms
  beside one idle 7,000-cell sequence, ~0.4 ms per token per 1,000 cells, and as long once
  it is gone if they sit in the cells above it). ``IterationRecord.kv_cells`` counts the cells
  held, a lower bound of that span (llama.cpp exposes no cell index). ``e`` = 0 (the default,
  and every GPU preset: paged attention reads a request's own context, ``c·K``) leaves it out;
* ``N mod tile``: tokens left over past the last whole tile of the batch. On the CPU engine a
  batch of 3 decodes costs more than one of 4 (measured, see ``benchmarks/sim_validate_cpu.py``),
  which fits llama.cpp's CPU K-quant matmuls working on tiles of ``tile`` = 4 tokens with a
  slower path for the remainder; ``r`` = 0 (the
  default, and every GPU preset) leaves the model linear.

Engines that can time their iterations (the CPU llama.cpp engine) log one
:class:`IterationRecord` per iteration with :class:`RecordWriter`; :mod:`.fit` fits the
coefficients to such a log and :func:`load_records` reads it back.

Example:
    >>> m = CostModel(a=0.005, b=2e-5, c=5e-8, d=1e-9)
    >>> round(m.iteration_time(n=256, k=256 * 1000, p=0) * 1000, 3)   # ms
    22.92
    >>> prefill_pairs(new=4, cached=10)
    48.0
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO

from certa.runtime.errors import ConfigError


def prefill_pairs(new: int, cached: int) -> float:
    """Query·key pairs of prefilling ``new`` tokens after ``cached`` ones: ``n·(p + n/2)``."""
    return new * (cached + new / 2.0)


@dataclass(frozen=True, slots=True)
class CostModel:
    """Seconds per engine iteration. ``b_small`` (if set) replaces ``b`` when ``N <= small_n``;
    ``r`` charges each token past the last whole ``tile`` of the batch; ``e`` each token's
    attention over the ``W`` cells the engine holds."""

    a: float
    b: float
    c: float
    d: float
    o: float = 0.0
    b_small: float | None = None
    small_n: int = 256
    r: float = 0.0
    tile: int = 4
    e: float = 0.0

    def __post_init__(self) -> None:
        if min(self.a, self.b, self.c, self.d, self.o, self.r, self.e) < 0 or self.tile < 1:
            raise ConfigError(f"cost model coefficients must be >= 0 (tile >= 1): {self}")

    def per_token(self, n: int) -> float:
        return self.b_small if self.b_small is not None and n <= self.small_n else self.b

    def iteration_time(self, n: int, k: float, p: float, w: float = 0.0) -> float:
        """Seconds for one iteration with ``n`` tokens, ``k`` KV reads, ``p`` prefill pairs and
        ``w`` KV cells held by the engine."""
        t = self.a + self.o + self.per_token(n) * n + self.c * k + self.d * p + self.e * n * w
        return t + self.r * (n % self.tile) if self.r else t

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One measured engine iteration: the cost model's inputs and the wall time it took.

    ``n_decode``/``n_prefill`` count requests (informational); ``source`` names the engine
    and machine, e.g. ``"llamacpp:qwen2.5-0.5b-q4:2core"``. ``seconds`` times the forward
    pass; ``wall_seconds`` (when logged) the whole iteration period, sampling included, which
    is what a simulator that runs iterations back to back must charge.
    """

    n_tokens: int
    kv_read: int
    prefill_pairs: float
    seconds: float
    n_decode: int = 0
    n_prefill: int = 0
    source: str = ""
    wall_seconds: float = 0.0  # the whole iteration (batch formation + decode + sampling); 0 = not timed
    started: float = 0.0  # when the iteration began (the engine's perf_counter clock); 0 = unknown
    kv_cells: int = 0  # KV cells the engine's cache held in the forward pass (every sequence, idle ones too)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> "IterationRecord":
        names = {f.name for f in fields(cls)}
        missing = {"n_tokens", "kv_read", "prefill_pairs", "seconds"} - set(data)
        if missing:
            raise ConfigError(f"iteration record lacks {sorted(missing)}")
        rec = cls(**{k: v for k, v in data.items() if k in names})
        if (rec.n_tokens < 0 or rec.kv_read < 0 or rec.prefill_pairs < 0 or not rec.seconds >= 0
                or not rec.wall_seconds >= 0 or rec.kv_cells < 0):
            raise ConfigError(f"iteration record has negative values: {data}")
        return rec


class RecordWriter:
    """Append :class:`IterationRecord` lines to a JSONL file (engines use this to log).

    Example::

        with RecordWriter("iters.jsonl", source="llamacpp:cpu") as log:
            log.write(n_tokens=8, kv_read=4000, prefill_pairs=0, seconds=0.061, n_decode=8)
    """

    def __init__(self, path: str | Path, source: str = "") -> None:
        self.path = Path(path)
        self.source = source
        self._fh: IO[str] | None = None

    def write(self, record: IterationRecord | None = None, **fields_: float) -> None:
        if record is None:
            record = IterationRecord(source=self.source, **fields_)  # type: ignore[arg-type]
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
        self._fh.write(record.to_json() + "\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_records(path: str | Path) -> list[IterationRecord]:
    """Read an iteration-record JSONL file (``.jsonl.gz``: gzip-compressed); ConfigError names the bad line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"iteration record file {str(p)!r} does not exist")
    out = []
    raw = p.read_bytes()
    text = (gzip.decompress(raw) if p.suffix == ".gz" else raw).decode("utf-8")
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(IterationRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError, ConfigError) as exc:
            raise ConfigError(f"{p.name}:{no}: bad iteration record ({exc})") from None
    return out


def save_records(records: Iterable[IterationRecord], path: str | Path) -> Path:
    """Write records as JSONL (overwrites; a ``.gz`` path is gzip-compressed, reproducibly: no timestamp)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(r.to_json() + "\n" for r in records).encode("utf-8")
    p.write_bytes(gzip.compress(data, mtime=0) if p.suffix == ".gz" else data)
    return p


__all__ = ["CostModel", "IterationRecord", "RecordWriter", "load_records", "prefill_pairs", "save_records"]
