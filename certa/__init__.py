"""certa: declare LLM reasoning programs as graphs, run them with certaindex early exit.

Example:
    >>> import certa as ct
    >>> ct.Threshold(0.5, detect_at=4)
    Threshold(tau=0.5, detect_at=4, every=None)
"""

from certa.dsl import (END, START, Annotated, Appended, CompiledGraph, Extended, Graph, GraphProgram, Reducer,
                       Send, State, add, append, extend, max_, merge, min_)
from certa.runtime import (AdmissionLimits, Backend, Capabilities, CertaError, Context, Decision, Even, Event,
                           GenRequest, GenResult, Knob, Length, Mermaid, Policy, Program, Result, Runtime,
                           RuntimeLimits, Scheduler, SchedulingPolicy, ScriptedBackend, Threshold, TokenUsage,
                           run_blocking)

from certa.algorithms import answers, prompts, signals
from certa.algorithms.answers import equivalence
from certa.algorithms.prompts import prompt

__version__ = "0.1.0"

__all__ = [
    "END", "START", "AdmissionLimits", "Annotated", "Appended", "Backend", "Capabilities", "CertaError",
    "CompiledGraph", "Context", "Decision", "Even", "Event", "Extended", "GenRequest", "GenResult", "Graph",
    "GraphProgram", "Knob", "Length", "Mermaid", "Policy", "Program", "Reducer", "Result", "Runtime",
    "RuntimeLimits", "Scheduler", "SchedulingPolicy", "ScriptedBackend", "Send", "State", "Threshold",
    "TokenUsage", "add", "answers", "append", "equivalence", "extend", "max_", "merge", "min_", "prompt", "prompts",
    "run_blocking", "signals",
]
