"""Fit the cost model's linear part to measured per-operator GPU profiles (Vidur's ``mlp.csv``).

Vidur (microsoft/vidur, MLSys'24) profiled every non-attention operator of one transformer
layer on real GPUs across token counts. One engine iteration's linear part — the GEMMs,
norms, rotary embedding and residual adds that every token passes through — is
``layers × Σ per-layer ops + embedding``. :func:`fit_linear` fits the cost model's
``a + b_small·N`` (for ``N ≤ small_n``) and ``a + b·N`` (above) to it by non-negative least
squares on *relative* residuals — each octave of ``N`` weighted equally, since the profiles
sample large ``N`` far more densely than the decode batches (1–256) serving runs on — choosing ``small_n`` from a few candidates by the smallest
worst-case error. The profiles hold no attention kernels, LM head, sampling or framework
time: those terms (``c``, ``d`` and part of ``a``) stay on the bandwidth/FLOPs model and are
marked as estimates in :mod:`.presets`.

Example:
    >>> rows = [ProfileRow(n, 0.2 + 0.001 * n, 0.0, 1) for n in (1, 8, 32, 64, 256, 1024, 4096)]
    >>> fit = fit_linear(rows, layers=10, candidates=(64,))
    >>> round(fit.a * 1e3, 3), round(fit.b * 1e3, 4), round(fit.max_error, 6)
    (2.0, 0.01, 0.0)
"""

from __future__ import annotations

import csv
import gzip
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from certa.runtime.errors import ConfigError
from certa.runtime.sim.fit import nnls

_MS = 1e-3
#: Per-layer operators summed for the linear part (``emb`` is counted once per forward pass).
LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One token count of a profile: median milliseconds of one layer's ops and of the embedding."""

    num_tokens: int
    layer_ms: float
    emb_ms: float
    tensor_parallel: int


@dataclass(frozen=True, slots=True)
class LinearFit:
    """``t(N) = a + b_small·N`` for ``N ≤ small_n``, ``a + b·N`` above (seconds), and its error."""

    a: float
    b: float
    b_small: float
    small_n: int
    max_error: float  # worst relative error over the profiled token counts
    mean_error: float
    token_range: tuple[int, int]
    points: int

    def predict(self, n: int) -> float:
        return self.a + (self.b_small if n <= self.small_n else self.b) * n

    def as_dict(self) -> dict:
        return {"a_ms": self.a / _MS, "b_ms": self.b / _MS, "b_small_ms": self.b_small / _MS,
                "small_n": self.small_n, "max_error": self.max_error, "mean_error": self.mean_error,
                "token_range": list(self.token_range), "points": self.points}


def read_profile(path: str | Path, tensor_parallel: int = 1) -> list[ProfileRow]:
    """Rows of a Vidur ``mlp.csv`` (optionally gzipped) for one tensor-parallel degree.

    Repeated token counts (Vidur profiles some twice) are merged by their median.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    by_n: dict[int, list[tuple[float, float]]] = defaultdict(list)
    try:
        with opener(path, "rt", newline="") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):
                try:
                    if int(row["num_tensor_parallel_workers"]) != tensor_parallel:
                        continue
                    layer = sum(float(row[f"time_stats.{op}.median"]) for op in LAYER_OPS)
                    by_n[int(row["num_tokens"])].append((layer, float(row["time_stats.emb.median"])))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ConfigError(f"{path}:{line}: not a Vidur mlp profile row ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read profile {path}: {exc}") from None
    if not by_n:
        raise ConfigError(f"{path}: no rows with num_tensor_parallel_workers={tensor_parallel}")
    return [ProfileRow(n, statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals),
                       tensor_parallel) for n, vals in sorted(by_n.items())]


def profile_seconds(rows: Iterable[ProfileRow], layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Token counts and the linear part's seconds per iteration for a model of ``layers`` layers."""
    rows = list(rows)
    n = np.array([r.num_tokens for r in rows], dtype=float)
    t = np.array([(layers * r.layer_ms + r.emb_ms) * _MS for r in rows])
    return n, t


def fit_linear(rows: Sequence[ProfileRow], layers: int, *,
               candidates: Sequence[int] = (64, 128, 256, 512, 1024)) -> LinearFit:
    """Fit ``a``, ``b_small``, ``b`` (and choose ``small_n``) to the profiled linear part."""
    n, t = profile_seconds(rows, layers)
    if len(n) < 3:
        raise ConfigError("a profile fit needs at least 3 token counts")
    octave = np.floor(np.log2(n)).astype(int)
    weight = np.sqrt(1.0 / np.bincount(octave)[octave])  # each octave of N counts the same
    best: LinearFit | None = None
    for cut in candidates:
        small = n <= cut
        if small.sum() < 1 or (~small).sum() < 1:
            continue
        design = np.column_stack([np.ones_like(n), n * small, n * ~small]) / t[:, None]  # relative residuals
        a, b_small, b = nnls(design * weight[:, None], weight)
        pred = a + np.where(small, b_small, b) * n
        err = np.abs(pred - t) / t
        fit = LinearFit(float(a), float(b), float(b_small), int(cut), float(err.max()), float(err.mean()),
                        (int(n.min()), int(n.max())), len(n))
        if best is None or fit.max_error < best.max_error:
            best = fit
    if best is None:
        raise ConfigError("no small-batch cut point splits the profiled token counts")
    return best


__all__ = ["LAYER_OPS", "LinearFit", "ProfileRow", "fit_linear", "profile_seconds", "read_profile"]
