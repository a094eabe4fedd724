"""certa.runtime: the Program abstraction, policies, scheduler, backends and the Runtime.

This layer imports neither ``certa.dsl`` nor ``certa.algorithms``.
"""

from .backends import Backend, ChunkedSequence, ScriptedBackend, Sequence
from .context import Context, ManagedSequence
from .draw import Mermaid
from .errors import CertaError
from .events import Event, EventBus
from .policy import CONTINUE, Decision, Even, Length, Policy, Threshold
from .program import Program
from .result import Result
from .program_run import ProgramRun, RetryPolicy, RuntimeLimits
from .runtime import Runtime, run_blocking
from .scheduler import AdmissionLimits, ProgramInfo, Scheduler, SchedulingPolicy, Ticket
from .types import (Capabilities, CertaindexPoint, GenRequest, GenResult, Knob, ScoreRequest, ScoreResult,
                    TokenUsage)

__all__ = [
    "AdmissionLimits", "Backend", "CONTINUE", "Capabilities", "CertaError", "CertaindexPoint", "ChunkedSequence",
    "Context", "Decision", "Even", "Event", "EventBus", "GenRequest", "GenResult", "Knob", "Length", "ProgramRun",
    "ManagedSequence", "Mermaid", "Policy", "Program", "ProgramInfo", "Result", "RetryPolicy", "Runtime",
    "RuntimeLimits", "Scheduler", "SchedulingPolicy", "ScoreRequest", "ScoreResult", "ScriptedBackend",
    "Sequence", "Threshold", "Ticket", "TokenUsage", "run_blocking",
]
