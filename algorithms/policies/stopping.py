r"""Stopping policies beyond the runtime's Threshold/Even/Length, on the same Policy interface.

- :class:`CheckEvery` — the threshold rule checked every ``every`` knob units;
- :class:`Pareto` — a certaindex → budget curve fitted from calibration data;
- :class:`ESC` — Early-Stopping Self-Consistency: stop when a whole window of answers agrees;
- :class:`AdaptiveConsistency` — the Beta stopping rule on the top-two answer counts;
- :class:`MajorityMargin` — stop when the leading answer is ``margin`` votes ahead.

**Answers protocol.** ESC, AdaptiveConsistency and MajorityMargin read the program's answers
from ``program.state.answers`` (a list; empty strings / None are "no answer"). Every program
in :mod:`certa.algorithms` keeps one: SC branch answers, MCTS/REBASE terminal answers, CoT
probe answers. Every policy has a ``min_samples`` guard: it never stops before that many
samples (answers for the answer rules, knob units for the certaindex rules). All round-trip
through ``to_dict`` / :func:`~certa.algorithms.policies.registry.policy_from_dict`, and every
argument is checked when the policy is made (an unknown ``same`` included), and the answers
protocol when a program starts (:meth:`~certa.runtime.policy.Policy.validate`), so a bad
policy fails before any token is spent.

Example:
    >>> from types import SimpleNamespace as NS
    >>> prog = NS(state=NS(answers=["18"] * 4), knob_value=4, policy_marks={})
    >>> AdaptiveConsistency(0.95).decide(prog).stop, ESC(window=4).decide(prog).stop
    (True, True)
    >>> round(beta_stop_probability(4, 0), 4), MajorityMargin(3).decide(prog).reason
    (0.9688, 'margin')
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from certa.runtime.errors import ConfigError
from certa.runtime.policy import CONTINUE, Decision, FieldUnit, Policy, Threshold, crossed, is_count, is_unit

from certa.algorithms.answers.clustering import Same, cluster, is_empty, resolve_same

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.program import Program

__all__ = ["ESC", "AdaptiveConsistency", "CheckEvery", "MajorityMargin", "Pareto", "answers_of",
           "beta_stop_probability", "check_rule", "top_two"]


def answers_of(program: Program) -> list[Any]:
    """The program's answers (the protocol above); ``ConfigError`` if its state has none."""
    answers = getattr(program.state, "answers", None)
    if not isinstance(answers, list):
        raise ConfigError(f"policy needs program.state.answers, which {type(program.state).__name__} lacks",
                          program=getattr(program, "program_id", None), hint="add `answers: list[str]` to the state")
    return answers


def check_rule(kind: str, *, min_samples: Any, same: Same | None = None, **counts: Any) -> None:
    """The arguments every answer rule shares, checked when it is made: ``min_samples`` and each
    of ``counts`` a whole number >= 1 (``None`` allowed for counts), ``same`` a known equality
    name or a callable (``ConfigError`` naming the policy and the argument otherwise)."""
    for name, v in {"min_samples": min_samples, **counts}.items():
        if not (is_count(v) or (v is None and name != "min_samples")):
            raise ConfigError(f"{kind} {name} must be a whole number >= 1, got {v!r}")
    if same is not None and not callable(same):
        try:
            resolve_same(same)
        except ConfigError as exc:
            raise ConfigError(f"{kind} same: {exc.message}", hint=exc.hint) from None


def top_two(answers: list[Any], same: Same = "math") -> tuple[int, int]:
    """Sizes of the two largest clusters of non-empty answers (0 when missing)."""
    sizes = sorted((len(c) for c in cluster(answers, same) if not is_empty(answers[c[0]])), reverse=True)
    return (sizes + [0, 0])[0], (sizes + [0, 0])[1]


