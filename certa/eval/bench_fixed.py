r"""Score fixed SC stopping policies on a whole trace file: no calibration, baselines beside them.

:func:`bench_fixed` replays each given policy on **every** problem of the file (``orders``
seeded draw orders per problem, default 20) and reports it beside

* ``baseline-even`` — full-budget majority voting (the reference: ``token_ratio`` and
  ``iso_token_ratio`` 1.0) and ``even(k)`` for every smaller budget k;
* ``esc`` and ``adaptive-consistency`` at their shipped fixed parameters
  (:data:`~certa.algorithms.policies.votes.SC_PEERS`);
* ``oracle-bound`` (each draw order stops at the fewest samples whose vote is the vote of all).

Each row: tokens, accuracy, ``token_ratio``/``accuracy_delta`` vs full-budget majority,
``iso_token_ratio`` vs baseline-even at matched accuracy, bootstrap 95% CIs over problems.
Nothing is tuned here, so the whole file is scored; reserved rows (GSM8K idx >= 800, MATH-500
idx >= 300) are refused unless ``final=True``, which marks the report a final report.
:data:`SC_SHIPPED` names the shipped policies (``sc-default``, ``esc``,
``adaptive-consistency``, ``certa-threshold``: the paper's rule as ``sc_program`` used it,
``weighted-vote``: the SC default before the stable vote).

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> r = bench_fixed(synth_traces(6, seed=0, samples=8, probed=0), {"sc-default": shipped_policy("sc-default")},
    ...                 orders=2, reps=50)
    >>> r["methods"]["baseline-even"]["iso_token_ratio"], "even(7)" in r["methods"], r["final"]
    (1.0, True, False)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from certa.algorithms.policies import policy_from_dict
from certa.algorithms.policies.votes import SC_DEFAULT, SC_PEERS, VoteStop
from certa.eval.bench_tokens import save_png
from certa.eval.calibration import check_not_reserved
from certa.eval.evalstats import compare
from certa.eval.replay_eval import Replayer, check_traces
from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Even, Policy, Threshold
from certa.runtime.registry import Registry

__all__ = ["DEFAULT_ORDERS", "SC_SHIPPED", "bench_fixed", "load_policy", "plot_fixed", "shipped_policy"]

DEFAULT_ORDERS = 20
"""Draw orders per problem when scoring fixed policies (one order can flip a comparison)."""

SC_SHIPPED: Registry[Policy] = Registry("shipped SC policy")
"""The shipped SC policies by name (``certa bench tokens --shipped NAME``)."""
SC_SHIPPED.register("sc-default", lambda: policy_from_dict(SC_DEFAULT), help="sc_program()'s default policy")
SC_SHIPPED.register("esc", lambda: policy_from_dict(SC_PEERS["esc"]), help="ESC, the published peer")
SC_SHIPPED.register("adaptive-consistency", lambda: policy_from_dict(SC_PEERS["adaptive-consistency"]),
                    help="Adaptive-Consistency, the published peer")
SC_SHIPPED.register("certa-threshold", lambda: Threshold(0.55, detect_at=4, every=4), help="the paper's rule")
SC_SHIPPED.register("weighted-vote", lambda: VoteStop(0.8, length_weight=0.25, min_samples=2),
                    help="a length-weighted vote")


def shipped_policy(name: str) -> Policy:
    """A fresh instance of the shipped SC policy ``name`` (ConfigError naming the known ones)."""
    return SC_SHIPPED.make(name)


def load_policy(path: str | Path) -> Policy:
    """A policy from a file: a ``certa calibrate`` policy file (its ``policy``) or a bare policy dict."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    spec = data.get("policy", data) if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: expected a policy object or a file with a 'policy' object")
    return policy_from_dict(spec)


def _row(label: str, policy: Policy | None, scores: Any, even: list, reps: int, seed: int) -> dict[str, Any]:
    return {"label": label, "policy": None if policy is None else policy.to_dict(),
            **compare(scores, even, reps=reps, seed=seed), "samples": round(float(scores.knob.mean()), 3),
            "tokens_by_kind": scores.summary()}


def bench_fixed(problems: Sequence[TraceProblem], policies: Mapping[str, Policy], *, orders: int = DEFAULT_ORDERS,
                seed: int = 0, dataset: str | None = None, reps: int = 1000, final: bool = False) -> dict[str, Any]:
    """Replay ``policies`` (name -> policy) on all of ``problems``; the JSON-ready report."""
    if not policies:
        raise ConfigError("no policy to score", hint="pass --policy FILE and/or --shipped NAME")
    check_traces(problems, "sc")
    if not final:
        check_not_reserved(problems, dataset)
    rep = Replayer(problems, "sc", seed=seed, orders=orders, dataset=dataset)
    n = rep.n_samples
    ladder = [Even(k) for k in range(1, n + 1)]
    even = [rep.run(p) for p in ladder]
    full = _row(f"full-budget majority ({n} samples)", ladder[-1], even[-1], even, reps, seed)
    full["iso_token_ratio"] = 1.0  # the reference itself (the envelope may reach its accuracy sooner)
    full["ci95"]["iso_token_ratio"] = [1.0, 1.0]
    methods: dict[str, Any] = {"baseline-even": full}
    for name, policy in policies.items():
        methods[name] = _row(name, policy, rep.run(policy), even, reps, seed)
    for name in ("esc", "adaptive-consistency"):
        if name not in methods:
            policy = shipped_policy(name)
            methods[name] = _row(f"{name} (shipped fixed parameter)", policy, rep.run(policy), even, reps, seed)
    oracle = rep.oracle_sc()
    methods["oracle-bound"] = {**_row("ORACLE: stop at the fewest samples whose vote is the vote of all", None,
                                      oracle, even, reps, seed), "oracle": True}
    for k in range(n - 1, 0, -1):
        methods[f"even({k})"] = _row(f"{k} sample{'s' if k > 1 else ''}", ladder[k - 1], even[k - 1], even, reps, seed)
    return {"program": "sc", "mode": "fixed", "final": final, "problems": len(rep.problems), "orders": orders,
            "seed": seed, "bootstrap_reps": reps, "samples_per_problem": n,
            "models": sorted({p.model for p in problems}), "scored": list(policies),
            "idx": [p.idx for p in rep.problems], "methods": methods}


def plot_fixed(report: dict[str, Any], path: str | Path) -> Path:
    """Accuracy vs mean tokens per problem: the even(k) curve and every other row as a star (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = report["methods"]
    even = sorted((m["tokens"], m["accuracy"]) for n, m in ms.items() if n == "baseline-even" or n.startswith("even("))
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.plot(*zip(*even), marker="o", ms=3, lw=1.5, color="0.4", label="baseline-even (1..N samples)")
    for name, m in ms.items():
        if name != "baseline-even" and not name.startswith("even("):
            ax.plot([m["tokens"]], [m["accuracy"]], marker="*", ms=12, ls="none",
                    label=f"{name} ({m['token_ratio']:.2f}x, {100 * m['accuracy_delta']:+.1f} pt)")
    ax.set_xlabel("decode tokens per problem")
    ax.set_ylabel("accuracy (whole file" + (", FINAL REPORT)" if report.get("final") else ")"))
    ax.set_title(f"SC fixed policies: {report['problems']} problems x {report['samples_per_problem']} samples, "
                 f"{report['orders']} orders", fontsize=9)
    return save_png(fig, ax, path)
