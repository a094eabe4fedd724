"""Certaindex signals: multi-path ones (answer entropy, reward, probe agreement: ``multipath``)
and the composable chain-of-thought signals (``cot``).

Example:
    >>> from certa.algorithms.signals import entropy_certainty
    >>> entropy_certainty(["4", "4", "4"])
    1.0
"""

from certa.algorithms.signals.multipath import (HESITATION_WORDS, ProbeObs, all_of, entropy_certainty,
    has_hesitation, probe_consistency, reward_certainty)
from certa.algorithms.signals.cot import (COT_SIGNALS, AllOf, ChainView, CoTSignal, Confident, Grounded,
    MAIN_TEXT_HESITATION, ProbeAgreement, Progress, Settled, answer_probability, signal_from_dict)

__all__ = [
    'AllOf', 'COT_SIGNALS', 'ChainView', 'CoTSignal', 'Confident', 'Grounded', 'HESITATION_WORDS',
    'MAIN_TEXT_HESITATION',
    'ProbeAgreement', 'ProbeObs', 'Progress', 'Settled', 'all_of', 'answer_probability', 'entropy_certainty',
    'has_hesitation', 'probe_consistency', 'reward_certainty', 'signal_from_dict',
]
from certa.algorithms.signals.votes import (VoteView, sample_confidence, vote_certainty,  # noqa: E402
    vote_view, vote_weights)
__all__ += ['VoteView', 'sample_confidence', 'vote_certainty', 'vote_view', 'vote_weights']
from certa.algorithms.signals.text import Committed, committed_answer, for_problem, statements  # noqa: E402
__all__ += ['Committed', 'committed_answer', 'for_problem', 'statements']
