r"""Token-vs-accuracy benchmark on recorded traces: every method against baseline-even.

:func:`bench_tokens` splits the problems (:func:`~certa.eval.calibration.split_problems`),
calibrates each certaindex method and each peer rule on the calibration part (fewest tokens
with no accuracy loss there), and reports on the held-out part only:

* SC — ``baseline-even`` (budgets 1..N samples), ``baseline-length`` (token budgets),
  ``certaindex-threshold``, ``pareto``, ``esc``, ``adaptive-consistency``, and ``oracle-bound``
  (each draw order stops at the fewest samples whose vote is already the vote of all N);
* CoT — ``baseline-even`` (token budgets; a cut chain answers with one counted probe),
  Dynasor's rule (``probe-calibrated``, and its presets ``dynasor-mild`` ... ``dynasor-crazy``)
  side by side with certa's certaindex variants (``grounded``, ``confident``, ``progress``,
  ``settled`` and their AND ``certa-cot``, :mod:`~certa.eval.cot_grid`), with probe
  decode tokens counted (probe prefill reported apart), and ``certa-default``: the default
  ``cot_program``'s fixed certaindex, as shipped (not calibrated). A variant the traces cannot support
  (``confident`` without probe logprobs) is listed with ``skipped`` and the reason, and
  ``oracle-bound``: each chain exits at its first probe equal to its final answer.

An ``oracle-bound`` (marked ``"oracle": true``, never a target) uses answers no live rule can
know: what no stopping rule on the same draws / probe grid can beat without changing answers.

Each method carries tokens, accuracy, ``token_ratio``/``accuracy_delta`` vs baseline-even at
the full budget, ``iso_token_ratio`` vs baseline-even at matched accuracy, bootstrap 95% CIs,
and a ``curve`` of held-out points for its family. :func:`plot` draws the curves (matplotlib,
imported only then).

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> out = bench_tokens(synth_traces(10, seed=0, samples=6, probed=2), "sc", reps=50)
    >>> sorted(out["methods"])[:3], out["heldout_problems"]
    (['adaptive-consistency', 'baseline-even', 'baseline-length'], 5)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from certa.runtime.errors import ConfigError
from certa.runtime.policy import Length, Threshold
from certa.eval.traces import TraceProblem

from certa.eval.calibration import METHODS, Candidate, calibrate, candidates, check_not_reserved, even_ladder, split_problems
from certa.algorithms.programs.cot_probe import CERTA_INTERVAL, PRESETS, TEXT_INTERVAL, certa_signal, settled_signal, text_signal
from certa.eval.evalstats import compare
from certa.eval.replay_eval import ProgramKind, Replayer, Scores, check_traces
from certa.eval.cot_grid import forced_answer_oracle, forced_answer_run, has_text_probes

__all__ = ["TARGETS", "bench_tokens", "candidate_label", "plot", "preset_candidates", "save_png"]

TARGETS: dict[str, dict[str, float]] = {"sc": {"token_ratio": 0.45, "accuracy_drop": 0.005},
                                        "cot": {"token_ratio": 0.75, "accuracy_drop": 0.005}}
"""The issue's targets: token ratio at most this, accuracy within this (0.005 = 0.5 pt)."""

_NAMES = {"threshold": "certaindex-threshold", "probe": "probe-calibrated", "certa": "certa-cot"}


def _without_k(spec: Any) -> Any:
    if isinstance(spec, dict):
        return tuple(sorted((k, _without_k(v)) for k, v in spec.items() if k != "k"))
    return tuple(_without_k(v) for v in spec) if isinstance(spec, list) else spec


def _shape(c: Candidate) -> tuple:
    """Candidates of one curve: same structure, different aggressiveness (CoT signals: the window k)."""
    if c.signal is not None:
        return (c.interval, _without_k(c.signal.to_dict()))
    p = c.policy.to_dict() if c.policy is not None else {}
    if c.method == "threshold":
        return (p.get("detect_at"), p.get("every"))
    if c.method == "pareto":
        return (p.get("detect_at"),)
    if c.method == "probe" or c.method == "certa":  # certa's grid holds Dynasor's too
        return (p.get("detect_at"), c.interval)
    return ()


def _fallback_shape(method: str, grid: list[Candidate]) -> tuple:
    """The curve to show when calibration kept the full budget: the paper's defaults."""
    shapes = [_shape(c) for c in grid]
    if grid and grid[0].signal is not None:
        return shapes[0]
    wanted = {"threshold": [(4, None)], "pareto": [(4,)], "probe": [(1, 64)]}.get(method, [])
    for w in wanted:
        if w in shapes:
            return w
    return shapes[-1] if shapes else ()


