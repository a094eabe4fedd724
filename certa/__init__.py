"""certa: declare LLM reasoning programs as graphs, run them with certaindex early exit.

The names below load on first use (module ``__getattr__``), so ``import certa.runtime``
does not pay for the DSL, the algorithms library or their dependencies.

Example:
    >>> import certa as ct
    >>> ct.Threshold(0.5, detect_at=4)
    Threshold(tau=0.5, detect_at=4, every=None)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certa.moved import install as _install_moved
from certa.runtime.lazy import lazy_exports

__version__ = "0.1.0"

_DSL = ("END", "START", "Annotated", "Appended", "CompiledGraph", "Extended", "Graph", "GraphProgram", "Overwrite",
        "Reducer", "Send", "State", "add", "append", "extend", "max_", "merge", "min_")
_RUNTIME = ("AdmissionLimits", "Backend", "Capabilities", "CertaError", "Context", "Decision", "Even", "Event",
            "GenRequest", "GenResult", "Knob", "Length", "Mermaid", "Policy", "Program", "Result", "Runtime",
            "RuntimeLimits", "Scheduler", "SchedulingPolicy", "ScriptedBackend", "Threshold", "TokenUsage",
            "Watch", "make_runtime", "run_blocking")

# public name -> (module, attribute or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    **{name: ("certa.dsl", name) for name in _DSL},
    **{name: ("certa.runtime", name) for name in _RUNTIME},
    **{name: ("certa.runtime.checkpoint", name) for name in ("Checkpointer", "Command", "MemoryCheckpointer",
                                                             "InterruptedResult")},
    "SqliteCheckpointer": ("certa.runtime.checkpoint_sqlite", "SqliteCheckpointer"),
    **{name: ("certa.selfcal", name) for name in ("ExploreRate", "SelfCalibrating")},
    "answers": ("certa.algorithms.answers", None),
    "equivalence": ("certa.algorithms.answers.equivalence", None),
    "prompts": ("certa.algorithms.prompts", None),
    "prompt": ("certa.algorithms.prompts", "prompt"),
    "signals": ("certa.algorithms.signals", None),
    "policy_from_dict": ("certa.algorithms.policies.registry", "policy_from_dict"),
    "STOPPING_POLICIES": ("certa.algorithms.policies.registry", "STOPPING_POLICIES"),
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from certa.algorithms import answers, prompts, signals
    from certa.algorithms.answers import equivalence
    from certa.algorithms.policies.registry import STOPPING_POLICIES, policy_from_dict
    from certa.algorithms.prompts import prompt
    from certa.runtime.checkpoint import Checkpointer, Command, InterruptedResult, MemoryCheckpointer
    from certa.runtime.checkpoint_sqlite import SqliteCheckpointer
    from certa.selfcal import ExploreRate, SelfCalibrating
    from certa.dsl import (END, START, Annotated, Appended, CompiledGraph, Extended, Graph, GraphProgram, Overwrite,
                           Reducer, Send, State, add, append, extend, max_, merge, min_)
    from certa.runtime import (AdmissionLimits, Backend, Capabilities, CertaError, Context, Decision, Even, Event,
                               GenRequest, GenResult, Knob, Length, Mermaid, Policy, Program, Result, Runtime,
                               RuntimeLimits, Scheduler, SchedulingPolicy, ScriptedBackend, Threshold, TokenUsage,
                               Watch, make_runtime, run_blocking)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
_install_moved()  # certa.drawing, certa.cli_run, ...: old names of moved modules (certa.moved)
