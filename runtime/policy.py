"""Stopping policies: read a Program between steps and say continue or stop.

Built-ins here are the paper's threshold rule (checked when the knob reaches its detection
step), :class:`Watch` (the same rule checked after every finished branch) and the two
baselines; ``certa.algorithms`` adds Pareto curves and the published SC stopping rules on the
same interface. Every policy prints as its parameters (``repr``, what ``draw()`` shows).

Example:
    >>> p = Threshold(0.6, detect_at=4)
    >>> p.requires_certaindex
    True
    >>> Even(8).to_dict(), Watch(0.8, detect_at=2)
    ({'kind': 'even', 'cap': 8}, Watch(tau=0.8, detect_at=2, min_samples=1))
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.program import Program


@dataclass(frozen=True, slots=True)
class Decision:
    stop: bool
    reason: str = ""


CONTINUE = Decision(False)


def is_count(v: Any) -> bool:
    """A whole number >= 1 (not a bool): what policies' counts (``min_samples``, ...) must be."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def is_unit(v: Any) -> bool:
    """A number in [0, 1] (not a bool): what policies' thresholds must be."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0


class Policy(abc.ABC):
    """Decides after each step whether a program stops. ``min_samples`` guards every rule."""

    kind: ClassVar[str] = "policy"
    requires_certaindex: ClassVar[bool] = False

    @abc.abstractmethod
    def decide(self, program: "Program") -> Decision:
        """CONTINUE or ``Decision(True, reason)``."""

    def budget_cap(self, program: "Program") -> int | None:
        """The knob value at which this policy would stop for sure (for savings and SJF)."""
        return program.knob_cap

    def expected_remaining(self, program: "Program") -> float:
        """Expected knob units still to run (for SJF estimates). Default: until the cap."""
        cap = self.budget_cap(program)
        return 0.0 if cap is None else max(0.0, cap - program.knob_value)

    def validate(self, program: "Program") -> None:
        """Check, before ``program`` runs its first step, that this policy can decide on it
        (e.g. the answer rules need ``state.answers``): raise ``ConfigError`` now instead of
        after the program spent tokens. Default: nothing to check."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        """The policy as its parameters, ``Name(a=1, b=2)`` (from ``to_dict``, else its public
        attributes), so ``draw()`` and logs show what it does, not an object address."""
        try:
            params = {k: v for k, v in self.to_dict().items() if k != "kind"}
        except NotImplementedError:
            params = {k: v for k, v in getattr(self, "__dict__", {}).items() if not k.startswith("_")}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in params.items())})"

    @staticmethod
    def from_dict(data: dict[str, Any], kinds: "Registry[Policy] | None" = None) -> "Policy":
        """Rebuild a policy from ``to_dict`` output (e.g. a calibrated ``policy.json``).

        ``data["kind"]`` is looked up in ``kinds``: by default the runtime's own
        :data:`POLICY_KINDS` (threshold, even, length); every built-in kind is in
        ``certa.algorithms.policies.STOPPING_POLICIES`` (``policy_from_dict`` there uses it).
        """
        kind = data.get("kind")
        cls = (POLICY_KINDS if kinds is None else kinds).get(kind)
        args = {k: v for k, v in data.items() if k != "kind"}
        try:
            return cls(**args)
        except TypeError as exc:
            raise ConfigError(f"bad arguments for policy {kind!r}: {exc}") from None


def crossed(program: "Program", start: int, every: int | None) -> bool:
    """True if the knob crossed a checkpoint ``start, start+every, ...`` since the last check,
    or has not moved since it crossed one: a certaindex measured later at the same knob value
    (a join's, after the units it joins) is checked at once, not a knob unit later."""
    marks = program.policy_marks
    now = program.knob_value
    prev = marks.get("checked_knob", -1)
    if now == prev:
        return marks.get("check_open", False)
    marks["checked_knob"] = now
    if now < start:
        hit = False
    elif prev < start:
        hit = True
    else:
        hit = bool(every) and (now - start) // every > (prev - start) // every  # type: ignore[operator]
    marks["check_open"] = hit
    return hit


class Threshold(Policy):
    """Stop when certaindex >= ``tau`` at the detection step (and every ``every`` after).

    ``tau`` may be a float (applied to the combined certaindex = AND of all signals) or a
    ``{signal_name: tau}`` mapping (each signal its own threshold, all must pass).
    """

    kind = "threshold"
    requires_certaindex = True

    def __init__(self, tau: float | dict[str, float], detect_at: int = 1, every: int | None = None,
                 min_samples: int = 1) -> None:
        taus = tau.values() if isinstance(tau, dict) else [tau]
        if not taus or not all(is_unit(t) for t in taus):
            raise ConfigError(f"threshold tau must be in [0, 1], got {tau}")
        if not (is_count(detect_at) and (every is None or is_count(every)) and is_count(min_samples)):
            raise ConfigError(f"Threshold detect_at, every and min_samples must be >= 1, got {detect_at}, {every}, "
                              f"{min_samples}")
        self.tau, self.detect_at, self.every, self.min_samples = tau, detect_at, every, min_samples

    def passes(self, program: "Program") -> bool:
        if isinstance(self.tau, dict):
            return all(program.signals.get(name, -1.0) >= t for name, t in self.tau.items())
        c = program.certaindex
        return c is not None and c >= self.tau

    def decide(self, program: "Program") -> Decision:
        start = max(self.detect_at, self.min_samples)
        if crossed(program, start, self.every) and self.passes(program):
            return Decision(True, "certaindex")
        return CONTINUE

    def expected_remaining(self, program: "Program") -> float:
        """Knob units still to run, read from the certaindex (the SJF estimate).

        With a next check at ``n`` (the detection step, or the next ``every``):
        ``(n - k) + (1 - min(1, c / tau)) * (cap - n)``: a program whose certaindex ``c``
        already passes is expected to stop at ``n``, one far below the threshold to run to
        its cap. No check left before the cap, or no certaindex yet: ``cap - k``.
        """
        cap = self.budget_cap(program)
        if cap is None:
            return super().expected_remaining(program)
        k, start = program.knob_value, max(self.detect_at, self.min_samples)
        if k < start:
            nxt: int | None = start
        elif self.every:
            nxt = k + self.every - (k - start) % self.every
        else:
            nxt = None
        c = program.certaindex
        if nxt is None or nxt > cap or c is None:
            return float(max(0, cap - k))
        return float(nxt - k) + self.doubt(program) * (cap - nxt)

    def doubt(self, program: "Program") -> float:
        """How far the certaindex is from passing, in [0, 1]: ``1 - min(1, c / tau)`` (per-signal
        thresholds: 0 when all pass, else 1); the share of the rest a program is expected to run."""
        if isinstance(self.tau, dict):
            return 0.0 if self.passes(program) else 1.0
        c = program.certaindex or 0.0
        return 1.0 - min(1.0, c / self.tau) if self.tau > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tau": self.tau, "detect_at": self.detect_at, "every": self.every,
                "min_samples": self.min_samples}

    def __repr__(self) -> str:
        return f"Threshold(tau={self.tau}, detect_at={self.detect_at}, every={self.every})"


