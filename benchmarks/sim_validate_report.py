"""Summaries for ``sim_validate_cpu.py``: residuals by batch shape, spread across runs, plot.

Example:
    >>> from certa.runtime.sim.cost_model import CostModel, IterationRecord
    >>> m = CostModel(a=0.01, b=0.001, c=0.0, d=0.0)
    >>> recs = [IterationRecord(4, 0, 0.0, 0.012, 4, 0, wall_seconds=0.0154)]
    >>> residuals_by_shape(m, recs)[0]["bin"], round(residuals_by_shape(m, recs)[0]["mean_signed"], 3)
    ('decode 4-7', -0.091)
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

DECODE_BINS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 10**9))


def shape_bin(n_decode: int, n_prefill: int) -> str:
    """A batch shape: decode-only by batch size, or any batch holding a prefill chunk."""
    if n_prefill:
        return "with prefill"
    for lo, hi in DECODE_BINS:
        if lo <= n_decode <= hi:
            return f"decode {lo}" if lo == hi else (f"decode {lo}-{hi}" if hi < 10**9 else f"decode {lo}+")
    return "empty"


def residuals_by_shape(model, records) -> list[dict]:
    """Signed relative residual ``(pred - wall) / wall`` of each batch shape (mean, median, n)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.wall_seconds > 0:
            pred = model.iteration_time(r.n_tokens, r.kv_read, r.prefill_pairs, r.kv_cells)
            groups[shape_bin(r.n_decode, r.n_prefill)].append((pred - r.wall_seconds) / r.wall_seconds)
    order = [shape_bin(lo, 0) for lo, _ in DECODE_BINS] + ["with prefill"]
    return [{"bin": b, "n": len(groups[b]), "mean_signed": statistics.fmean(groups[b]),
             "median_signed": statistics.median(groups[b])} for b in order if groups.get(b)]


CONTEXT_BINS = (0, 256, 512, 1024, 2048)


def residuals_by_context(model, records) -> list[dict]:
    """Signed relative residual of decode-only iterations by mean context length (``kv_read / n``):
    a model whose KV term is too small shows residuals falling as contexts grow."""
    groups: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.wall_seconds > 0 and r.n_decode and not r.n_prefill:
            ctx = r.kv_read / r.n_decode
            lo = max(b for b in CONTEXT_BINS if b <= ctx)
            pred = model.iteration_time(r.n_tokens, r.kv_read, r.prefill_pairs, r.kv_cells)
            groups[lo].append((pred - r.wall_seconds) / r.wall_seconds)
    return [{"context_from": lo, "n": len(groups[lo]), "mean_signed": statistics.fmean(groups[lo])}
            for lo in CONTEXT_BINS if groups.get(lo)]


def summarize(runs: list[dict]) -> dict:
    """Per fit target: each run's median program-latency error, their median and range."""
    out = {}
    for target in runs[0]["fits"] if runs else ():
        meds = [r["fits"][target]["validation"]["median_rel_err"] for r in runs]
        p90s = [r["fits"][target]["validation"]["p90_rel_err"] for r in runs]
        out[target] = {"per_run_median": meds, "median": statistics.median(meds), "min": min(meds),
                       "max": max(meds), "per_run_p90": p90s}
    return out


def plot_residuals(runs: list[dict], path: Path, fits: tuple[str, ...] = ("cells", "tiled")) -> Path | None:
    """Online iterations' signed residual by batch shape, one line per run and fit (solid: the
    first of ``fits``, dashed: the second); simulated vs measured program latency (first fit)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        names = [f for f in fits if f in r["fits"]]
        for name, style in zip(names, ("-", "--")):
            res = r["residuals"][name]
            ax1.plot([x["bin"] for x in res], [100 * x["mean_signed"] for x in res], style, marker="o",
                     label=f"run {r['repeat']}: {name}")
        progs = r["fits"][names[0]]["programs"]
        ax2.scatter([p["measured"] for p in progs.values()],
                    [100 * (p["simulated"] - p["measured"]) / p["measured"] for p in progs.values()],
                    s=12, label=f"run {r['repeat']}: {names[0]}")
    ax1.axhline(0, color="grey", lw=0.8)
    ax1.set_ylabel("iteration time: (simulated - measured) / measured, %")
    ax1.set_title("residual by batch shape (online iterations)")
    ax1.tick_params(axis="x", rotation=30)
    ax2.axhline(0, color="grey", lw=0.8)
    ax2.set_xlabel("measured program latency, s")
    ax2.set_ylabel("program latency error, %")
    ax2.set_title("simulated vs measured program latency")
    for ax in (ax1, ax2):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
