"""How much can a text-probe exit save on reasoning chains? Hindsight bounds for issue 17's targets.

On every imported reasoning trace file (text probes, ``certa traces import``; all dev problems):

- full chains, and the shipped fixed default (``cot_program("text")``, forced answer paid);
- ORACLE *first final*: each chain exits at its first text probe whose committed answer equals
  its final answer (``forced_answer_oracle``): the bound for a rule that keeps every chain's
  answer and exits the moment the chain first commits to it;
- ORACLE *settled*: each chain exits at the first probe from which its committed answer is its
  final answer at every later probe: the bound for any rule that exits only once the chain has
  stopped changing its answer. Chains that commit to their final value, move to another and come back (``reopened``)
  are where the two bounds differ; a rule between them must exit while the chain will still
  change its answer, and guess that it will come back;
- ORACLE *give up*: the first-final oracle on chains that end right; chains that end wrong exit
  at their first probe (no accuracy lost): the bound for a rule that also abandons doomed chains;
- *hold h*: exit once the committed answer has held for ``h`` tokens (the stability rule family);
- *length cap c*: the default, but a chain still running at ``c`` x the median chain length of
  the file's *other* half (two folds) exits with its committed answer there.

Token ratios are decode tokens (thinking + forced answer) over full chains'; accuracy deltas in
points; bootstrap 95% CIs over problems. Not a timed test.

    python benchmarks/reasoning_headroom.py --traces data/traces/reasoning \\
        --json docs/results/reasoning/headroom.json --png docs/results/reasoning/headroom.png
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from certa.algorithms.answers.equivalence import math_equal
from certa.algorithms.programs.cot_probe import TEXT_INTERVAL, text_signal
from certa.eval.calibration import split_problems
from certa.eval.cot_grid import forced_answer_oracle, forced_answer_run
from certa.eval.evalstats import bootstrap_ci
from certa.eval.replay_backend import estimate_probe_tokens
from certa.eval.replay_eval import Replayer
from certa.eval.traces import TraceProblem, load_traces
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Threshold

HOLDS = (256, 512, 1024, 2048, 4096)
CAPS = (1.5, 2.0, 3.0, 4.0, 6.0)
TARGETS = {"gsm8k": 0.70, "aime": 0.90}  # issue 17: >= 30% / >= 10% saved within 1 point


class Chain:
    """One chain: its committed answer at each text probe, graded, and the default's exit."""

    def __init__(self, problem: TraceProblem, rep: Replayer, default_tokens: float, default_ok: float) -> None:
        sample, judge = problem.samples[0], rep.grader(problem)
        self.tokens, self.correct = float(sample.tokens), float(bool(sample.correct))
        self.final = sample.pred or ""
        self.probes = [(q.at, q.answer or "") for q in sample.probes if q.at < sample.tokens]
        self.right = {a: float(judge(a)) for a in {a for _, a in self.probes if a}}
        self.default = (default_tokens, default_ok)

    def exit_at(self, at: int, answer: str) -> tuple[float, float]:
        """Tokens and correctness of an exit at probe position ``at`` answering ``answer``."""
        return at + estimate_probe_tokens(answer), self.right.get(answer, 0.0)

    def settled(self) -> tuple[float, float]:
        """First probe from which every committed answer is the chain's final answer (answering it);
        the full chain when its last committed answer is not its final answer."""
        i = len(self.probes)
        while i > 0 and self._final(self.probes[i - 1][1]):
            i -= 1
        return self.exit_at(*self.probes[i]) if i < len(self.probes) else (self.tokens, self.correct)

    def _final(self, answer: str) -> bool:
        return bool(answer and self.final) and bool(math_equal(answer, self.final))

    def reopened(self) -> bool | None:
        """Whether the committed answer leaves the final value after first committing to it."""
        hits = [i for i, (_, a) in enumerate(self.probes) if self._final(a)]
        return any(not self._final(a) for _, a in self.probes[hits[0]:]) if hits else None

    def hold(self, h: int) -> tuple[float, float]:
        """Exit once the committed answer has held ``h`` tokens (the default decides if it is earlier)."""
        current, since = "", 0
        for at, a in self.probes:
            if a != current:
                current, since = a, at
            if current and at - since >= h:
                return self.exit_at(at, current) if at < self.default[0] else self.default
        return self.default

    def capped(self, cap: float) -> tuple[float, float]:
        """The default, but exit at ``cap`` tokens with the committed answer if still running."""
        if self.default[0] <= cap:
            return self.default
        at = next(((p, a) for p, a in self.probes if p >= cap), None)
        return self.default if at is None else self.exit_at(*at)


def summarize(tokens: np.ndarray, ok: np.ndarray, full_tokens: np.ndarray, full_ok: np.ndarray,
              reps: int, seed: int) -> dict[str, Any]:
    """Token ratio and accuracy delta vs full chains, with paired bootstrap 95% CIs (same resamples)."""
    ratio_ci = bootstrap_ci(lambda r: tokens[r].mean() / full_tokens[r].mean(), len(tokens), reps=reps, seed=seed)
    delta_ci = bootstrap_ci(lambda r: (ok[r].mean() - full_ok[r].mean()) * 100, len(tokens), reps=reps, seed=seed)
    return {"token_ratio": round(float(tokens.mean() / full_tokens.mean()), 4),
            "accuracy_delta_pt": round(float((ok.mean() - full_ok.mean()) * 100), 2),
            "ci95": {"token_ratio": [round(v, 4) for v in ratio_ci],
                     "accuracy_delta_pt": [round(v, 2) for v in delta_ci]}}


