"""certa.algorithms: reasoning programs, answers, signals and policies written in certa's DSL.

Modules are namespaces: ``answers`` (extraction, normalization), ``equivalence``
(``math_equal``/``grade`` with certa's own timeout), ``clustering``, ``signals`` (certaindex
signals), ``prompts`` (sandboxed templates). Programs live in ``programs``; evaluation
tooling (datasets, traces, replay, calibration) in :mod:`certa.eval`. The names below load
on first use (module ``__getattr__``): importing one submodule does not load the others.
"""

from __future__ import annotations

from certa.runtime.lazy import lazy_exports

_FROM: dict[str, tuple[str, ...]] = {
    "certa.algorithms.answers": ("boxed", "extract_answer", "extract_boxed", "extract_probe_answer", "normalize"),
    "certa.algorithms.answers.clustering": ("cluster", "majority"),
    "certa.algorithms.answers.equivalence": ("grade", "math_equal"),
    "certa.algorithms.prompts": ("probe_text", "prompt", "render"),
    "certa.algorithms.signals": ("HESITATION_WORDS", "ProbeObs", "all_of", "entropy_certainty", "has_hesitation",
                                 "probe_consistency", "reward_certainty"),
    "certa.algorithms.policies": ("ESC", "AdaptiveConsistency", "CheckEvery", "MajorityMargin", "Pareto",
                                  "beta_stop_probability"),
    "certa.algorithms.programs.cot_probe": ("PRESETS", "cot_output", "cot_program"),
    "certa.algorithms.programs.self_consistency": ("sc_program",),
    "certa.algorithms.programs.mcts": ("mcts_program",),
    "certa.algorithms.programs.rebase": ("rebase_program",),
    "certa.algorithms.programs.sc_mcts": ("sc_mcts_program",),
    "certa.algorithms.programs.tree": ("Node", "Scorer", "self_eval", "tree_mermaid"),
    "certa.algorithms.programs.library": ("PROGRAMS", "build"),
}
_MODULES = {"answers": "certa.algorithms.answers", "clustering": "certa.algorithms.answers.clustering",
            "equivalence": "certa.algorithms.answers.equivalence", "policies": "certa.algorithms.policies",
            "prompts": "certa.algorithms.prompts", "signals": "certa.algorithms.signals"}
_LAZY: dict[str, tuple[str, str | None]] = {
    **{name: (module, name) for module, names in _FROM.items() for name in names},
    **{name: (module, None) for name, module in _MODULES.items()},
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
