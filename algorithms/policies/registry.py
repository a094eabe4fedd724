"""Every built-in stopping policy by ``kind``: the runtime's and this library's, in one table.

:data:`STOPPING_POLICIES` starts with the runtime's :data:`~certa.runtime.policy.POLICY_KINDS`
(threshold, even, length) and registers this package's policies explicitly. A policy JSON
(``to_dict`` output, e.g. what ``certa calibrate`` writes) is rebuilt with
:func:`policy_from_dict`.

Example:
    >>> STOPPING_POLICIES.names()[4:]
    ['check_every', 'pareto', 'esc', 'adaptive_consistency', 'margin', 'vote', 'stable_vote']
    >>> policy_from_dict({"kind": "esc", "window": 4})
    ESC(window=4)
"""

from __future__ import annotations

from typing import Any

from certa.runtime.policy import POLICY_KINDS, Policy
from certa.runtime.registry import Registry

from certa.algorithms.policies.stopping import ESC, AdaptiveConsistency, CheckEvery, MajorityMargin, Pareto
from certa.algorithms.policies.votes import StableVote, VoteStop

__all__ = ["STOPPING_POLICIES", "policy_from_dict"]

STOPPING_POLICIES: Registry[Policy] = Registry("policy kind", include=(POLICY_KINDS,))
"""Every built-in stopping policy, keyed by its ``kind``."""

for _cls in (CheckEvery, Pareto, ESC, AdaptiveConsistency, MajorityMargin, VoteStop, StableVote):
    STOPPING_POLICIES.register(_cls.kind, _cls)  # help: the class docstring's first line


def policy_from_dict(data: dict[str, Any]) -> Policy:
    """Rebuild any built-in policy from its ``to_dict`` output (``ConfigError`` if it is not one)."""
    return Policy.from_dict(data, STOPPING_POLICIES)
