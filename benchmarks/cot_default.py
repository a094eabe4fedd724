"""Choose the default CoT certaindex (the ``certa`` preset) on every trace set at once, report held-out.

A fixed default cannot learn a dataset's typical chain length, so its grid holds only
evidence that means the same on any dataset: Dynasor's agreement of the last ``k`` probes AND
no hesitation in the chain's text (the preset's structure), optionally AND the answer is
grounded in the text (``computed`` / ``stated``) and/or AND the model's probability of its
probed answer is at least ``p``; a probe every ``T`` tokens (the traces' probe interval and
twice it: 32 and 64 for certa's traces). For each trace set the problems
are split as ``certa calibrate`` splits them (``--cal-fraction``, ``--seed``):

- **calibration halves**: a candidate is feasible when it loses no chain's correctness vs
  full chains on *any* set's calibration half (``calibrate``'s rule); the pick is the feasible
  candidate with the lowest mean token ratio over the sets (ties: the earlier grid point);
- **held-out halves**: the pick, the current default (``certa_signal``) and every Dynasor
  preset are reported there with bootstrap 95% CIs over problems; nothing there is chosen.

    python benchmarks/cot_default.py --json results/cot_default.json \\
        [--traces data/traces/gsm8k_dev_qwen2.5-coder-1.5b.jsonl.gz data/traces/math500_dev_qwen2.5-coder-1.5b.jsonl.gz]

Token ratios are decode tokens (main + probe decode) over full chains' main tokens. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from certa.eval.bench_tokens import candidate_label, preset_candidates
from certa.eval.calibration import Candidate, check_not_reserved, even_ladder, split_problems
from certa.eval.cot_grid import has_logprobs
from certa.algorithms.signals.cot import AllOf, Confident, CoTSignal, Grounded, ProbeAgreement, Settled
from certa.eval.evalstats import compare
from certa.eval.replay_eval import Replayer
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Threshold
from certa.eval.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
FIRST = Threshold(1.0, detect_at=1, every=1)  # stop the first time the signal reaches 1.0


def grid(*, logprobs: bool, intervals: tuple[int, ...] = (32, 64)) -> list[Candidate]:
    """Dataset-agnostic candidates, most conservative evidence last within each (k, T)."""
    out = []
    for k in (2, 3, 4, 5):
        for t in intervals:
            for mode in (None, "computed", "stated"):
                for p in ((None, 0.5, 0.7, 0.8, 0.9) if logprobs else (None,)):
                    parts: list[CoTSignal] = [ProbeAgreement(k), Settled()]
                    parts += [Grounded(mode)] if mode else []
                    parts += [Confident(p)] if p is not None else []
                    out.append(Candidate("default", FIRST, k=k, interval=t, signal=AllOf(*parts)))
    return out


class TraceSet:
    """One trace file's calibration and held-out replayers with their full-chain baselines."""

    def __init__(self, path: str, problems: list, cal_fraction: float, seed: int) -> None:
        self.path = path
        problems = [p for p in problems if any(s.probes for s in p.samples)]
        if len(problems) < 2:
            raise ConfigError(f"{path}: needs at least 2 problems with probed chains")
        self.logprobs = has_logprobs(problems)
        cal, held = split_problems(problems, cal_fraction, seed)
        check_not_reserved(cal, None)  # the trace's own `dataset` field says which rows are reserved
        self.parts = {}
        for name, part in (("calibration", cal), ("heldout", held)):
            rep = Replayer(part, "cot", seed=seed)
            even = [c.run(rep) for c in even_ladder(rep)]
            self.parts[name] = (rep, even)

    def score(self, c: Candidate, part: str, *, reps: int = 0, seed: int = 0) -> dict:
        rep, even = self.parts[part]
        s = c.run(rep)
        full = even[-1]
        out = {"accuracy_delta": round(s.accuracy - full.accuracy, 6),
               "token_ratio": round(s.mean_tokens / full.mean_tokens, 6),
               "feasible": bool(s.correct.sum() >= full.correct.sum() - 1e-9)}  # calibrate()'s rule
        if reps:
            cmp = compare(s, even, reps=reps, seed=seed)
            out["ci95"] = {k: cmp["ci95"][k] for k in ("accuracy_delta", "token_ratio")}
            out["accuracy"], out["problems"] = cmp["accuracy"], len(s.idx)
        return out


def choose(sets: list[TraceSet], cands: list[Candidate]) -> tuple[Candidate | None, list[dict]]:
    """Score every candidate on every calibration half; the feasible one with the lowest mean ratio."""
    rows, best, best_ratio = [], None, float("inf")
    for c in cands:
        cal = {s.path: s.score(c, "calibration") for s in sets}
        feasible = all(r["feasible"] for r in cal.values())
        mean_ratio = sum(r["token_ratio"] for r in cal.values()) / len(cal)
        rows.append({"label": candidate_label(c), "feasible": feasible, "mean_token_ratio": round(mean_ratio, 6),
                     "calibration": cal})
        if feasible and mean_ratio < best_ratio - 1e-9:
            best, best_ratio = c, mean_ratio
    return best, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", help="trace files (default: every committed one)",
                    default=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "data" / "traces").glob("*.jsonl.gz")))
    ap.add_argument("--json", default="cot_default.json")
    ap.add_argument("--cal-fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=1000, help="bootstrap resamples (held-out figures)")
    args = ap.parse_args()
    sets = [TraceSet(p, load_traces(p if Path(p).exists() else ROOT / p), args.cal_fraction, args.seed)
            for p in args.traces]
    iv = math.lcm(*(s.parts["calibration"][0].interval for s in sets))  # probes exist every iv tokens
    cands = grid(logprobs=all(s.logprobs for s in sets), intervals=(iv, 2 * iv))
    pick, rows = choose(sets, cands)
    report: dict = {"traces": args.traces, "cal_fraction": args.cal_fraction, "seed": args.seed,
                    "rule": "no chain lost on any calibration half; lowest mean token ratio over the sets",
                    "candidates": len(cands), "feasible": sum(r["feasible"] for r in rows),
                    "pick": None if pick is None else {"label": candidate_label(pick), **pick.params()},
                    "heldout": {}, "grid": rows}
    presets = preset_candidates()
    shown = {"current-default": presets.pop("certa-default"), **({"pick": pick} if pick is not None else {}),
             **presets}
    for name, c in shown.items():
        if c.interval % iv:
            print(f"held-out {name}: skipped, its interval {c.interval} is not a multiple of the traces' {iv}")
            continue
        scores = {s.path: s.score(c, "heldout", reps=args.reps, seed=args.seed) for s in sets}
        report["heldout"][name] = {"label": candidate_label(c), **scores}
        figs = "  ".join(f"{Path(p).name.split('_')[0]} x{r['token_ratio']:.3f} {100 * r['accuracy_delta']:+.1f} pt"
                         for p, r in scores.items())
        print(f"held-out {name:16s} {candidate_label(c):60s} {figs}")
    print(f"pick: {report['pick']['label'] if pick else 'none feasible'} "
          f"({report['feasible']} of {len(cands)} candidates feasible on every calibration half)")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
