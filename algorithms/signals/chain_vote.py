r"""Certaindex over several CoT chains of one question, read while they run (SC over CoT).

Each chain is a live sub-program with its own CoT certaindex; after every lock-step round the
parent sees a :class:`ChainsView`: each chain's current answer (its final answer once it
ended — finished, or stopped by its own certaindex — else its latest probe's) and whether it
ended. Rules (each a value in [0, 1]; the program stops at 1.0):

- :class:`SettledVote` (``sc_cot_program()``'s default) — the vote of the ended chains can no
  longer change: the leading answer's count minus the runner-up's exceeds the chains still
  running, so whatever they answer the majority stays. With each chain stopping on its own
  certaindex this stops a question as soon as enough chains have *settled* on one answer.
- :class:`FinishedPlurality` — the same rule over chains that finished naturally only (the peer
  without per-chain early exit).
- :class:`FirstAgree` — ESC on ended chains: the first ``window`` chains to end agree.
- :class:`RoundsVote` — the plain probe vote: the top answer of all current answers holds at
  least ``share`` of the chains in each of the last ``rounds`` rounds.

Example:
    >>> view = ChainsView(answers=("18", "18", "20"), ended=(True, True, False), order=(0, 1), history=())
    >>> SettledVote()(view), SettledVote().answer(view)
    (1.0, '18')
    >>> SettledVote()(ChainsView(("18", "20", "18"), (True, True, False), (0, 1), ()))
    0.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from certa.runtime.errors import ConfigError
from certa.runtime.registry import Registry

from certa.algorithms.answers.clustering import cluster

__all__ = ["CHAIN_VOTES", "ChainsView", "ChainVote", "FinishedPlurality", "FirstAgree", "RoundsVote", "SettledVote",
           "chain_vote_from_dict"]


@dataclass(frozen=True)
class ChainsView:
    """What a chain-vote rule sees after a round: each chain's current answer ("" for none) and
    whether it ended, the order chains ended in, and earlier rounds' answers (oldest first)."""

    answers: tuple[str, ...]
    ended: tuple[bool, ...]
    order: tuple[int, ...]
    history: tuple[tuple[str, ...], ...]
    finished: tuple[bool, ...] = ()  # ended naturally (not stopped by their own certaindex)


def _counts(answers: Sequence[str]) -> list[tuple[str, int]]:
    """Answer clusters (math-equal, empty answers left out) as (representative, size), largest first."""
    kept = [a for a in answers if a]
    groups = cluster(kept, "math") if kept else []
    return sorted(((kept[g[0]], len(g)) for g in groups), key=lambda x: -x[1])


class ChainVote:
    """Base of chain-vote rules: ``rule(view) -> float`` in [0, 1] and the ``answer`` it backs."""

    kind: ClassVar[str] = ""

    def __call__(self, view: ChainsView) -> float:
        raise NotImplementedError

    def answer(self, view: ChainsView) -> str | None:
        """The majority of every chain's current answer (the rule's backing answer by default)."""
        top = _counts(view.answers)
        return top[0][0] if top else None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **vars(self)}


@dataclass(frozen=True)
class SettledVote(ChainVote):
    """1.0 iff, among ended chains, the lead over the runner-up exceeds the chains still running."""

    kind: ClassVar[str] = "settled-vote"

    def _pool(self, view: ChainsView) -> tuple[list[str], int]:
        done = [a for a, e in zip(view.answers, view.ended) if e]
        return done, len(view.answers) - len(done)

    def __call__(self, view: ChainsView) -> float:
        done, running = self._pool(view)
        top = _counts(done)
        if not top:
            return 0.0
        lead = top[0][1] - (top[1][1] if len(top) > 1 else 0)
        return 1.0 if lead > running else max(0.0, lead / (running + 1))

    def answer(self, view: ChainsView) -> str | None:
        top = _counts(self._pool(view)[0])
        return top[0][0] if top else super().answer(view)


@dataclass(frozen=True)
class FinishedPlurality(SettledVote):
    """:class:`SettledVote` over chains that finished naturally (early-stopped ones count as running)."""

    kind: ClassVar[str] = "finished-plurality"

    def _pool(self, view: ChainsView) -> tuple[list[str], int]:
        ended = view.finished or view.ended
        done = [a for a, e in zip(view.answers, ended) if e]
        return done, len(view.answers) - len(done)


@dataclass(frozen=True)
class FirstAgree(ChainVote):
    """ESC on ended chains: 1.0 iff the first ``window`` chains to end agree (non-empty)."""

    window: int = 2
    kind: ClassVar[str] = "first-agree"

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ConfigError(f"first-agree needs window >= 1, got {self.window}")

    def __call__(self, view: ChainsView) -> float:
        first = [view.answers[i] for i in view.order[:self.window]]
        top = _counts(first)
        return float(len(first) == self.window and len(top) == 1 and top[0][1] == self.window)

    def answer(self, view: ChainsView) -> str | None:
        top = _counts([view.answers[i] for i in view.order[:self.window]])
        return top[0][0] if top else super().answer(view)


@dataclass(frozen=True)
class RoundsVote(ChainVote):
    """1.0 iff in each of the last ``rounds`` rounds one answer (the same) held >= ``share`` of all chains."""

    share: float = 0.75
    rounds: int = 4
    kind: ClassVar[str] = "rounds-vote"

    def __post_init__(self) -> None:
        if not 0.0 < self.share <= 1.0 or self.rounds < 1:
            raise ConfigError(f"rounds-vote needs share in (0, 1] and rounds >= 1, got {self.share}, {self.rounds}")

    def __call__(self, view: ChainsView) -> float:
        rounds = [*view.history, view.answers][-self.rounds:]
        if len(rounds) < self.rounds:
            return 0.0
        tops = [_counts(r) for r in rounds]
        if any(not t or t[0][1] < self.share * len(view.answers) - 1e-9 for t in tops):
            return 0.0
        first = tops[-1][0][0]
        return float(all(_counts([first, t[0][0]])[0][1] == 2 for t in tops))


CHAIN_VOTES: Registry[ChainVote] = Registry("chain vote rule")
"""Chain-vote rules by ``kind`` (``sc_cot_program(rule=...)``, bench rows, policy files)."""
for _cls in (SettledVote, FinishedPlurality, FirstAgree, RoundsVote):
    CHAIN_VOTES.register(_cls.kind, _cls)


def chain_vote_from_dict(spec: dict[str, Any]) -> ChainVote:
    """Rebuild a rule from its ``to_dict`` (ConfigError on an unknown kind or field)."""
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ConfigError(f"a chain vote rule is a dict with a 'kind', got {spec!r}")
    try:
        return CHAIN_VOTES.get(spec["kind"])(**{k: v for k, v in spec.items() if k != "kind"})
    except TypeError as exc:
        raise ConfigError(f"bad chain vote rule {spec!r}: {exc}") from None
