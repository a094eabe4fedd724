"""certa.algorithms: reasoning programs, answers, signals and policies written in certa's DSL.

Modules are namespaces: ``answers`` (extraction, normalization), ``equivalence``
(``math_equal``/``grade`` with certa's own timeout), ``clustering``, ``signals`` (certaindex
signals), ``prompts`` (sandboxed templates), ``datasets``.
"""

from . import answers, clustering, datasets, equivalence, policies, prompts, signals
from .answers import boxed, extract_answer, extract_boxed, extract_probe_answer, normalize
from .clustering import cluster, majority
from .datasets import Problem, load_dataset
from .equivalence import grade, math_equal
from .prompts import probe_text, prompt, render
from .signals import (HESITATION_WORDS, ProbeObs, all_of, entropy_certainty, has_hesitation, probe_consistency,
                      reward_certainty)
from .policies import ESC, AdaptiveConsistency, CheckEvery, MajorityMargin, Pareto, beta_stop_probability
from .cot_probe import PRESETS, cot_output, cot_program
from .self_consistency import sc_program
from .mcts import mcts_program
from .rebase import rebase_program
from .sc_mcts import sc_mcts_program
from .tree import Node, Scorer, self_eval, tree_mermaid
from .library import PROGRAMS, build

__all__ = [
    "ESC", "PRESETS", "PROGRAMS", "AdaptiveConsistency", "CheckEvery", "MajorityMargin", "Node", "Pareto", "Scorer",
    "beta_stop_probability", "build", "cot_output", "cot_program", "mcts_program", "policies", "rebase_program",
    "sc_mcts_program", "sc_program", "self_eval", "tree_mermaid",
    "HESITATION_WORDS", "Problem", "ProbeObs", "all_of", "answers", "boxed", "cluster", "clustering", "datasets",
    "entropy_certainty", "equivalence", "extract_answer", "extract_boxed", "extract_probe_answer", "grade",
    "has_hesitation", "load_dataset", "majority", "math_equal", "normalize", "probe_consistency", "probe_text",
    "prompt", "prompts", "render", "reward_certainty", "signals",
]
