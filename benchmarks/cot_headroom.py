"""How much can any CoT probe rule save on these traces? Headroom figures for the CoT certaindex.

On every probed chain of a trace file (the documented JSONL format, probes with ``chars``):

- where the chain's *text* first produces its final answer (the right-hand side of an ``=``,
  a code output block or "answer is": :class:`~certa.algorithms.signals.cot.Grounded`), as a
  fraction of the chain — what is left after it is all a text-grounded rule could save;
- ORACLE exits (they use each chain's final answer, unknowable live): the first probe that
  equals it, paying that probe only (``Replayer.oracle_cot``), or paying every probe a live
  rule probing every ``T`` tokens pays; and the first such probe the text has grounded,
  paying only that probe (the bound for any grounded rule, event-triggered probing included);
- probe cost: decode tokens per probe and per chain at each interval;
- early guesses: how often a probe taken before the text produced its answer already equals
  the chain's final answer, and how often it is correct;
- in-sample best of every CoT method: the largest saving whose accuracy is within ``--tolerance``
  of full chains, choosing on the very problems it is scored on (an optimistic bound for a
  calibrated rule).

    python benchmarks/cot_headroom.py --traces data/traces/gsm8k_dev_qwen2.5-coder-1.5b.jsonl.gz \\
        --json results/cot_headroom.json

Token ratios are decode tokens (main + probe decode) over full chains' main tokens. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from certa.eval.calibration import METHODS, candidates
from certa.algorithms.signals.cot import ChainView, Grounded
from certa.algorithms.answers.equivalence import math_equal
from certa.eval.replay import probed
from certa.eval.replay_eval import Replayer, trace_interval
from certa.algorithms.signals import ProbeObs
from certa.eval.replay_backend import probe_cost, text_at
from certa.runtime.errors import ConfigError
from certa.eval.traces import load_traces

GROUNDED = Grounded("stated")


def _grounded(sample, probe) -> bool:
    obs = ProbeObs(probe.at, probe.answer or "", "", None)
    return GROUNDED(ChainView([obs], text_at(sample, probe.at), probe.at)) >= 1.0


def _first_production(sample) -> float | None:
    """Fraction of the chain's text at which it first produces its final answer (None: never)."""
    if not sample.pred:
        return None
    text, probe = sample.text, ProbeObs(0, sample.pred, "", None)
    lo = next((n for n in range(1, len(text) + 1, 8) if GROUNDED(ChainView([probe], text[:n], 0)) >= 1.0), None)
    if lo is None:
        return None
    while lo > 1 and GROUNDED(ChainView([probe], text[:lo - 1], 0)) >= 1.0:
        lo -= 1
    return lo / max(1, len(text))


def _quartiles(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"p25": round(q[0], 3), "median": round(q[1], 3), "p75": round(q[2], 3),
            "mean": round(statistics.fmean(xs), 3)}


def headroom(problems, *, intervals=(32, 64), tolerance=0.005) -> dict:
    chains = [(p, s) for p in problems for s in p.samples if probed(s, trace_interval(p))]
    replayer = Replayer(problems, "cot")
    grade = {p.idx: replayer.grader(p) for p in problems}
    def same(a: str | None, b: str | None) -> bool:
        return bool(a) and bool(b) and bool(math_equal(a, b))
    full_tokens = statistics.fmean(s.tokens for _, s in chains)
    full_acc = statistics.fmean(float(s.correct) for _, s in chains)

    produced = [f for _, s in chains if (f := _first_production(s)) is not None]
    out: dict = {"problems": len(problems), "chains": len(chains),
                 "full_chain": {"accuracy": round(full_acc, 4), "tokens": round(full_tokens, 1)},
                 "final_answer_in_text": {"chains_producing_it": len(produced), **_quartiles(produced)}}

    oracle = replayer.oracle_cot().summary()
    out["oracle_one_probe"] = {"token_ratio": round(oracle["tokens"] / full_tokens, 4),
                               "accuracy": oracle["accuracy"]}
    per_probe = [probe_cost(q) for _, s in chains for q in s.probes]
    out["probe_decode_tokens"] = round(statistics.fmean(per_probe), 2)
    for t in intervals:
        for only_grounded in (False, True):
            spent = correct = 0.0
            for p, s in chains:
                paid, hit = 0, None
                for q in s.probes:
                    if q.at % t or q.at >= s.tokens:
                        continue
                    paid = probe_cost(q) if only_grounded else paid + probe_cost(q)
                    if same(q.answer, s.pred) and (not only_grounded or _grounded(s, q)):
                        hit = q
                        break
                paid = paid if hit or not only_grounded else 0
                spent += (hit.at if hit else s.tokens) + paid
                correct += grade[p.idx](hit.answer) if hit else float(s.correct)
            key = f"oracle_grounded_one_probe_every_{t}" if only_grounded else f"oracle_every_{t}"
            out[key] = {"token_ratio": round(spent / len(chains) / full_tokens, 4),
                        "accuracy": round(correct / len(chains), 4)}
        taken = [q for _, s in chains for q in s.probes if q.at % t == 0 and q.at < s.tokens]
        out[f"probes_per_chain_every_{t}"] = round(len(taken) / len(chains), 2)  # a rule that never exits
        out[f"probe_decode_share_every_{t}"] = round(sum(map(probe_cost, taken)) / len(chains) / full_tokens, 4)

    early = [(p, s, q) for p, s in chains for q in s.probes if q.answer and q.at < s.tokens and not _grounded(s, q)]
    out["ungrounded_probes"] = {
        "probes": len(early),
        "equal_final_answer": round(statistics.fmean(same(q.answer, s.pred) for _, s, q in early), 4) if early else None,
        "correct": round(statistics.fmean(grade[p.idx](q.answer) for p, _, q in early), 4) if early else None}

    best: dict = {}
    for method in METHODS["cot"]:
        try:
            grid = candidates(replayer, method)
        except ConfigError as exc:  # e.g. confident without logprobs
            best[method] = {"skipped": str(exc)}
            continue
        top = None
        for cand in grid:
            sc = cand.run(replayer).summary()
            ratio, delta = sc["tokens"] / full_tokens, sc["accuracy"] - full_acc
            if delta >= -tolerance and (top is None or ratio < top["token_ratio"]):
                top = {"token_ratio": round(ratio, 4), "accuracy_delta": round(delta, 4), **cand.params()}
        best[method] = top or {"none_within_tolerance": True}
    out["in_sample_best"] = {"tolerance": tolerance, "methods": best}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", required=True)
    ap.add_argument("--json", default="results/cot_headroom.json")
    ap.add_argument("--tolerance", type=float, default=0.005, help="accuracy loss allowed (fraction)")
    args = ap.parse_args()
    report = {"traces": Path(args.traces).name, **headroom(load_traces(args.traces), tolerance=args.tolerance)}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "in_sample_best"}, indent=1))
    for name, b in report["in_sample_best"]["methods"].items():
        print(f"  in-sample best {name:10s} {b}")


if __name__ == "__main__":
    main()
