"""Every built-in stopping policy by ``kind``, in one table: the runtime's and this library's.

:data:`STOPPING_POLICIES` registers each kind explicitly, the runtime's own
(:mod:`certa.runtime.policy`: threshold, even, length, watch) first. A policy JSON (``to_dict``
output, e.g. what ``certa calibrate`` writes, what a server request carries) is rebuilt with
:func:`policy_from_dict`, and a policy's ``fields`` say what its numbers count (a server bounds
them by its limits).

Example:
    >>> STOPPING_POLICIES.names()[4:]
    ['check_every', 'pareto', 'esc', 'adaptive_consistency', 'margin', 'vote', 'stable_vote']
    >>> policy_from_dict({"kind": "esc", "window": 4}), STOPPING_POLICIES.get("esc").fields["window"]
    (ESC(window=4), 'knob')
"""

from __future__ import annotations

from typing import Any

from certa.runtime.policy import Even, Length, Policy, Threshold, Watch
from certa.runtime.registry import Registry

from certa.algorithms.policies.stopping import ESC, AdaptiveConsistency, CheckEvery, MajorityMargin, Pareto
from certa.algorithms.policies.votes import StableVote, VoteStop

__all__ = ["STOPPING_POLICIES", "policy_from_dict"]

STOPPING_POLICIES: Registry[Policy] = Registry("policy kind")
"""Every built-in stopping policy, keyed by its ``kind`` (what ``to_dict`` writes)."""

STOPPING_POLICIES.register(Threshold.kind, Threshold, help="stop once certaindex >= tau at the detection step "
                           "(and every `every` knob units after)")
STOPPING_POLICIES.register(Even.kind, Even, help="baseline: a fixed knob budget for every program")
STOPPING_POLICIES.register(Length.kind, Length, help="baseline: stop at a decode-token budget")
STOPPING_POLICIES.register(Watch.kind, Watch, help="stop once certaindex >= tau after any finished branch (from "
                           "detect_at knob units on)")
for _cls in (CheckEvery, Pareto, ESC, AdaptiveConsistency, MajorityMargin, VoteStop, StableVote):
    STOPPING_POLICIES.register(_cls.kind, _cls)  # help: the class docstring's first line


def policy_from_dict(data: dict[str, Any]) -> Policy:
    """Rebuild any built-in policy from its ``to_dict`` output (``ConfigError`` if it is not one)."""
    return Policy.from_dict(data, STOPPING_POLICIES)
