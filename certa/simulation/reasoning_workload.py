"""Reasoning-length simulator workloads: real chain lengths and answers, SC/tree expansions, bursty arrivals.

The imported reasoning traces (``data/traces/reasoning/*.jsonl.gz``) hold ONE chain per
problem. Self-Consistency needs ``k`` samples per problem, so :func:`expand` draws them,
seeded per problem (``random.Random(f"{seed}:{idx}:{kind}")``):

* **lengths** — sample 0 is the real chain (its tokens, answer, grading and probes, so a CoT
  program on the same problem replays the real chain); sample ``j ≥ 1`` is log-normal around
  the chain's length, ``tokens_j = round(chain × exp(sigma · z_j))``, ``z_j ~ N(0, 1)``,
  ``sigma = 0.35`` (the 1.5B dev traces' within-problem log-length SD is 0.17 / 0.24 on
  GSM8K / MATH-500, an under-estimate since they are cut at 512 / 1,024 tokens), at least
  16 tokens; a sample over ``max_tokens`` is unfinished (no answer);
* **answers** — sample ``j ≥ 1`` repeats the chain's final answer with probability ``q``,
  else an alternative: the chain's own intermediate probe answers that differ from its final
  one (its real wrong turns; plus the gold answer when the chain is wrong), weighted
  ``1/(rank+1)`` in order of first appearance, or ``"alt-1".."alt-3"`` when it has none.
  ``q`` per problem is drawn from an :class:`AgreementProfile` MEASURED on traces with many
  samples per problem (default: the 1.5B GSM8K dev traces): the share of a problem's other
  samples agreeing with its first, among problems whose first sample is right (or wrong).
  Grading: :func:`~certa.algorithms.answers.math_equal` against the gold answer.
* **tree** (MCTS-like, a shape only): ``k`` short expansions of ``chain / depth`` tokens
  each (the same log-normal spread and answer model), run by two lanes
  (:data:`~certa.simulation.programs.TREE_FANOUT`): many short dependent requests.

Arrivals (:func:`arrivals`): Poisson, or Gamma inter-arrival times with coefficient of
variation ``cv`` (shape ``1/cv²``; ``cv = 1`` is Poisson; ``cv`` 2–4 is bursty).

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> prof = agreement_profile(synth_traces(20, seed=0))
    >>> chain = synth_traces(1, seed=3, samples=1)[0]
    >>> sc = expand(chain, "sc", k=8, profile=prof, seed=0)
    >>> len(sc.samples), sc.samples[0] == chain.samples[0], sc.idx
    (8, True, '0/sc')
    >>> expand(chain, "sc", k=8, profile=prof, seed=0) == sc      # seeded
    True
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from certa.algorithms.answers import math_equal
from certa.eval.traces import Sample, TraceProblem, load_traces
from certa.runtime.errors import ConfigError
from certa.simulation.workload import Kind, ProgramSpec, poisson_arrivals

__all__ = ["AgreementProfile", "DEV_TRACES", "REASONING_DIR", "agreement_profile", "arrivals", "expand",
           "gamma_arrivals", "load_reasoning", "reasoning_workload"]

REASONING_DIR = Path(__file__).resolve().parents[2] / "data" / "traces" / "reasoning"
DEV_TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
Arrival = Literal["poisson", "gamma"]


@dataclass(frozen=True, slots=True)
class AgreementProfile:
    """Per-problem agreement (share of other samples whose answer equals the first sample's),
    measured separately on problems whose first sample is right and wrong."""

    right: tuple[float, ...]
    wrong: tuple[float, ...]
    source: str = ""

    def draw(self, first_correct: bool, rng: random.Random) -> float:
        pool = self.right if first_correct else self.wrong
        return rng.choice(pool) if pool else (0.8 if first_correct else 0.3)

    def as_dict(self) -> dict:
        mean = lambda xs: round(statistics.fmean(xs), 4) if xs else None  # noqa: E731
        return {"source": self.source, "problems": [len(self.right), len(self.wrong)],
                "mean_right": mean(self.right), "mean_wrong": mean(self.wrong)}


def agreement_profile(problems: Sequence[TraceProblem], source: str = "") -> AgreementProfile:
    """Measure an :class:`AgreementProfile` on problems with at least two samples each."""
    right, wrong = [], []
    for p in problems:
        if len(p.samples) < 2:
            continue
        first = p.samples[0].pred or ""
        others = [s.pred or "" for s in p.samples[1:]]
        share = sum(bool(first) and bool(a) and math_equal(a, first) for a in others) / len(others)
        (right if p.samples[0].correct else wrong).append(round(share, 4))
    return AgreementProfile(tuple(right), tuple(wrong), source)


def _alternatives(chain: Sample, gold: str | None) -> list[str]:
    final = chain.pred or ""
    out: list[str] = []
    for pr in chain.probes:
        a = (pr.answer or "").strip()
        if a and not (final and math_equal(a, final)) and not any(math_equal(a, b) for b in out):
            out.append(a)
    if not chain.correct and gold and not any(math_equal(gold, b) for b in out):
        out.insert(0, gold)
    return out or ["alt-1", "alt-2", "alt-3"]


def expand(problem: TraceProblem, kind: Kind | Literal["tree"], *, k: int = 16, profile: AgreementProfile,
           seed: int = 0, sigma: float = 0.35, max_tokens: int = 32768, depth: int = 4) -> TraceProblem:
    """``problem``'s first chain plus ``k - 1`` drawn samples (``sc``), or ``k`` short expansions
    (``tree``), as a new problem with idx ``"<idx>/<kind>"`` (see the module docstring)."""
    if k < 1 or sigma < 0 or max_tokens < 1 or depth < 1:
        raise ConfigError(f"bad expansion k={k} sigma={sigma} max_tokens={max_tokens} depth={depth}")
    chain = problem.samples[0]
    gold = None if problem.gold is None else str(problem.gold)
    rng = random.Random(f"{seed}:{problem.idx}:{kind}")
    q = profile.draw(bool(chain.correct), rng)
    alts = _alternatives(chain, gold)
    weights = [1.0 / (i + 1) for i in range(len(alts))]
    graded: dict[str, bool] = {}
    base = chain.tokens / (depth if kind == "tree" else 1)
    samples = [] if kind == "tree" else [chain]
    while len(samples) < k:
        tokens = max(16, round(base * math.exp(sigma * rng.gauss(0.0, 1.0))))
        same = rng.random() < q
        ans = (chain.pred or "") if same else rng.choices(alts, weights)[0]
        if tokens > max_tokens:
            samples.append(Sample(tokens=max_tokens, finished=False, pred=None, correct=False))
            continue
        if same:
            ok = bool(chain.correct)
        else:
            if ans not in graded:
                graded[ans] = gold is not None and math_equal(ans, gold)
            ok = graded[ans]
        samples.append(Sample(tokens=tokens, finished=True, pred=ans or None, correct=ok))
    return TraceProblem(idx=f"{problem.idx}/{kind}", gold=problem.gold, model=problem.model,
                        interval=problem.interval, samples=samples)


def gamma_arrivals(rate: float, n: int, cv: float, rng: random.Random, start: float = 0.0) -> list[float]:
    """``n`` arrival times with Gamma inter-arrivals: mean ``1/rate``, coefficient of variation ``cv``."""
    if rate <= 0 or cv <= 0:
        raise ConfigError(f"arrival rate and cv must be > 0, not {rate}, {cv}")
    shape = 1.0 / (cv * cv)
    t, out = start, []
    for _ in range(n):
        t += rng.gammavariate(shape, 1.0 / (shape * rate))
        out.append(t)
    return out


def arrivals(kind: Arrival, rate: float, n: int, rng: random.Random, cv: float = 3.0) -> list[float]:
    """Poisson (``cv`` ignored) or Gamma(``cv``) arrival times."""
    if kind == "poisson":
        return poisson_arrivals(rate, n, rng)
    if kind == "gamma":
        return gamma_arrivals(rate, n, cv, rng)
    raise ConfigError(f"unknown arrival process {kind!r}", hint="use 'poisson' or 'gamma'")


def load_reasoning(files: Sequence[str | Path], *, limit: int | None = None) -> list[TraceProblem]:
    """Problems of several trace files; idx becomes ``"<file stem>:<idx>"`` so files never collide."""
    out: list[TraceProblem] = []
    for f in files:
        stem = Path(f).name.split(".")[0]
        out += [p.model_copy(update={"idx": f"{stem}:{p.idx}"}) for p in load_traces(f, limit=limit)]
    return out


def reasoning_workload(problems: Sequence[TraceProblem], *, n: int, rate: float, seed: int = 0,
                       mix: Mapping[str, float] | None = None, arrival: Arrival = "poisson", cv: float = 3.0,
                       k: int = 16, profile: AgreementProfile | None = None, sigma: float = 0.35,
                       max_tokens: int = 32768, prompt_tokens: int = 200, expand_samples: bool = True
                       ) -> list[ProgramSpec]:
    """``n`` programs over ``problems`` (shuffled, cycled), kinds drawn from ``mix`` (weights over
    ``sc``/``cot``/``tree``; default all SC), arrivals Poisson or Gamma(``cv``).

    ``expand_samples=False`` runs SC on the problems' own samples (traces with many samples
    per problem, e.g. the 1.5B dev traces); otherwise SC/tree problems come from
    :func:`expand`, which needs ``profile``. CoT programs replay the real chain.
    """
    if not problems:
        raise ConfigError("a workload needs at least one trace problem")
    mix = dict(mix or {"sc": 1.0})
    bad = set(mix) - {"sc", "cot", "tree"}
    if bad or not any(w > 0 for w in mix.values()):
        raise ConfigError(f"bad program mix {mix}", hint="weights over 'sc', 'cot', 'tree'")
    if expand_samples and profile is None and set(mix) - {"cot"}:
        raise ConfigError("expanding SC/tree samples needs an agreement profile")
    rng = random.Random(seed)  # problem order and kinds; arrivals draw from their own stream
    order = list(range(len(problems)))
    rng.shuffle(order)
    times = arrivals(arrival, rate, n, random.Random(f"{seed}:arrivals"), cv)
    kinds, weights = list(mix), list(mix.values())
    cache: dict[tuple[int, str], TraceProblem] = {}
    specs = []
    for i, t in enumerate(times):
        kind = rng.choices(kinds, weights)[0] if len(kinds) > 1 else kinds[0]
        j = order[i % len(order)]
        if kind == "cot" or not expand_samples:
            prob = problems[j]
        else:
            key = (j, kind)
            if key not in cache:
                cache[key] = expand(problems[j], kind, k=k, profile=profile,  # type: ignore[arg-type]
                                    seed=seed, sigma=sigma, max_tokens=max_tokens)
            prob = cache[key]
        specs.append(ProgramSpec(f"{kind}-{i}", t, prob, kind, prompt_tokens))  # type: ignore[arg-type]
    return specs
