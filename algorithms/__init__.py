"""certa.algorithms: reasoning programs, answers, signals and policies written in certa's DSL.

Modules are namespaces: ``answers`` (extraction, normalization), ``equivalence``
(``math_equal``/``grade`` with certa's own timeout), ``clustering``, ``signals`` (certaindex
signals), ``prompts`` (sandboxed templates). Programs live in ``programs``; evaluation
tooling (datasets, traces, replay, calibration) in :mod:`certa.eval`.
"""

from certa.algorithms import answers, policies, prompts, signals
from certa.algorithms.answers import clustering, equivalence
from certa.algorithms.answers import boxed, extract_answer, extract_boxed, extract_probe_answer, normalize
from certa.algorithms.answers.clustering import cluster, majority
from certa.algorithms.answers.equivalence import grade, math_equal
from certa.algorithms.prompts import probe_text, prompt, render
from certa.algorithms.signals import (HESITATION_WORDS, ProbeObs, all_of, entropy_certainty, has_hesitation, probe_consistency,
                      reward_certainty)
from certa.algorithms.policies import ESC, AdaptiveConsistency, CheckEvery, MajorityMargin, Pareto, beta_stop_probability
from certa.algorithms.programs.cot_probe import PRESETS, cot_output, cot_program
from certa.algorithms.programs.self_consistency import sc_program
from certa.algorithms.programs.mcts import mcts_program
from certa.algorithms.programs.rebase import rebase_program
from certa.algorithms.programs.sc_mcts import sc_mcts_program
from certa.algorithms.programs.tree import Node, Scorer, self_eval, tree_mermaid
from certa.algorithms.programs.library import PROGRAMS, build

__all__ = [
    "ESC", "PRESETS", "PROGRAMS", "AdaptiveConsistency", "CheckEvery", "MajorityMargin", "Node", "Pareto", "Scorer",
    "beta_stop_probability", "build", "cot_output", "cot_program", "mcts_program", "policies", "rebase_program",
    "sc_mcts_program", "sc_program", "self_eval", "tree_mermaid",
    "HESITATION_WORDS", "ProbeObs", "all_of", "answers", "boxed", "cluster", "clustering",
    "entropy_certainty", "equivalence", "extract_answer", "extract_boxed", "extract_probe_answer", "grade",
    "has_hesitation", "majority", "math_equal", "normalize", "probe_consistency", "probe_text",
    "prompt", "prompts", "render", "reward_certainty", "signals",
]