class Watch(Threshold):
    """Stop as soon as certaindex >= ``tau`` after any finished branch, once ``detect_at`` knob
    units are spent: checked after every ``execute()`` (every finished branch of every step,
    joins included), not only when the knob reaches a detection step as :class:`Threshold` is.

    Example:
        >>> Watch({"agreement": 0.9}, detect_at=3).to_dict()["kind"]
        'watch'
    """

    kind = "watch"

    def __init__(self, tau: float | dict[str, float], detect_at: int = 1, min_samples: int = 1) -> None:
        super().__init__(tau, detect_at=detect_at, every=None, min_samples=min_samples)

    def decide(self, program: "Program") -> Decision:
        if program.knob_value >= max(self.detect_at, self.min_samples) and self.passes(program):
            return Decision(True, "certaindex")
        return CONTINUE

    def expected_remaining(self, program: "Program") -> float:
        """Like :meth:`Threshold.expected_remaining` with a check at every knob value past the start."""
        cap = self.budget_cap(program)
        c = program.certaindex
        if cap is None or c is None:
            return super().expected_remaining(program)
        k, start = program.knob_value, max(self.detect_at, self.min_samples)
        nxt = max(k, start)
        if nxt > cap:
            return float(max(0, cap - k))
        return float(nxt - k) + self.doubt(program) * (cap - nxt)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tau": self.tau, "detect_at": self.detect_at, "min_samples": self.min_samples}

    def __repr__(self) -> str:
        return Policy.__repr__(self)


class _Budget(Policy):
    """A baseline with one fixed budget: stop once ``spent(program)`` reaches it.

    Subclasses name the budget's argument (``arg``), the exit ``reason`` and what counts."""

    arg: ClassVar[str]
    reason: ClassVar[str]

    def __init__(self, budget: int) -> None:
        if not is_count(budget):
            raise ConfigError(f"{type(self).__name__} {self.arg} must be >= 1, got {budget!r}")
        setattr(self, self.arg, budget)

    @property
    def budget(self) -> int:
        return getattr(self, self.arg)

    def spent(self, program: "Program") -> int:
        raise NotImplementedError

    def decide(self, program: "Program") -> Decision:
        return Decision(True, self.reason) if self.spent(program) >= self.budget else CONTINUE

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, self.arg: self.budget}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.budget})"


class Even(_Budget):
    """Baseline: a fixed budget of ``cap`` knob units for every program."""

    kind, arg, reason = "even", "cap", "budget"

    def __init__(self, cap: int) -> None:
        super().__init__(cap)

    def spent(self, program: "Program") -> int:
        return program.knob_value

    def budget_cap(self, program: "Program") -> int | None:
        return self.cap if program.knob_cap is None else min(self.cap, program.knob_cap)


class Length(_Budget):
    """Baseline: stop once the program has used ``max_tokens`` decode tokens (all kinds)."""

    kind, arg, reason = "length", "max_tokens", "length"

    def __init__(self, max_tokens: int) -> None:
        super().__init__(max_tokens)

    def spent(self, program: "Program") -> int:
        return program.tokens.total


POLICY_KINDS: Registry[Policy] = Registry("policy kind")
"""The runtime's stopping policies by ``kind`` (what ``to_dict`` writes); see ``Policy.from_dict``."""
POLICY_KINDS.register(Threshold.kind, Threshold, help="stop once certaindex >= tau at the detection step "
                      "(and every `every` knob units after)")
POLICY_KINDS.register(Even.kind, Even, help="baseline: a fixed knob budget for every program")
POLICY_KINDS.register(Length.kind, Length, help="baseline: stop at a decode-token budget")
POLICY_KINDS.register(Watch.kind, Watch, help="stop once certaindex >= tau after any finished branch (from "
                      "detect_at knob units on)")
