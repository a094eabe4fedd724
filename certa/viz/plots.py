"""Plots (matplotlib, imported lazily): certaindex trajectories of runs, tokens vs accuracy of a
token benchmark, SLO attainment of a serving-simulator sweep (one figure, or the four PNGs of
``certa sim simulate --png``).

Every function returns a matplotlib ``Figure`` (it shows inline in Jupyter) and, given a
``path``, also writes it there (``.png`` or ``.svg``, chosen by the suffix). Install with
``pip install 'certa[plot]'``.

Example:
    >>> import certa as ct
    >>> from certa.algorithms.programs.library import build
    >>> r = ct.Runtime(ct.ScriptedBackend(responses=["\\\\boxed{4}"])).run_sync(build("sc"), question="2+2?")
    >>> fig = plot_certaindex(r, threshold=0.55)
    >>> fig.axes[0].get_ylabel()
    'certaindex'
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from certa.runtime.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from certa.runtime.result import Result

__all__ = ["new_figure", "plot_certaindex", "plot_slo", "plot_sweep", "plot_tokens_accuracy", "policy_color",
           "save_figure"]

PALETTE = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777")


def _mpl() -> Any:
    try:
        import matplotlib  # noqa: PLC0415
    except ImportError:
        raise ConfigError("drawing and plotting need matplotlib", hint="pip install 'certa[plot]'") from None
    return matplotlib


def _in_kernel() -> bool:
    """True inside a Jupyter (IPython kernel) session."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    shell = ipython.get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def new_figure(width: float, height: float) -> "Figure":
    """A figure of ``width`` × ``height`` inches, not kept by pyplot (no leaks, no double display).

    In Jupyter the figure is created through pyplot once, which installs the inline PNG
    display hook, and closed right away, so returning it from a cell shows it exactly once.
    """
    _mpl()
    if _in_kernel():
        import matplotlib.pyplot as plt  # noqa: PLC0415
        fig = plt.figure(figsize=(width, height))
        plt.close(fig)
        return fig
    from matplotlib.figure import Figure  # noqa: PLC0415
    return Figure(figsize=(width, height))


def save_figure(fig: "Figure", path: str | os.PathLike[str] | None, *, dpi: int = 150) -> pathlib.Path | None:
    """Write ``fig`` to ``path`` (format from the suffix: png, svg, pdf); no-op for ``None``."""
    if path is None:
        return None
    out = pathlib.Path(path)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in ("png", "svg", "pdf"):
        raise ConfigError(f"cannot write {out.name}: unknown image format {fmt!r}", hint="use .png, .svg or .pdf")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format=fmt, dpi=dpi, bbox_inches="tight", metadata=_metadata(fmt))
    return out


def _finish(fig: "Figure", path: str | os.PathLike[str] | None) -> "Figure":
    """How every plot ends: laid out, written to ``path`` if given, returned."""
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def _metadata(fmt: str) -> dict[str, Any]:
    # no timestamps or version strings: re-rendering an unchanged drawing gives the same file
    if fmt == "png":
        return {"Software": None}
    if fmt == "svg":
        return {"Date": None, "Creator": None}
    return {"CreationDate": None, "Producer": None, "Creator": None}


def _threshold_value(threshold: Any) -> dict[str, float]:
    """``0.5`` / ``{"sig": 0.5}`` / a policy with a ``tau`` → thresholds by signal (``""`` = combined)."""
    if threshold is None:
        return {}
    tau = getattr(threshold, "tau", threshold)
    if isinstance(tau, (int, float)):
        return {"": float(tau)}
    if isinstance(tau, dict):
        return {str(k): float(v) for k, v in tau.items()}
    raise ConfigError(f"threshold must be a number, a dict or a policy with tau, not {type(threshold).__name__}")


def _sections(data: dict[str, Any], *keys: str, what: str, hint: str) -> list[dict[str, Any]]:
    """The named sections of a result a plot reads (ConfigError naming them when one is missing)."""
    found = [data.get(k) if isinstance(data, dict) else None for k in keys]
    if not all(isinstance(f, dict) for f in found):
        raise ConfigError(f"expected {what} with " + " and ".join(f"'{k}'" for k in keys), hint=hint)
    return found  # type: ignore[return-value]