def headroom(problems: list[TraceProblem], *, reps: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Every bound and rule family above, on one file's problems (one chain each, as imported)."""
    several = [p.idx for p in problems if len(p.samples) != 1]
    if several:
        raise ConfigError(f"reasoning_headroom reads one chain per problem; {len(several)} problems have "
                          f"another count (first: idx {several[0]})", hint="import one sample per problem")
    rep = Replayer(problems, "cot")
    default = forced_answer_run(rep, Threshold(1.0, detect_at=1, every=1), k=1, interval=TEXT_INTERVAL,
                                signal=text_signal())
    oracle = forced_answer_oracle(rep)
    chains = [Chain(p, rep, float(t), float(c)) for p, t, c in zip(problems, default.tokens, default.correct,
                                                                    strict=True)]
    full_t = np.array([c.tokens for c in chains])
    full_c = np.array([c.correct for c in chains])

    def row(pairs: list[tuple[float, float]]) -> dict[str, Any]:
        a = np.array(pairs, dtype=float)
        return summarize(a[:, 0], a[:, 1], full_t, full_c, reps, seed)

    first_probe = [c.exit_at(*c.probes[0]) if c.probes else (c.tokens, c.correct) for c in chains]
    give_up = [(t, ok) if c.correct else (min(t, fp[0]), fp[1] if fp[0] < t else ok)
               for c, t, ok, fp in zip(chains, oracle.tokens, oracle.correct, first_probe, strict=True)]
    fold_a, fold_b = split_problems(problems, 0.5, seed)
    in_a = {p.idx for p in fold_a}
    medians = [float(np.median([q.samples[0].tokens for q in fold])) for fold in (fold_b, fold_a)]
    median_of_other = {p.idx: medians[0] if p.idx in in_a else medians[1] for p in problems}
    reopened = [r for r in (c.reopened() for c in chains) if r is not None]
    out: dict[str, Any] = {
        "problems": len(chains), "full_chain": {"accuracy": round(float(full_c.mean()), 4),
                                                "tokens": round(float(full_t.mean()), 1)},
        "default": row(list(zip(default.tokens, default.correct, strict=True))),
        "oracle_first_final": row(list(zip(oracle.tokens, oracle.correct, strict=True))),
        "oracle_settled": row([c.settled() for c in chains]),
        "oracle_give_up": row(give_up),
        "reopened_share": round(float(np.mean(reopened)), 4) if reopened else None,
        "wrong_chain_token_share": round(float(full_t[full_c == 0].sum() / full_t.sum()), 4),
        "hold": {str(h): row([c.hold(h) for c in chains]) for h in HOLDS},
        "length_cap": {str(f): row([c.capped(f * median_of_other[p.idx]) for p, c in zip(problems, chains,
                                                                                       strict=True)])
                       for f in CAPS},
    }
    return out


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    """Grouped bars per file: default, settled, first-final and give-up bounds; the target line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    keys = [("default", "shipped default"), ("oracle_settled", "ORACLE settled"),
            ("oracle_first_final", "ORACLE first final"), ("oracle_give_up", "ORACLE give up")]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.2
    for j, (key, label) in enumerate(keys):
        ax.bar(np.arange(len(names)) + (j - 1.5) * width, [results[n][key]["token_ratio"] for n in names],
               width, label=label)
    for i, n in enumerate(names):
        target = TARGETS.get(n.rsplit("_", 1)[-1])
        if target:
            ax.hlines(target, i - 0.45, i + 0.45, colors="k", linestyles="--")
    labels = [n.replace("DeepSeek-R1-Distill-", "R1-").replace("_", "\n") for n in names]
    ax.set_xticks(np.arange(len(names)), labels, fontsize=8)
    ax.set_ylabel("tokens / full chain")
    ax.set_title("Text-probe exits on reasoning chains: shipped default vs hindsight bounds (dashed: issue target)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="data/traces/reasoning", help="folder of imported reasoning traces")
    ap.add_argument("--json", default="docs/results/reasoning/headroom.json")
    ap.add_argument("--png", default="docs/results/reasoning/headroom.png")
    ap.add_argument("--reps", type=int, default=1000, help="bootstrap resamples")
    args = ap.parse_args(argv)
    files = sorted(Path(args.traces).glob("*.jsonl.gz"))
    if not files:
        print(f"no *.jsonl.gz traces in {args.traces} (run benchmarks/reasoning_cot.py first)", file=sys.stderr)
        return 2
    results: dict[str, dict[str, Any]] = {}
    for f in files:
        t0 = time.time()
        results[f.name.split(".jsonl")[0]] = r = headroom(load_traces(f), reps=args.reps)
        print(f"{f.name}: default {r['default']['token_ratio']:.3f} ({r['default']['accuracy_delta_pt']:+.1f} pt), "
              f"settled {r['oracle_settled']['token_ratio']:.3f}, first-final "
              f"{r['oracle_first_final']['token_ratio']:.3f}, give-up {r['oracle_give_up']['token_ratio']:.3f}, "
              f"reopened {r['reopened_share']} [{time.time() - t0:.0f} s]", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"interval": TEXT_INTERVAL, "files": results}, indent=1) + "\n")
    if args.png:
        plot(results, Path(args.png))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
