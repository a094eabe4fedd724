"""Token savings at iso-accuracy on recorded traces: SC and CoT, every method vs baseline-even.

Replays a trace file (the documented JSONL format; e.g. from ``certa traces collect``):
calibrates each method on a seeded calibration split and reports it on the held-out split
with bootstrap 95% CIs, as ``certa bench tokens`` does, for both programs (CoT only when
the traces carry probes), plus the calibrated SC policy file.

    python benchmarks/token_savings.py --traces t.jsonl --out-dir results/ [--orders 8] [--seed 0]

Writes ``sc_tokens.json``/``.png``, ``cot_tokens.json``/``.png`` and ``sc_policy.json`` into
``--out-dir`` and prints one line per method. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from certa.eval.bench_tokens import bench_tokens, plot
from certa.eval.calibration import calibrate_split
from certa.eval.replay import probed
from certa.eval.replay_eval import trace_interval
from certa.eval.traces import load_traces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", required=True)
    ap.add_argument("--out-dir", default="results")
    ap.add_argument("--cal-fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--orders", type=int, default=8, help="SC draw orders per problem")
    ap.add_argument("--reps", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--no-png", action="store_true")
    args = ap.parse_args()
    problems = load_traces(args.traces)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    programs = ["sc"] + (["cot"] if all(any(probed(s, trace_interval(p)) for s in p.samples) for p in problems)
                         else [])
    for program in programs:
        report = bench_tokens(problems, program, cal_fraction=args.cal_fraction, seed=args.seed,
                              orders=args.orders, reps=args.reps)
        report["traces"] = args.traces
        (out / f"{program}_tokens.json").write_text(json.dumps(report, indent=1) + "\n")
        if not args.no_png:
            plot(report, out / f"{program}_tokens.png")
        print(f"{program}: {report['heldout_problems']} held-out of {report['problems']} problems")
        for name, m in report["methods"].items():
            if "tokens" in m:
                ci = m["ci95"]["token_ratio"]
                print(f"  {name:22s} acc {m['accuracy']:.3f} ({100 * m['accuracy_delta']:+.1f} pt) "
                      f"tokens x{m['token_ratio']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]  {m.get('label', '')}")
        t = report["targets"]
        print(f"  target: {'met by ' + ', '.join(t['met_by']) if t['met'] else 'not met'}")
    policy = calibrate_split(problems, "sc", cal_fraction=args.cal_fraction, seed=args.seed, orders=args.orders,
                             reps=args.reps)
    (out / "sc_policy.json").write_text(json.dumps(policy, indent=1) + "\n")
    print(f"sc policy: {json.dumps(policy['policy'])} -> {out / 'sc_policy.json'}")


if __name__ == "__main__":
    main()