def _knob_positions(pts: Sequence[Any]) -> list[float]:
    """x of each point: its knob value; several updates at one value (several steps per knob
    unit, as in MCTS) are spread evenly over [k, k + 1)."""
    counts: dict[int, int] = {}
    for p in pts:
        counts[p.knob] = counts.get(p.knob, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for p in pts:
        i = seen.get(p.knob, 0)
        seen[p.knob] = i + 1
        out.append(p.knob + i / counts[p.knob] if counts[p.knob] > 1 else float(p.knob))
    return out


def plot_certaindex(results: "Result | Sequence[Result]", path: str | os.PathLike[str] | None = None, *,
                    threshold: Any = None, x: str = "knob", title: str | None = None,
                    tokens: bool = True) -> "Figure":
    """Plot the certaindex trajectory of a run (or several, overlaid).

    Args:
        results: a :class:`~certa.runtime.result.Result` or a list of them.
        path: also save the figure here (``.png``/``.svg``).
        threshold: a number, ``{signal: tau}`` or a policy with ``tau`` (drawn as dashed lines).
        x: ``"knob"`` (knob units spent) or ``"tokens"`` (all tokens spent so far).
        tokens: for a single run, also draw tokens spent on a second y axis.

    Each point is one certaindex update (after every step); updates between two knob units
    (several steps per unit, as in MCTS) are spread evenly between them. With several
    signals (AND), the combined value (their minimum) is drawn bold and each signal thin.
    The exit is marked with the run's exit reason.
    """
    runs = [results] if not isinstance(results, (list, tuple)) else list(results)
    if not runs:
        raise ConfigError("plot_certaindex needs at least one result")
    if x not in ("knob", "tokens"):
        raise ConfigError(f"x must be 'knob' or 'tokens', not {x!r}")
    fig = new_figure(6.4, 3.6)
    ax = fig.add_subplot()
    single = len(runs) == 1
    for i, r in enumerate(runs):
        pts = list(getattr(r, "certaindex", None) or [])
        color = PALETTE[i % len(PALETTE)]
        label = "certaindex" if single else r.program_id
        if not pts:
            continue
        xs = _knob_positions(pts) if x == "knob" else [p.tokens for p in pts]
        ax.plot(xs, [p.value for p in pts], marker="o", ms=4, lw=2, color=color, label=label, zorder=3)
        names = sorted(pts[-1].signals)
        if single and len(names) > 1:
            for j, name in enumerate(names):
                ax.plot(xs, [p.signals.get(name, float("nan")) for p in pts], lw=1, ls=":",
                        color=PALETTE[(j + 1) % len(PALETTE)], label=f"signal {name}")
        ax.annotate(f"exit: {r.exit_reason}", (xs[-1], pts[-1].value), textcoords="offset points", xytext=(-2, 8),
                    ha="right", fontsize=8, color=color)
    for j, (name, tau) in enumerate(_threshold_value(threshold).items()):
        ax.axhline(tau, ls="--", lw=1, color="#6b7280" if not name else PALETTE[(j + 1) % len(PALETTE)],
                   label=f"threshold {name} {tau:g}".replace("  ", " "))
    ax.set_ylim(-0.03, 1.05)
    ax.set_ylabel("certaindex")
    ax.set_xlabel("knob units spent" if x == "knob" else "tokens spent")
    ax.grid(alpha=0.3)
    if single and tokens and runs[0].certaindex and x == "knob":
        tx = ax.twinx()
        pts = runs[0].certaindex
        tx.plot(_knob_positions(pts), [p.tokens for p in pts], color="#9ca3af", lw=1, drawstyle="steps-post",
                label="tokens")
        tx.set_ylim(0, max(p.tokens for p in pts) * 1.1 + 1)
        tx.set_ylabel("tokens spent", color="#6b7280")
        tx.tick_params(axis="y", colors="#6b7280")
    r0 = runs[0]
    ax.set_title(title or (f"{r0.name}: answer {r0.answer!r}, exit {r0.exit_reason}, {r0.tokens.total} tokens"
                           if single else "certaindex trajectories"), fontsize=10)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    return _finish(fig, path)


def plot_tokens_accuracy(report: dict[str, Any], path: str | os.PathLike[str] | None = None, *,
                         title: str | None = None) -> "Figure":
    """Accuracy vs decode tokens per problem, one curve per method, from a token benchmark report.

    ``report`` is what :func:`certa.eval.bench_tokens.bench_tokens` returns (the JSON of
    ``certa bench tokens``). Baselines are drawn as curves; each calibrated method as its
    curve (thin) with the calibrated choice as a star, labelled with its token ratio and
    accuracy change against baseline-even at the full budget.
    """
    methods, = _sections(report, "methods", what="a token benchmark report", hint="from bench_tokens(...)")
    fig = new_figure(7.2, 4.6)
    ax = fig.add_subplot()
    for i, (name, m) in enumerate(methods.items()):
        if "tokens" not in m:
            continue
        color = PALETTE[i % len(PALETTE)]
        curve = sorted((p["tokens"], p["accuracy"]) for p in m.get("curve", []))
        if name.startswith("baseline"):
            ax.plot(*zip(*curve), marker="o", ms=3, lw=1.5, color=color, label=name)
            continue
        if curve:
            ax.plot(*zip(*curve), lw=0.9, alpha=0.45, color=color)
        ax.plot([m["tokens"]], [m["accuracy"]], marker="*", ms=13, ls="none", color=color,
                label=f"{name} ({m['token_ratio']:.2f}x tokens, {100 * m['accuracy_delta']:+.1f} pt)")
    ax.set_xlabel("decode tokens per problem (main + probe + score)")
    ax.set_ylabel(f"accuracy ({report.get('heldout_problems', '?')} held-out problems)")
    models = ", ".join(report.get("models", []))
    ax.set_title(title or f"{str(report.get('program', '')).upper()} on traces ({models})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right")
    return _finish(fig, path)


def plot_slo(result: dict[str, Any], path: str | os.PathLike[str] | None = None, *,
             title: str | None = None) -> "Figure":
    """SLO attainment vs arrival rate and vs SLO scale, one line per scheduling policy (its registered colour).

    ``result`` is what :func:`certa.simulation.sweep.run_sweep` returns (the JSON of
    ``certa sim simulate``). The dashed line is the attainment target (90% by default).
    """
    sweep, slo = _sections(result, "rate_sweep", "slo_sweep", what="a simulator sweep result",
                           hint="from run_sweep(...) or certa sim simulate --json")
    target = result.get("spec", {}).get("target", 0.9)
    fig = new_figure(11.0, 4.0)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for i, (pol, rows) in enumerate(sweep.items()):
        color = policy_color(pol) or PALETTE[i % len(PALETTE)]  # each policy in its registered colour
        best = result.get("max_rate", {}).get(pol)
        left.plot([r["rate"] for r in rows], [r["attainment"] for r in rows], marker="o", ms=3, color=color,
                  label=f"{pol} (max {best:.3g}/s)" if best else pol)
        right.plot(slo["scales"], slo["attainment"][pol], marker="o", ms=3, color=color, label=pol)
    left.set_xscale("log")
    left.set_xlabel("arrival rate (programs/s, Poisson)")
    right.set_xlabel(f"SLO scale (× mean standalone latency), at {slo['rate']:.3g} programs/s")
    for ax in (left, right):
        ax.axhline(target, ls="--", lw=0.8, color="#111827")
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("SLO attainment")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left" if ax is left else "lower right")
    preset = result.get("preset", {})
    fig.suptitle(title or f"SIMULATED serving: {preset.get('model', '?')} on {preset.get('hardware', '?')} "
                          "(estimated costs)", fontsize=10)
    return _finish(fig, path)


def policy_color(name: str) -> str | None:
    """A scheduling policy's colour in plots: its ``color`` in the registry (None: matplotlib's choice)."""
    from certa.runtime.scheduling.policies import POLICIES
    return POLICIES.meta(name, "color") if name in POLICIES else None


def plot_sweep(result: dict[str, Any], out_dir: str | pathlib.Path, prefix: str = "") -> list[pathlib.Path]:
    """Write attainment-vs-rate, attainment-vs-SLO-scale, latency and fairness-CDF PNGs of a
    :func:`~certa.simulation.sweep.run_sweep` result (``certa sim simulate --png``), each policy in
    its registered colour (:func:`policy_color`)."""
    d = pathlib.Path(out_dir)
    pols = list(result["rate_sweep"])
    title = f"{result['preset']['model']} on {result['preset']['hardware']} (SIMULATED, estimated costs)"
    paths = []

    def fig_for(name: str, xlabel: str, ylabel: str, logx: bool = False):
        fig = new_figure(6.4, 4.0)
        ax = fig.add_subplot()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
        return fig, ax

    def target_line(ax) -> None:  # the attainment plots: the target, on a 0..1 axis
        ax.axhline(result["spec"]["target"], ls="--", color="k", lw=0.8)
        ax.set_ylim(-0.02, 1.02)

    def save(fig, ax, name: str) -> None:
        ax.legend(fontsize=8)
        paths.append(save_figure(fig, d / f"{prefix}{name}.png"))

    fig, ax = fig_for("rate", "arrival rate (programs/s)", "SLO attainment", logx=True)
    for p in pols:
        rows = result["rate_sweep"][p]
        ax.plot([r["rate"] for r in rows], [r["attainment"] for r in rows], marker="o", ms=3,
                color=policy_color(p), label=f"{p} (max {_fmt(result['max_rate'].get(p))}/s)")
    target_line(ax)
    save(fig, ax, "attainment_vs_rate")

    fig, ax = fig_for("lat", "arrival rate (programs/s)", "P90 latency (s)", logx=True)
    for p in pols:
        rows = result["rate_sweep"][p]
        ax.plot([r["rate"] for r in rows], [r["latency"]["p90"] for r in rows], marker="o", ms=3,
                color=policy_color(p), label=p)
    ax.set_yscale("log")
    save(fig, ax, "latency_vs_rate")

    slo = result["slo_sweep"]
    fig, ax = fig_for("slo", f"SLO scale (at {slo['rate']:.3g} programs/s)", "SLO attainment")
    for p in pols:
        ax.plot(slo["scales"], slo["attainment"][p], marker="o", ms=3, color=policy_color(p), label=p)
    target_line(ax)
    save(fig, ax, "attainment_vs_slo")

    fig, ax = fig_for("ftf", "latency / decode tokens (s per token)", "fraction of programs", logx=True)
    for p in pols:
        pts = slo["fairness"][p]["cdf"]
        ax.step([x for x, _ in pts], [y for _, y in pts], where="post", color=policy_color(p), label=p)
    save(fig, ax, "fairness_cdf")
    return [p for p in paths if p is not None]


def _fmt(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3g}"
