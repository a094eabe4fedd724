"""Fit the cost model to measured iterations; validate predicted vs measured completion times.

:func:`fit_cost_model` solves ``seconds ≈ a + b·N + c·K + d·P (+ e·N·W) (+ r·(N mod tile))``
by non-negative least squares (columns scaled, exact NNLS by enumerating active sets — 4 to 6
unknowns), and reports
the iteration-level MAPE (Vidur's acceptance bar is < 10%). :func:`validate` compares
program completion times the simulator predicted with those an engine measured and
reports the median relative error.

Example:
    >>> from certa.runtime.sim.cost_model import CostModel, IterationRecord
    >>> true = CostModel(a=0.01, b=1e-4, c=1e-6, d=1e-8)
    >>> recs = [IterationRecord(n, k, p, true.iteration_time(n, k, p))
    ...         for n, k, p in [(1, 100, 0), (8, 4000, 0), (64, 0, 2e5), (16, 9000, 0), (128, 0, 9e5)]]
    >>> fit = fit_cost_model(recs)
    >>> round(fit.model.a, 6), round(fit.mape, 6)
    (0.01, 0.0)
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from certa.runtime.errors import ConfigError
from certa.runtime.sim.cost_model import CostModel, IterationRecord


def nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares ``min ||Ax - y||, x >= 0`` for a few columns.

    Tries every active set (2^n unconstrained least-squares solves); fine for n <= 10.
    """
    m, n = A.shape
    if n > 10:
        raise ValueError("nnls here is for small problems (<= 10 columns)")
    best, best_res = np.zeros(n), float(np.sum(y ** 2))
    for r in range(1, n + 1):
        for cols in itertools.combinations(range(n), r):
            sub = A[:, cols]
            x, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(x < 0):
                continue
            res = float(np.sum((sub @ x - y) ** 2))
            if res < best_res - 1e-18 * max(1.0, best_res):
                full = np.zeros(n)
                full[list(cols)] = x
                best, best_res = full, res
    return best


@dataclass(frozen=True, slots=True)
class FitReport:
    """A fitted model and how well it explains the records it was fitted on."""

    model: CostModel
    n: int
    mape: float  # mean absolute percentage error over the records (fraction)
    max_rel_err: float

    def as_dict(self) -> dict:
        return {"model": self.model.as_dict(), "n": self.n, "mape": self.mape, "max_rel_err": self.max_rel_err}


Target = Literal["seconds", "wall_seconds"]


def measured(record: IterationRecord, target: Target = "seconds") -> float:
    """The time a record is fitted to: the forward pass (``seconds``) or the whole iteration."""
    if target == "wall_seconds":
        if record.wall_seconds <= 0:
            raise ConfigError("these iteration records carry no wall_seconds (logged by an older engine)",
                              hint="fit target='seconds', or re-log the iterations")
        return record.wall_seconds
    return record.seconds


def _design(records: Sequence[IterationRecord], target: Target, tile: int | None,
            cells: bool) -> tuple[np.ndarray, np.ndarray]:
    A = np.array([[1.0, r.n_tokens, r.kv_read, r.prefill_pairs] + ([r.n_tokens * r.kv_cells] if cells else [])
                  + ([r.n_tokens % tile] if tile else []) for r in records], dtype=float)
    y = np.array([measured(r, target) for r in records], dtype=float)
    return A, y


def iteration_errors(model: CostModel, records: Sequence[IterationRecord], target: Target = "seconds") -> list[float]:
    """Relative error ``|pred - measured| / measured`` per record (records with 0 s skipped)."""
    out = []
    for r in records:
        y = measured(r, target)
        if y > 0:
            out.append(abs(model.iteration_time(r.n_tokens, r.kv_read, r.prefill_pairs, r.kv_cells) - y) / y)
    return out


def fit_cost_model(records: Sequence[IterationRecord], *, relative: bool = True,
                   target: Target = "seconds", tile: int | None = None, cells: bool = False) -> FitReport:
    """Fit ``(a, b, c, d)`` >= 0 to measured iterations.

    ``relative=True`` weights each record by ``1/seconds`` (minimises relative error, which
    is what MAPE measures); otherwise plain least squares on seconds. ``target`` picks the
    time fitted: the forward pass (``seconds``) or the whole iteration period including
    sampling (``wall_seconds``, which a back-to-back simulator must charge). ``tile`` (e.g. 4)
    also fits ``r``, the cost of each token past the batch's last whole tile (see
    :class:`~certa.runtime.sim.cost_model.CostModel`); None keeps the linear model. ``cells``
    also fits ``e``, each token's cost per KV cell the engine held (``IterationRecord.kv_cells``,
    logged by the CPU engine).
    """
    if len(records) < 4:
        raise ConfigError(f"need at least 4 iteration records to fit 4 coefficients, got {len(records)}")
    if cells and not any(r.kv_cells for r in records):
        raise ConfigError("these iteration records carry no kv_cells (logged by an older engine)",
                          hint="fit without cells, or re-log the iterations")
    A, y = _design(records, target, tile, cells)
    if np.any(y <= 0) and relative:
        keep = y > 0
        A, y = A[keep], y[keep]
    w = 1.0 / y if relative else np.ones_like(y)
    Aw, yw = A * w[:, None], y * w
    scale = np.linalg.norm(Aw, axis=0)
    scale[scale == 0] = 1.0
    x = nnls(Aw / scale, yw) / scale
    extra = list(x[4:])
    model = CostModel(a=float(x[0]), b=float(x[1]), c=float(x[2]), d=float(x[3]),
                      **({"e": float(extra.pop(0))} if cells else {}),
                      **({"r": float(extra.pop(0)), "tile": tile} if tile else {}))
    errs = iteration_errors(model, records, target)
    return FitReport(model=model, n=len(records), mape=float(np.mean(errs)) if errs else 0.0,
                     max_rel_err=float(np.max(errs)) if errs else 0.0)


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """Predicted vs measured program completion times (relative errors)."""

    n: int
    median_rel_err: float
    mean_rel_err: float
    p90_rel_err: float
    missing: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"n": self.n, "median_rel_err": self.median_rel_err, "mean_rel_err": self.mean_rel_err,
                "p90_rel_err": self.p90_rel_err, "missing": list(self.missing)}


def validate(predicted: Mapping[str, float], measured: Mapping[str, float]) -> ValidationReport:
    """Compare completion times (or latencies) by program id: ``|pred - meas| / meas``.

    Programs present in only one mapping are listed in ``missing`` and left out.
    """
    common = [k for k in measured if k in predicted and measured[k] > 0]
    if not common:
        raise ConfigError("no program is both predicted and measured (with a positive time)")
    errs = sorted(abs(predicted[k] - measured[k]) / measured[k] for k in common)
    missing = tuple(sorted(set(predicted) ^ set(measured)))
    p90 = errs[min(len(errs) - 1, int(round(0.9 * (len(errs) - 1))))]
    return ValidationReport(n=len(errs), median_rel_err=statistics.median(errs),
                            mean_rel_err=statistics.fmean(errs), p90_rel_err=p90, missing=missing)


__all__ = ["FitReport", "ValidationReport", "fit_cost_model", "iteration_errors", "measured", "nnls", "validate"]