def beta_stop_probability(v1: float, v2: float) -> float:
    """P(p1 > p2) for top-two counts under a uniform prior: ``I_{0.5}(v2 + 1, v1 + 1)``.

    Exact for integer counts (a binomial tail); scipy's ``betainc`` or Simpson's rule otherwise.
    """
    a, b = v2 + 1, v1 + 1
    if float(a).is_integer() and float(b).is_integer():
        n = int(a + b - 1)
        return sum(math.comb(n, j) for j in range(int(a), n + 1)) / 2 ** n
    try:
        from scipy.special import betainc
        return float(betainc(a, b, 0.5))
    except ImportError:
        f = lambda x: x ** (a - 1) * (1 - x) ** (b - 1)
        def simpson(lo: float, hi: float, n: int = 2000) -> float:
            h = (hi - lo) / n
            return h / 3 * sum(f(lo + i * h) * (1 if i in (0, n) else 4 if i % 2 else 2) for i in range(n + 1))
        return simpson(0.0, 0.5) / simpson(0.0, 1.0)


class CheckEvery(Threshold):
    """Stop when certaindex >= ``tau``, checked every ``every`` knob units (from ``start``, default ``every``)."""

    kind = "check_every"
    fields = {**Threshold.fields, "start": "knob"}

    def __init__(self, tau: float | dict[str, float], every: int, min_samples: int = 1, start: int | None = None):
        super().__init__(tau, detect_at=start or every, every=every, min_samples=min_samples)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tau": self.tau, "every": self.every, "min_samples": self.min_samples,
                "start": self.detect_at}

    def __repr__(self) -> str:
        return f"CheckEvery(tau={self.tau}, every={self.every})"


class Pareto(Policy):
    """A certaindex → budget curve: at each check the budget is ``curve(certaindex)`` knob units in total.

    ``curve`` is a list of ``(certaindex, budget)`` steps, sorted by certaindex, budgets not
    increasing: a certaindex ``c`` gets the budget of the last step whose certaindex is <= ``c``
    (the first step's below it). The program stops when its knob reaches that budget; the
    remaining budget ``budget - used`` is also its SJF estimate. Checks start at ``detect_at``
    and repeat every ``every`` knob units (default: only once).
    """

    kind = "pareto"
    requires_certaindex = True
    fields = {"detect_at": "knob", "every": "knob", "min_samples": "knob"}

    def __init__(self, curve: Iterable[Iterable[float]], detect_at: int = 1, every: int | None = None,
                 min_samples: int = 1) -> None:
        try:
            self.curve = sorted((float(c), int(b)) for c, b in curve)
        except (TypeError, ValueError):
            raise ConfigError(f"a Pareto curve is a list of (certaindex, budget) pairs, got {curve!r}") from None
        if not self.curve or any(b < 1 for _, b in self.curve):
            raise ConfigError("a Pareto curve needs at least one (certaindex, budget >= 1) point")
        check_rule("pareto", min_samples=min_samples, detect_at=detect_at, every=every)
        self.detect_at, self.every, self.min_samples = detect_at, every, min_samples

    @classmethod
    def fit(cls, points: Iterable[tuple[float, float]], *, bins: int = 4, quantile: float = 0.9,
            **kw: Any) -> Pareto:
        """Fit from calibration ``(certaindex at detection, knob units needed)`` pairs.

        Points are split into ``bins`` equal-count groups by certaindex; each group's budget is
        the ``quantile`` of its needed units, made non-increasing in certaindex (a more certain
        group never gets more budget than a less certain one).
        """
        pts = sorted((float(c), float(n)) for c, n in points)
        if not pts:
            raise ConfigError("Pareto.fit needs at least one calibration point")
        size = math.ceil(len(pts) / max(1, min(bins, len(pts))))
        groups = [pts[i:i + size] for i in range(0, len(pts), size)]
        steps = []
        for grp in groups:
            needs = sorted(n for _, n in grp)
            steps.append([grp[0][0], max(1, math.ceil(needs[min(len(needs) - 1, int(quantile * len(needs)))]))])
        for i in range(len(steps) - 2, -1, -1):
            steps[i][1] = max(steps[i][1], steps[i + 1][1])
        return cls([tuple(s) for s in steps], **kw)

    def budget_for(self, certaindex: float) -> int:
        i = bisect.bisect_right([c for c, _ in self.curve], certaindex) - 1
        return self.curve[max(i, 0)][1]

    def budget_cap(self, program: Program) -> int | None:
        budget = program.policy_marks.get("pareto_budget")
        caps = [x for x in (budget, program.knob_cap) if x is not None]
        return min(caps) if caps else None

    def decide(self, program: Program) -> Decision:
        start = max(self.detect_at, self.min_samples)
        if crossed(program, start, self.every) and program.certaindex is not None:
            program.policy_marks["pareto_budget"] = self.budget_for(program.certaindex)
        budget = program.policy_marks.get("pareto_budget")
        return Decision(True, "certaindex") if budget is not None and program.knob_value >= budget else CONTINUE

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "curve": [list(p) for p in self.curve], "detect_at": self.detect_at,
                "every": self.every, "min_samples": self.min_samples}

    def __repr__(self) -> str:
        return f"Pareto({self.curve}, detect_at={self.detect_at})"


