"""Certaindex signals: multi-path ones (answer entropy, reward, probe agreement: ``multipath``),
the composable chain-of-thought signals (``cot``), the weighted-vote certainty of
Self-Consistency (``votes``) and the zero-cost text probes (``text``: the answer a chain has
committed to, read from its own words; loaded on first use).

Example:
    >>> from certa.algorithms.signals import entropy_certainty
    >>> entropy_certainty(["4", "4", "4"])
    1.0
"""

from certa.algorithms.signals.multipath import (HESITATION_WORDS, ProbeObs, all_of, entropy_certainty,
    has_hesitation, probe_consistency, reward_certainty)
from certa.algorithms.signals.cot import (COT_SIGNALS, AllOf, ChainView, CoTSignal, Confident, Grounded,
    MAIN_TEXT_HESITATION, ProbeAgreement, Progress, Settled, answer_probability, signal_from_dict)
from certa.algorithms.signals.votes import VoteView, sample_confidence, vote_certainty, vote_view, vote_weights

_TEXT = ("Committed", "committed_answer", "for_problem", "statements")

__all__ = [
    "AllOf", "COT_SIGNALS", "ChainView", "CoTSignal", "Committed", "Confident", "Grounded", "HESITATION_WORDS",
    "MAIN_TEXT_HESITATION", "ProbeAgreement", "ProbeObs", "Progress", "Settled", "VoteView", "all_of",
    "answer_probability", "committed_answer", "entropy_certainty", "for_problem", "has_hesitation",
    "probe_consistency", "reward_certainty", "sample_confidence", "signal_from_dict", "statements",
    "vote_certainty", "vote_view", "vote_weights",
]


def __getattr__(name: str):
    if name in _TEXT:  # the text-probe reader loads when first used, not with every signal
        from certa.algorithms.signals import text
        return getattr(text, name)
    raise AttributeError(f"module 'certa.algorithms.signals' has no attribute {name!r}")
