"""Stopping policies beyond the runtime's Threshold/Even/Length: CheckEvery, Pareto and the
published Self-Consistency rules (ESC, Adaptive-Consistency, majority margin).

Example:
    >>> from certa.algorithms.policies import ESC
    >>> ESC(window=4).window
    4
"""

from certa.algorithms.policies.stopping import (AdaptiveConsistency, CheckEvery, ESC, MajorityMargin, Pareto,
    answers_of, beta_stop_probability, top_two)
from certa.algorithms.policies.registry import STOPPING_POLICIES, policy_from_dict

__all__ = [
    'AdaptiveConsistency', 'CheckEvery', 'ESC', 'MajorityMargin', 'Pareto', 'answers_of',
    'beta_stop_probability', 'top_two', 'STOPPING_POLICIES', 'policy_from_dict',
]