class _AnswerRule(Policy):
    """Base of the answer-count rules: reads ``state.answers`` and guards with ``min_samples``.

    A rule has one parameter of its own, ``param`` (its ``fields`` unit in ``unit``); ``to_dict``
    and the repr are built from it (``keyword_repr``: ``ESC(window=4)`` rather than ``ESC(4)``).
    """

    param: ClassVar[str]
    unit: ClassVar[FieldUnit]
    keyword_repr: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.fields = {cls.param: cls.unit, "min_samples": "knob"}

    def __init__(self, min_samples: int, same: Same) -> None:
        check_rule(self.kind, min_samples=min_samples, same=same)
        self.min_samples, self.same = min_samples, same

    def validate(self, program: Program) -> None:
        answers_of(program)  # the answers protocol, before the first step instead of at the first decide

    def decide(self, program: Program) -> Decision:
        answers = answers_of(program)
        if len(answers) < self.min_samples:
            return CONTINUE
        return Decision(True, self.kind) if self.should_stop(answers, program) else CONTINUE

    def should_stop(self, answers: list[Any], program: Program) -> bool:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        same = {"same": self.same} if isinstance(self.same, str) else {}
        return {"kind": self.kind, self.param: getattr(self, self.param), "min_samples": self.min_samples, **same}

    def __repr__(self) -> str:
        value = getattr(self, self.param)
        return f"{type(self).__name__}({f'{self.param}={value}' if self.keyword_repr else value})"


class ESC(_AnswerRule):
    """Stop when every answer in the latest complete window of ``window`` answers agrees (ESC, Li et al. 2024).

    Windows do not overlap (answers 1..w, w+1..2w, ...); each is checked once, when it fills.
    """

    kind, param, unit, keyword_repr = "esc", "window", "knob", True

    def __init__(self, window: int = 5, min_samples: int = 1, same: Same = "math") -> None:
        check_rule("esc", min_samples=min_samples, window=window)
        super().__init__(min_samples, same)
        self.window = window

    def should_stop(self, answers: list[Any], program: Program) -> bool:
        full = len(answers) // self.window
        if full == program.policy_marks.get("esc_windows", 0):
            return False
        program.policy_marks["esc_windows"] = full
        win = answers[(full - 1) * self.window: full * self.window]
        return not any(is_empty(a) for a in win) and len(cluster(win, self.same)) == 1


class AdaptiveConsistency(_AnswerRule):
    """Stop when P(leading answer's share > runner-up's) >= ``threshold`` (Aggarwal et al. 2023, Beta rule)."""

    kind, param, unit = "adaptive_consistency", "threshold", "fraction"

    def __init__(self, threshold: float = 0.95, min_samples: int = 1, same: Same = "math") -> None:
        if not (is_unit(threshold) and 0.0 < threshold < 1.0):
            raise ConfigError(f"AdaptiveConsistency threshold must be in (0, 1), got {threshold!r}")
        super().__init__(min_samples, same)
        self.threshold = threshold

    def should_stop(self, answers: list[Any], program: Program) -> bool:
        v1, v2 = top_two(answers, self.same)
        return v1 > 0 and beta_stop_probability(v1, v2) >= self.threshold


class MajorityMargin(_AnswerRule):
    """Stop when the leading answer has at least ``margin`` more votes than the runner-up."""

    kind, param, unit = "margin", "margin", "knob"

    def __init__(self, margin: int = 3, min_samples: int = 1, same: Same = "math") -> None:
        check_rule("margin", min_samples=min_samples, margin=margin)
        super().__init__(min_samples, same)
        self.margin = margin

    def should_stop(self, answers: list[Any], program: Program) -> bool:
        v1, v2 = top_two(answers, self.same)
        return v1 - v2 >= self.margin
