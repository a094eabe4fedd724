"""Choose the default SC stopping policy by leave-one-dataset-out; score it beside its peers.

Every method family gets one fixed parameter per scored trace set, chosen on the sets of the
*other* datasets only (leave-one-dataset-out: a GSM8K set is never scored with a parameter
picked on any GSM8K set), by one rule: among the grid points that stay within
``--tolerance`` accuracy points of full-budget majority voting on **every** training set,
the one with the lowest mean token ratio over them (ties: the earlier, more conservative
point; none feasible: the full budget). Dev sets: the GSM8K x16 and MATH-500 x8 traces of
the 1.5B model and, for more variety without touching reserved rows, the GSM8K file split
into two x8 sets (samples 0-7 and 8-15 of every problem: a "weak model, 8 samples" analogue).
Families:

- ``default`` — :class:`~certa.algorithms.policies.votes.StableVote`: stop when the
  posterior-predictive probability that the full-budget vote differs from today's is
  <= ``delta``;
- ``weighted-vote`` — :class:`~certa.algorithms.policies.votes.VoteStop` (the previous
  default): the weighted-vote Beta certaindex, ``tau`` x ``length_weight``;
- ``esc`` (window), ``adaptive-consistency`` (threshold), ``even`` (budget as a fraction of
  the samples N, so it transfers between 8- and 16-sample sets);
- ``oracle`` (each draw order stops at the fewest samples whose vote is the vote of all; a
  bound, never chosen).

The shipped default (:data:`~certa.algorithms.policies.votes.SC_DEFAULT`) is the same rule on
all dev sets at once; the report says whether it equals each fold's choice. Figures are
replays of the whole trace file (``--orders`` seeded draw orders per problem) with
bootstrap 95% CIs over problems; reserved rows are refused.

    python benchmarks/sc_default.py --json docs/results/sc_default.json --png docs/results/sc_default.png \\
        [--traces gsm8k=data/traces/gsm8k_dev_qwen2.5-coder-1.5b.jsonl.gz@0:8 ...] [--orders 20] [--seed 0] \\
        [--robustness-seeds 1 2 3]

(``NAME=PATH[@LO:HI]``: samples LO..HI-1 of every problem; the dataset is the traces' ``dataset``.)

Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from certa.algorithms.policies import ESC, AdaptiveConsistency, policy_from_dict
from certa.algorithms.policies.votes import SC_DEFAULT
from certa.eval.calibration import check_not_reserved
from certa.eval.evalstats import compare
from certa.eval.replay_eval import Replayer, Scores
from certa.eval.traces import load_traces
from certa.runtime.policy import Even, Policy

ROOT = Path(__file__).resolve().parents[1]
GSM8K, MATH500 = "data/traces/gsm8k_dev_qwen2.5-coder-1.5b.jsonl.gz", "data/traces/math500_dev_qwen2.5-coder-1.5b.jsonl.gz"
DEV = {"gsm8k-1.5b": GSM8K, "gsm8k-1.5b-x8a": f"{GSM8K}@0:8", "gsm8k-1.5b-x8b": f"{GSM8K}@8:16",
       "math500-1.5b": MATH500}
DELTAS = (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15, 0.2)
FRACTIONS = tuple(i / 8 for i in range(1, 9))


def families() -> dict[str, list[dict[str, Any]]]:
    """Each family's grid, most conservative first (a ``Policy.from_dict`` spec, or an even fraction)."""
    stable = [{"kind": "stable_vote", "delta": d, "min_samples": 2, "alpha": 1.0, "horizon": None, "same": "math"}
              for d in DELTAS]
    vote = [{"kind": "vote", "tau": t, "length_weight": a, "confidence_floor": None, "min_samples": 2,
             "same": "math"} for t in (0.95, 0.9, 0.85, 0.8, 0.75, 0.7) for a in (0.0, 0.25, 0.5)]
    return {"default": stable, "weighted-vote": vote,
            "esc": [ESC(window=w).to_dict() for w in (8, 6, 5, 4, 3, 2)],
            "adaptive-consistency": [AdaptiveConsistency(t).to_dict() for t in (0.999, 0.99, 0.95, 0.9, 0.85, 0.8)],
            "even": [{"kind": "even_fraction", "fraction": f} for f in reversed(FRACTIONS)]}


def build(spec: dict[str, Any], n: int) -> Policy:
    if spec["kind"] == "even_fraction":
        return Even(max(1, math.ceil(spec["fraction"] * n - 1e-9)))
    return policy_from_dict(spec)