def _run(c: Candidate, rep: Replayer) -> Scores:
    """Replay ``c``; CoT on text-probe traces also pays each early exit's forced answer."""
    if rep.program == "cot":
        return forced_answer_run(rep, c.policy, k=c.k, interval=c.interval, signal=c.signal)
    return c.run(rep)


def _point(c: Candidate, s: Scores, even: list[Scores], reps: int, seed: int, label: str) -> dict[str, Any]:
    return {"label": label, **compare(s, even, reps=reps, seed=seed), **c.params()}


def bench_tokens(problems: Sequence[TraceProblem], program: ProgramKind, *, cal_fraction: float = 0.5, seed: int = 0,
                 orders: int = 1, dataset: str | None = None, reps: int = 1000) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-ready report (see the module docstring)."""
    check_traces(problems, program)
    cal, held = split_problems(problems, cal_fraction, seed)
    check_not_reserved(cal, dataset)
    rep = Replayer(held, program, seed=seed, orders=orders, dataset=dataset)
    ladder = even_ladder(rep)
    even = [_run(c, rep) for c in ladder]
    unit = "samples" if program == "sc" else "tokens"
    methods: dict[str, Any] = {}
    curve = [_point(c, s, even, reps, seed, f"{c.policy.to_dict()['cap']} {unit}")
             for c, s in zip(ladder, even, strict=True)]
    methods["baseline-even"] = {**curve[-1], "curve": curve}
    if program == "sc":
        per_sample = even[-1].mean_tokens / max(1, rep.n_samples)
        budgets = sorted({max(1, round(per_sample * b)) for b in range(1, rep.n_samples + 1)})
        pts = [_point(Candidate("length", Length(b)), rep.run(Length(b)), even, reps, seed, f"{b} tokens")
               for b in budgets]
        methods["baseline-length"] = {**pts[-1], "curve": pts}
        oracle = rep.oracle_sc()
        methods["oracle-bound"] = {"label": "ORACLE: stop at the fewest samples whose vote is the vote of all",
                                   "oracle": True, **compare(oracle, even, reps=reps, seed=seed),
                                   "tokens_by_kind": oracle.summary()}
    for method in METHODS[program]:
        name = _NAMES.get(method, method)
        try:
            calib = calibrate(cal, program, method=method, seed=seed, orders=orders, dataset=dataset)
        except ConfigError as exc:  # e.g. the confident signal on traces without probe logprobs
            methods[name] = {"skipped": exc.message}
            continue
        choice = calib.choice
        grid = candidates(rep, method, typical=calib.extra.get("typical_tokens"))
        shape = _shape(choice) if choice.method != "even" else _fallback_shape(method, grid)
        same = [c for c in grid if _shape(c) == shape]
        pts = [_point(c, _run(c, rep), even, reps, seed, candidate_label(c)) for c in same]
        held_choice = _run(choice, rep)
        methods[name] = {**_point(choice, held_choice, even, reps, seed, candidate_label(choice)),
                         "calibration": calib.summary(), "tokens_by_kind": held_choice.summary(), "curve": pts}
    if program == "cot":
        oracle = forced_answer_oracle(rep) if has_text_probes(held) else rep.oracle_cot()
        methods["oracle-bound"] = {"label": "ORACLE: exit at the first probe that equals the chain's final answer",
                                   "oracle": True, **compare(oracle, even, reps=reps, seed=seed),
                                   "tokens_by_kind": oracle.summary()}
        for name, c in preset_candidates().items():
            if c.interval % rep.interval:
                if c.signal is None:  # a Dynasor preset the trace cannot replay says why
                    skip = f"interval {c.interval} is not a multiple of the trace's {rep.interval}"
                    methods[name] = {"skipped": skip}
                continue
            s = _run(c, rep)
            label = (f"certa {name.removeprefix('certa-')} ({candidate_label(c)})" if name != "certa-default" else
                     f"certa default ({candidate_label(c)})") if c.signal is not None else \
                f"{name.removeprefix('dynasor-')} (k={c.k}, T={c.interval})"
            methods[name] = {**_point(c, s, even, reps, seed, label), "tokens_by_kind": s.summary()}
    return {"program": program, "problems": len(problems), "calibration_problems": len(cal),
            "heldout_problems": len(held), "cal_fraction": cal_fraction, "seed": seed, "orders": orders,
            "bootstrap_reps": reps, "models": sorted({p.model for p in problems}),
            "samples_per_problem": rep.n_samples if program == "sc" else None,
            "interval": rep.interval if program == "cot" else None,
            "text_probes": has_text_probes(problems) if program == "cot" else None,
            "heldout_idx": [p.idx for p in held], "methods": methods, "targets": _targets(program, methods)}


def preset_candidates() -> dict[str, Candidate]:
    """The fixed CoT rules as shipped, never calibrated: ``dynasor-<preset>`` for each of Dynasor's
    presets (its rule over k probes), ``certa-default``, the default ``cot_program``'s certaindex,
    ``certa-settled`` (the ``settled`` preset, the default before the reasoning certaindex), and ``certa-text``, ``cot_program("text")``'s (text probes: reads the chain's committed answer);
    each stops the first time its signal reaches 1.0."""
    first = Threshold(1.0, detect_at=1, every=1)
    out = {f"dynasor-{n}": Candidate("preset", first, k=k, interval=t) for n, (k, t) in PRESETS.items()}
    sig = certa_signal()
    out["certa-default"] = Candidate("preset", first, k=sig.window, interval=CERTA_INTERVAL, signal=sig)
    old = settled_signal()
    out["certa-settled"] = Candidate("preset", first, k=old.window, interval=CERTA_INTERVAL, signal=old)
    out["certa-text"] = Candidate("preset", first, k=1, interval=TEXT_INTERVAL, signal=text_signal())
    return out


def _signal_label(spec: dict[str, Any]) -> str:
    if spec["kind"] in ("all", "any"):
        inner = (" & " if spec["kind"] == "all" else " | ").join(_signal_label(p) for p in spec["parts"])
        return inner if spec["kind"] == "all" else f"({inner})"
    args = ",".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in
                    (v for k, v in spec.items() if k != "kind"))
    return f"{spec['kind']}({args})"


def candidate_label(c: Candidate) -> str:
    """A short human label of a calibration candidate (its signal and interval, or its policy)."""
    if c.signal is not None:
        return f"{_signal_label(c.signal.to_dict())} T={c.interval}"
    p = c.policy.to_dict() if c.policy is not None else {}
    if c.method == "threshold":
        return f"tau={p['tau']:.3g} d={p['detect_at']} every={p['every']}"
    if c.method == "pareto":
        return f"pareto d={p['detect_at']} {p['curve']}"
    if c.method == "esc":
        return f"window={p['window']}"
    if c.method == "adaptive-consistency":
        return f"threshold={p['threshold']}"
    if c.method == "even":
        return f"even {p['cap']}"
    return f"k={c.k} T={c.interval} first={p.get('detect_at')}"


def _targets(program: ProgramKind, methods: dict[str, Any]) -> dict[str, Any]:
    t = TARGETS[program]
    ok = [name for name, m in methods.items() if not name.startswith(("baseline", "oracle")) and "token_ratio" in m
          and m["token_ratio"] <= t["token_ratio"] and m["accuracy_delta"] >= -t["accuracy_drop"] - 1e-12]
    return {**t, "met_by": ok, "met": bool(ok)}


def plot(report: dict[str, Any], path: str | Path) -> Path:
    """Accuracy vs mean tokens per problem (held-out) for every method; writes a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for name, m in report["methods"].items():
        if "tokens" not in m:
            continue
        curve = sorted((p["tokens"], p["accuracy"]) for p in m.get("curve", []))
        if name.startswith("baseline"):
            ax.plot(*zip(*curve), marker="o", ms=3, lw=1.5, label=name)
            continue
        line = ax.plot(*zip(*curve), lw=0.8, alpha=0.4)[0] if curve else None
        ax.plot([m["tokens"]], [m["accuracy"]], marker="*", ms=12, ls="none",
                color=line.get_color() if line else None,
                label=f"{name} ({m['token_ratio']:.2f}x, {100 * m['accuracy_delta']:+.1f} pt)")
    ax.set_xlabel("decode tokens per problem (main + probe + score)")
    ax.set_ylabel("accuracy (held-out)")
    ax.set_title(f"{report['program'].upper()}: {report['heldout_problems']} held-out problems "
                 f"({', '.join(report['models'])})", fontsize=9)
    return save_png(fig, ax, path)


def save_png(fig: Any, ax: Any, path: str | Path) -> Path:
    """Finish a benchmark plot (grid, legend at lower right) and write it to ``path`` as a 120-dpi PNG.

    The figure is closed afterwards; the parent folder is created. Returns the written path.
    """
    import matplotlib.pyplot as plt

    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
