"""Reasoning traces (JSONL, one problem a line), validated with pydantic v2.

Format (DESIGN.md): ``{"idx", "gold", "model", "interval", "samples": [{"tokens",
"finished", "pred", "correct", "text", "probes": [{"at", "answer"}], "reward"?}]}``.
``tokens`` counts a sample's generated tokens, ``pred`` is its extracted answer, ``probes``
are probe-in-the-middle answers at token positions ``at`` (only some samples have them;
optional per probe: ``chars``, the length of the sample's text when probed, and ``logprobs``
of the greedy probe tokens) and ``interval`` is the probe spacing in tokens. Malformed files raise
:class:`~certa.eval.errors.TraceFormatError` naming the file, line and field.

Example:
    >>> line = ('{"idx": 3, "gold": "18", "model": "m", "interval": 32, "samples": ['
    ...         '{"tokens": 70, "finished": true, "pred": "18", "correct": true, "text": "...",'
    ...         ' "probes": [{"at": 32, "answer": ""}, {"at": 64, "answer": "18"}]}]}')
    >>> p = parse_trace_line(line)
    >>> p.samples[0].probe_at(64)
    '18'
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterable
from typing import IO
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from certa.eval.errors import TraceFormatError


class Probe(BaseModel):
    """One probe: the answer the model gave when probed after ``at`` generated tokens."""

    model_config = ConfigDict(extra="allow", frozen=True)
    at: int = Field(ge=0)
    answer: str | None = None
    chars: int | None = Field(default=None, ge=0)  # length of the chain's text when probed
    logprobs: list[float] | None = None  # log-probabilities of the greedy probe tokens

    @field_validator("logprobs")
    @classmethod
    def _finite(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and not all(math.isfinite(x) for x in v):
            raise ValueError("probe logprobs must be finite numbers")
        return v


class Sample(BaseModel):
    """One sampled reasoning path of a problem."""

    model_config = ConfigDict(extra="allow", frozen=True)
    tokens: int = Field(ge=0)
    finished: bool = True
    pred: str | None = None
    correct: bool = False
    text: str = ""
    probes: list[Probe] = Field(default_factory=list)
    reward: float | None = None

    @field_validator("probes")
    @classmethod
    def _sorted(cls, v: list[Probe]) -> list[Probe]:
        return sorted(v, key=lambda p: p.at)

    def probe_at(self, at: int) -> str | None:
        """The latest probe answer at or before position ``at`` (None when not probed yet)."""
        best = None
        for p in self.probes:
            if p.at > at:
                break
            best = p.answer if p.answer is not None else ""
        return best


class TraceProblem(BaseModel):
    """One problem: gold answer and sampled paths."""

    model_config = ConfigDict(extra="allow", frozen=True)
    idx: int | str
    gold: str | int | float | None = None
    model: str = ""
    interval: int | None = Field(default=None, ge=1)
    samples: list[Sample] = Field(min_length=1)

    @property
    def probed(self) -> list[Sample]:
        """Samples that carry probes."""
        return [s for s in self.samples if s.probes]


def parse_trace_line(line: str, *, where: str = "<string>") -> TraceProblem:
    """Validate one JSONL line; :class:`TraceFormatError` if it is not a trace problem."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise TraceFormatError(f"{where}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(data).__name__}")
    try:
        return TraceProblem.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "<root>"
        raise TraceFormatError(f"{where}: field {loc!r}: {err['msg']}",
                               hint="see the trace format in docs/scheduling.md") from None


def open_text(p: Path) -> IO[str]:
    """The file as UTF-8 text; gzip-compressed files (``.jsonl.gz``) are decompressed on the fly."""
    with p.open("rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(p, "rt", encoding="utf-8")
    return p.open(encoding="utf-8")


def load_traces(path: str | Path, *, limit: int | None = None) -> list[TraceProblem]:
    """Read and validate a trace file, plain or gzip-compressed (blank lines skipped).
    Raises TraceFormatError."""
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(f"trace file {str(p)!r} does not exist")
    out: list[TraceProblem] = []
    no = 0
    try:
        with open_text(p) as fh:
            for no, line in enumerate(fh, 1):
                if line.strip():
                    out.append(parse_trace_line(line, where=f"{p.name}:{no}"))
                    if limit is not None and len(out) >= limit:
                        break
    except (UnicodeDecodeError, OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{p.name}:{no + 1}: not a UTF-8 JSONL trace file ({type(exc).__name__}: {exc})",
                               hint="a trace file is JSON lines, optionally gzip-compressed") from None
    if not out:
        raise TraceFormatError(f"trace file {str(p)!r} holds no problems")
    return out


def dump_traces(problems: Iterable[TraceProblem], path: str | Path) -> Path:
    """Write problems as JSONL (the same format :func:`load_traces` reads)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as fh:
        for prob in problems:
            fh.write(prob.model_dump_json(exclude_none=True) + "\n")
    return p


__all__ = ["Probe", "Sample", "TraceProblem", "dump_traces", "load_traces", "open_text", "parse_trace_line"]