class DevSet:
    """One whole trace file: its replayer, baseline-even ladder and memoized candidate scores."""

    def __init__(self, name: str, path: str, orders: int, seed: int) -> None:
        self.name, self.path = name, path
        file, _, window = path.partition("@")
        problems = load_traces(ROOT / file if not Path(file).is_absolute() else file)
        check_not_reserved(problems, None)
        if window:
            lo, hi = (int(x) for x in window.split(":"))
            problems = [p.model_copy(update={"samples": p.samples[lo:hi]}) for p in problems]
        self.dataset = str((problems[0].model_extra or {}).get("dataset") or file)
        self.rep = Replayer(problems, "sc", seed=seed, orders=orders)
        self.n = self.rep.n_samples
        self.even = [self.rep.run(Even(k)) for k in range(1, self.n + 1)]
        self._memo: dict[str, Scores] = {}

    def scores(self, spec: dict[str, Any]) -> Scores:
        key = json.dumps(spec, sort_keys=True)
        if key not in self._memo:
            self._memo[key] = self.rep.run(build(spec, self.n))
        return self._memo[key]

    def ratio_delta(self, spec: dict[str, Any]) -> tuple[float, float]:
        s, full = self.scores(spec), self.even[-1]
        return s.mean_tokens / full.mean_tokens, s.accuracy - full.accuracy


def choose(grid: list[dict[str, Any]], train: list[DevSet], tolerance: float) -> dict[str, Any]:
    """The selection rule of the module docstring, on ``train`` only."""
    best, best_cost = None, math.inf
    for spec in grid:
        rd = [d.ratio_delta(spec) for d in train]
        if all(delta >= -tolerance - 1e-12 for _, delta in rd):
            cost = sum(r for r, _ in rd) / len(rd)
            if cost < best_cost - 1e-12:
                best, best_cost = spec, cost
    return best if best is not None else {"kind": "even_fraction", "fraction": 1.0}


def row(d: DevSet, scores: Scores, reps: int, seed: int, **extra: Any) -> dict[str, Any]:
    out = compare(scores, d.even, reps=reps, seed=seed)
    out["samples"] = round(float(scores.knob.mean()), 3)
    return {**extra, **out}


def run(sets: list[DevSet], tolerance: float, reps: int, seed: int) -> dict[str, Any]:
    fams = families()
    shipped = {f: choose(g, sets, tolerance) for f, g in fams.items()}
    report: dict[str, Any] = {"sets": {}, "shipped": shipped, "shipped_default_matches_code": shipped["default"]
                              == SC_DEFAULT, "SC_DEFAULT": SC_DEFAULT}
    for d in sets:
        train = [t for t in sets if t.dataset != d.dataset]
        methods: dict[str, Any] = {}
        full = d.even[-1]
        methods["full-majority"] = row(d, full, reps, seed, policy={"kind": "even", "cap": d.n})
        methods["full-majority"] |= {"iso_token_ratio": 1.0, "iso_note": "the reference itself"}
        methods["full-majority"]["ci95"]["iso_token_ratio"] = [1.0, 1.0]
        for fam, grid in fams.items():
            pick = choose(grid, train, tolerance)
            methods[fam] = row(d, d.scores(pick), reps, seed, policy=pick, trained_on=[t.name for t in train])
        methods["shipped-default"] = row(d, d.scores(SC_DEFAULT), reps, seed, policy=SC_DEFAULT,
                                         in_sample=True, note="chosen on every dev set, this one included")
        methods["oracle"] = {**row(d, d.rep.oracle_sc(), reps, seed), "oracle": True}
        methods["even-curve"] = [{"cap": k + 1, "tokens": round(e.mean_tokens, 3), "accuracy": round(e.accuracy, 6)}
                                 for k, e in enumerate(d.even)]
        peers = [methods[p]["tokens"] for p in ("esc", "adaptive-consistency", "even")]
        valid_peers = [methods[p]["tokens"] for p in ("esc", "adaptive-consistency", "even")
                       if methods[p]["accuracy_delta"] >= -tolerance - 1e-12] or [full.mean_tokens]
        m = methods["default"]
        report["sets"][d.name] = {
            "traces": d.path, "dataset": d.dataset, "problems": len(d.rep.problems), "samples": d.n,
            "orders": d.rep.orders,
            "methods": methods,
            "targets": {"within_0.5pt": m["accuracy_delta"] >= -0.005 - 1e-12,
                        "fewer_tokens_than_best_peer": m["tokens"] < min(peers),
                        "best_peer_tokens": min(peers),
                        "fewer_tokens_than_best_peer_within_0.5pt": m["tokens"] < min(valid_peers),
                        "best_peer_within_0.5pt_tokens": min(valid_peers)}}
    return report


