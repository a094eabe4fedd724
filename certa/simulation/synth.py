"""Seeded synthetic reasoning traces (the trace format) for tests and simulator workloads.

SYNTHETIC data, labelled ``model="synthetic"``: use it until real traces land. Each problem
draws a difficulty class (easy / medium / hard, with per-sample accuracy from
``ACCURACY``); a wrong sample picks among a few distractors (so wrong answers partly
cluster, as real ones do); lengths are log-normal around ``mean_tokens`` scaled up with
difficulty and for wrong samples, truncated at ``max_tokens`` (``finished=False``, no
answer). The first ``probed`` samples carry a probe every ``interval`` tokens: before the
sample's answer "settles" (at a Beta(2, 3) fraction of its length) probes return nothing,
a distractor or a hesitation; afterwards its final answer (with rare flips).

Example:
    >>> probs = synth_traces(3, seed=1, samples=4, probed=2)
    >>> len(probs), len(probs[0].samples), probs[0].model
    (3, 4, 'synthetic')
    >>> synth_traces(3, seed=1, samples=4, probed=2) == probs    # deterministic
    True
"""

from __future__ import annotations

import random
from pathlib import Path

from certa.eval.traces import Probe, Sample, TraceProblem, dump_traces

#: difficulty class → (share of problems, per-sample accuracy range, length multiplier)
ACCURACY = {"easy": (0.55, (0.75, 0.98), 1.0), "medium": (0.30, (0.4, 0.75), 1.6), "hard": (0.15, (0.05, 0.4), 2.4)}


def _problem(rng: random.Random, idx: int, samples: int, probed: int, interval: int, mean_tokens: float,
             max_tokens: int, sigma: float) -> TraceProblem:
    r, acc = rng.random(), 0.0
    for level, (share, (lo, hi), mult) in ACCURACY.items():
        acc += share
        if r < acc or level == "hard":
            break
    p_correct = rng.uniform(lo, hi)
    gold = rng.randint(2, 999)
    n_distract = 2 if level == "easy" else 4 if level == "medium" else 7
    distractors = rng.sample([g for g in range(1, 2000) if g != gold], n_distract)
    weights = [1.0 / (i + 1) for i in range(n_distract)]
    out = []
    for s in range(samples):
        correct = rng.random() < p_correct
        length = rng.lognormvariate(0.0, sigma) * mean_tokens * mult * (1.0 if correct else 1.3)
        tokens = max(16, min(max_tokens, int(length)))
        finished = tokens < max_tokens
        pred = str(gold if correct else rng.choices(distractors, weights)[0]) if finished else None
        probes = []
        if s < probed:
            settle = rng.betavariate(2, 3) * tokens
            for at in range(interval, tokens + 1, interval):
                if at >= settle and pred is not None and rng.random() > 0.05:
                    ans = pred
                else:
                    roll = rng.random()
                    ans = "" if roll < 0.5 else f"wait {rng.choice(distractors)}" if roll < 0.6 else \
                        str(rng.choice(distractors))
                probes.append(Probe(at=at, answer=ans))
        out.append(Sample(tokens=tokens, finished=finished, pred=pred, correct=bool(finished and correct),
                          text=f"synthetic sample {s}", probes=probes))
    return TraceProblem(idx=idx, gold=str(gold), model="synthetic", interval=interval, samples=out,
                        difficulty=level)


def synth_traces(n: int, *, seed: int = 0, samples: int = 16, probed: int = 4, interval: int = 64,
                 mean_tokens: float = 1200.0, max_tokens: int = 8192, sigma: float = 0.45) -> list[TraceProblem]:
    """``n`` synthetic problems, deterministic for a given ``seed`` and arguments."""
    rng = random.Random(seed)
    return [_problem(rng, i, samples, probed, interval, mean_tokens, max_tokens, sigma) for i in range(n)]


def write_synth(path: str | Path, n: int, **kw) -> Path:
    """Write ``synth_traces(n, **kw)`` as a JSONL trace file."""
    return dump_traces(synth_traces(n, **kw), path)


__all__ = ["ACCURACY", "synth_traces", "write_synth"]
