"""Answers: extraction and normalization (``extract``), math equivalence with certa's own
timeout (``equivalence``) and answer clustering (``clustering``).

Example:
    >>> from certa.algorithms.answers import extract_answer
    >>> extract_answer("so the total is \\\\boxed{408}", "gsm8k")
    '408'
"""

from certa.algorithms.answers.extract import (MAX_SCAN, NUMERIC_DATASETS, boxed, canonical_dataset,
    extract_answer, extract_boxed, extract_probe_answer, gold_answer, gsm8k_gold, normalize)
from certa.algorithms.answers.equivalence import (MAX_ANSWER_CHARS, cache_clear, grade, math_equal,
    parse_number, shutdown, warm_up)
from certa.algorithms.answers.clustering import (EmbeddingClusterer, Same, cluster, is_empty, majority,
    resolve_same)

__all__ = [
    'EmbeddingClusterer', 'MAX_ANSWER_CHARS', 'MAX_SCAN', 'NUMERIC_DATASETS', 'Same', 'boxed', 'cache_clear',
    'canonical_dataset', 'cluster', 'extract_answer', 'extract_boxed', 'extract_probe_answer', 'gold_answer',
    'grade', 'gsm8k_gold', 'is_empty', 'majority', 'math_equal', 'normalize', 'parse_number', 'resolve_same',
    'shutdown', 'warm_up',
]