def robustness(traces: list[str], seeds: list[int], orders: int, tolerance: float) -> dict[str, Any]:
    """The whole leave-one-dataset-out choice re-run with other draw-order seeds, compactly:
    per seed and set, each family's pick, token ratio and accuracy delta, and the targets."""
    fams = ["default", "weighted-vote", "esc", "adaptive-consistency", "even"]
    out: dict[str, Any] = {"seeds": {}, "cells": 0, "within_0.5pt": dict.fromkeys(fams, 0),
                           "default_fewer_tokens_than_best_peer": 0,
                           "default_fewer_tokens_than_best_peer_within_0.5pt": 0}
    for seed in seeds:
        rep = run([DevSet(*t.split("=", 1), orders=orders, seed=seed) for t in traces], tolerance, 200, seed)
        out["seeds"][str(seed)] = {}
        for name, r in rep["sets"].items():
            ms = r["methods"]
            out["seeds"][str(seed)][name] = {
                **{f: {"policy": ms[f]["policy"], "token_ratio": round(ms[f]["token_ratio"], 4),
                       "accuracy_delta": round(ms[f]["accuracy_delta"], 6)} for f in fams},
                "targets": r["targets"]}
            out["cells"] += 1
            for f in fams:
                out["within_0.5pt"][f] += ms[f]["accuracy_delta"] >= -tolerance - 1e-12
            out["default_fewer_tokens_than_best_peer"] += r["targets"]["fewer_tokens_than_best_peer"]
            out["default_fewer_tokens_than_best_peer_within_0.5pt"] += \
                r["targets"]["fewer_tokens_than_best_peer_within_0.5pt"]
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["default", "weighted-vote", "esc", "adaptive-consistency", "even", "oracle"]
    sets = list(report["sets"])
    fig, axes = plt.subplots(1, len(sets), figsize=(4.6 * len(sets), 4.2), squeeze=False)
    for ax, s in zip(axes[0], sets):
        ms = report["sets"][s]["methods"]
        ratios = [ms[n]["token_ratio"] for n in names]
        bars = ax.bar(range(len(names)), ratios, color=["C3", "C4", "C0", "C1", "C2", "0.6"])
        for b, n in zip(bars, names):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height() + 0.01,
                    f"{100 * ms[n]['accuracy_delta']:+.1f}pt", ha="center", fontsize=8)
        ax.set_xticks(range(len(names)), ["default", "w-vote", "ESC", "AC", "even(k)", "oracle"], fontsize=8)
        ax.set_ylim(0, 1.1)
        ax.set_title(f"{s}: chosen on the other dataset", fontsize=9)
        ax.set_ylabel("tokens / full-budget majority")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="*", default=[f"{k}={v}" for k, v in DEV.items()], help="NAME=PATH ...")
    ap.add_argument("--json", default="docs/results/sc_default.json")
    ap.add_argument("--png", default="docs/results/sc_default.png")
    ap.add_argument("--orders", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--tolerance", type=float, default=0.005, help="accuracy loss allowed on training sets")
    ap.add_argument("--robustness-seeds", type=int, nargs="*", default=[],
                    help="re-run the whole choice with these draw-order seeds (compact rows in the JSON)")
    args = ap.parse_args()
    sets = [DevSet(*t.split("=", 1), orders=args.orders, seed=args.seed) for t in args.traces]
    report = {"tolerance": args.tolerance, "orders": args.orders, "seed": args.seed, "bootstrap_reps": args.reps,
              **run(sets, args.tolerance, args.reps, args.seed)}
    if args.robustness_seeds:
        report["order_seed_robustness"] = robustness(args.traces, args.robustness_seeds, args.orders, args.tolerance)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if args.png:
        plot(report, Path(args.png))
    print(f"shipped: {json.dumps(report['shipped'])} (matches SC_DEFAULT: {report['shipped_default_matches_code']})")
    for s, r in report["sets"].items():
        print(f"{s} ({r['problems']} problems x {r['samples']} samples, {r['orders']} orders):")
        for name, m in r["methods"].items():
            if isinstance(m, dict):
                ci = m["ci95"]
                print(f"  {name:22s} x{m['token_ratio']:.3f} [{ci['token_ratio'][0]:.3f}, {ci['token_ratio'][1]:.3f}]"
                      f"  {100 * m['accuracy_delta']:+.2f} pt [{100 * ci['accuracy_delta'][0]:+.1f}, "
                      f"{100 * ci['accuracy_delta'][1]:+.1f}]  {json.dumps(m.get('policy', ''))}")
        print(f"  targets: {r['targets']}")
    if "order_seed_robustness" in report:
        rob = report["order_seed_robustness"]
        print(f"other seeds {list(rob['seeds'])}: {rob['cells']} (seed, set) cells; within 0.5 pt: {rob['within_0.5pt']};"
              f" default fewer tokens than the best peer: {rob['default_fewer_tokens_than_best_peer']}, than the best"
              f" peer within 0.5 pt: {rob['default_fewer_tokens_than_best_peer_within_0.5pt']}")


if __name__ == "__main__":
    main()
