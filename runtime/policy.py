"""How a program stops: the stopping policies, their exit reasons, budgets and field units.

This module is the one home of "how a program stops"; the driver, ``Result``, the server, the
CLI, trace replay and the simulator read it:

- **exit reasons**: :data:`StopReason` is what a policy's :class:`Decision` says;
  :data:`ExitReason` adds how else a run ends (its knob cap, on its own, an error, a cancel, an
  interrupt, the server's time limit). :data:`EXIT_REASONS` says what each means;
  :func:`saves_tokens` which of them count tokens saved, :func:`finish_reason` OpenAI's word for it.
- **budgets**: :class:`Even` (knob units) and :class:`Length` (decode tokens) are baselines;
  :class:`TokenBudget` puts a ``Length`` budget on top of any policy (a request's
  ``max_tokens``, ``certa serve --max-tokens``).
- **field units**: each policy declares what its ``to_dict`` fields count in :attr:`Policy.fields`
  (knob units, decode tokens, a fraction in [0, 1]), so a server can bound a request's policy
  without a table of its own.

Built-ins here are the paper's threshold rule (checked when the knob reaches its detection
step), :class:`Watch` (the same rule checked after every finished branch) and the two
baselines; ``certa.algorithms`` adds Pareto curves and the published SC stopping rules on the
same interface, and lists every built-in kind in one table,
``certa.algorithms.policies.STOPPING_POLICIES``. Every policy prints as its parameters
(``repr``, what ``draw()`` shows).

Example:
    >>> p = Threshold(0.6, detect_at=4)
    >>> p.requires_certaindex, p.fields["detect_at"], saves_tokens("certaindex"), finish_reason("length")
    (True, 'knob', True, 'length')
    >>> Even(8).to_dict(), Watch(0.8, detect_at=2)
    ({'kind': 'even', 'cap': 8}, Watch(tau=0.8, detect_at=2, min_samples=1))
    >>> TokenBudget(Threshold(0.6), max_tokens=4000)
    TokenBudget(Threshold(tau=0.6, detect_at=1, every=None), max_tokens=4000)
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from certa.runtime.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.program import Program
    from certa.runtime.registry import Registry

StopReason = Literal["certaindex", "budget", "length", "esc", "adaptive_consistency", "margin"]
"""What a policy's :class:`Decision` to stop says: ``certaindex`` (a certaindex rule),
``budget`` (:class:`Even`), ``length`` (a token budget), or the answer rule that stopped it."""

ExitReason = Literal["certaindex", "budget", "length", "esc", "adaptive_consistency", "margin",
                     "cap", "done", "error", "cancelled", "interrupted", "time_limit"]
"""How a run ended (``Result.exit_reason``): a :data:`StopReason`, or one of the others."""

EXIT_REASONS: dict[str, str] = {
    "certaindex": "the policy stopped it early on certaindex",
    "budget": "the even baseline's fixed knob budget was spent",
    "length": "its decode-token budget was spent (Length, a request's max_tokens)",
    "esc": "ESC: a whole window of answers agreed",
    "adaptive_consistency": "Adaptive-Consistency: the leading answer is likely enough to stay ahead",
    "margin": "the leading answer is `margin` votes ahead",
    "cap": "the knob cap was reached",
    "done": "it finished on its own",
    "error": "it failed (Result.error)",
    "cancelled": "it was cancelled",
    "interrupted": "it paused at an interrupt (a checkpointed thread)",
    "time_limit": "it ran past the server's time limit and was aborted",
}
"""Every :data:`ExitReason` and what it means (checked against the Literal by the tests)."""

_NOT_EARLY = frozenset({"cap", "done", "error", "interrupted"})

FieldUnit = Literal["knob", "tokens", "fraction"]
"""What a policy field counts: knob units (bounded by a server's ``--max-knob``), decode tokens
(``--max-tokens``), or a fraction in [0, 1]."""


def saves_tokens(reason: str) -> bool:
    """Whether a run that ended with ``reason`` may have saved tokens against its cap (a policy
    stopped it: not ``cap``, ``done``, ``error`` nor ``interrupted``)."""
    return reason not in _NOT_EARLY


def finish_reason(reason: str) -> Literal["stop", "length"]:
    """OpenAI's ``finish_reason`` for an exit reason: ``length`` when a token budget ended it."""
    return "length" if reason == "length" else "stop"


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's verdict: continue, or stop with a :data:`StopReason`."""

    stop: bool
    reason: StopReason | Literal[""] = ""


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
    fields: ClassVar[Mapping[str, FieldUnit]] = {}
    """What the ``to_dict`` fields count (a field not named here is neither bounded nor checked)."""

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

        ``data["kind"]`` is looked up in ``kinds``: ``certa.algorithms.policies.STOPPING_POLICIES``,
        the one table of every built-in kind, which ``policy_from_dict`` there (and
        ``ct.policy_from_dict``) passes. Without ``kinds`` only this module's kinds resolve
        (threshold, watch, even, length), with a ``DeprecationWarning``.
        """
        kind = data.get("kind")
        if kinds is None:
            warnings.warn("Policy.from_dict without kinds= knows only the runtime's threshold, watch, even and "
                          "length; use ct.policy_from_dict", DeprecationWarning, stacklevel=2)
            own = {c.kind: c for c in (Threshold, Watch, Even, Length)}
            if kind not in own:
                raise ConfigError(f"unknown policy kind {kind!r}", hint="ct.policy_from_dict knows every kind")
            cls = own[kind]
        else:
            cls = kinds.get(kind)
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
    fields = {"tau": "fraction", "detect_at": "knob", "every": "knob", "min_samples": "knob"}

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
    reason: ClassVar[StopReason]

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
    fields = {"cap": "knob"}

    def __init__(self, cap: int) -> None:
        super().__init__(cap)

    def spent(self, program: "Program") -> int:
        return program.knob_value

    def budget_cap(self, program: "Program") -> int | None:
        return self.cap if program.knob_cap is None else min(self.cap, program.knob_cap)


class Length(_Budget):
    """Baseline: stop once the program has used ``max_tokens`` decode tokens (all kinds)."""

    kind, arg, reason = "length", "max_tokens", "length"
    fields = {"max_tokens": "tokens"}

    def __init__(self, max_tokens: int) -> None:
        super().__init__(max_tokens)

    def spent(self, program: "Program") -> int:
        return program.tokens.total


class TokenBudget(Policy):
    """``inner`` (or no policy) under a decode-token budget: :class:`Length`'s rule first (stop,
    reason ``length``, once the program's decode tokens reach ``max_tokens``), else ``inner``
    decides. What a request's ``max_tokens`` puts on a served program."""

    def __init__(self, inner: Policy | None, max_tokens: int) -> None:
        self.inner, self.length = inner, Length(max_tokens)

    @property
    def max_tokens(self) -> int:
        return self.length.max_tokens

    def decide(self, program: "Program") -> Decision:
        stop = self.length.decide(program)
        if stop.stop:
            return stop
        return self.inner.decide(program) if self.inner is not None else CONTINUE

    def budget_cap(self, program: "Program") -> int | None:
        return self.inner.budget_cap(program) if self.inner is not None else program.knob_cap

    def validate(self, program: "Program") -> None:
        if self.inner is not None:
            self.inner.validate(program)

    def expected_remaining(self, program: "Program") -> float:
        if self.inner is not None:
            return self.inner.expected_remaining(program)
        return super().expected_remaining(program)

    def __repr__(self) -> str:
        return f"TokenBudget({self.inner!r}, max_tokens={self.max_tokens})"

