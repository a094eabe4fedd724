"""certa.algorithms: reasoning programs, answers, signals and policies written in certa's DSL.

Modules are namespaces: ``answers`` (extraction, normalization), ``equivalence``
(``math_equal``/``grade`` with certa's own timeout), ``clustering``, ``signals`` (certaindex
signals), ``prompts`` (sandboxed templates), ``datasets``.
"""

from . import answers, clustering, datasets, equivalence, prompts, signals
from .answers import boxed, extract_answer, extract_boxed, extract_probe_answer, normalize
from .clustering import cluster, majority
from .datasets import Problem, load_dataset
from .equivalence import grade, math_equal
from .prompts import probe_text, prompt, render
from .signals import (HESITATION_WORDS, ProbeObs, all_of, entropy_certainty, has_hesitation, probe_consistency,
                      reward_certainty)

__all__ = [
    "HESITATION_WORDS", "Problem", "ProbeObs", "all_of", "answers", "boxed", "cluster", "clustering", "datasets",
    "entropy_certainty", "equivalence", "extract_answer", "extract_boxed", "extract_probe_answer", "grade",
    "has_hesitation", "load_dataset", "majority", "math_equal", "normalize", "probe_consistency", "probe_text",
    "prompt", "prompts", "render", "reward_certainty", "signals",
]
