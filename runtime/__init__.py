"""certa.runtime: the Program abstraction, policies, scheduler, backends and the Runtime.

This layer imports neither ``certa.dsl`` nor ``certa.algorithms``.
"""

from certa.runtime.backends import Backend, ChunkedSequence, ScriptedBackend, BackendSequence
from certa.runtime.context import Context, ManagedSequence
from certa.runtime.draw import Mermaid
from certa.runtime.errors import CertaError
from certa.runtime.events import Event, EventBus
from certa.runtime.policy import CONTINUE, Decision, Even, Length, Policy, Threshold, Watch
from certa.runtime.program import Program
from certa.runtime.result import Result
from certa.runtime.limits import RetryPolicy, RuntimeLimits
from certa.runtime.program_run import ProgramRun
from certa.runtime.runtime import Runtime, run_blocking
from certa.runtime.build import make_runtime
from certa.runtime.scheduling.scheduler import AdmissionLimits, ProgramInfo, Scheduler, SchedulingPolicy, Ticket
from certa.runtime.streaming import CertaindexUpdate, ProgramStream, StateValues, StepUpdate
from certa.runtime.token_stream import TokenChunk, TokenStream
from certa.runtime.types import (Capabilities, CertaindexPoint, GenRequest, GenResult, Knob, ScoreRequest, ScoreResult,
                    TokenUsage)

__all__ = [
    "AdmissionLimits", "Backend", "CONTINUE", "Capabilities", "CertaError", "CertaindexPoint", "CertaindexUpdate",
    "ChunkedSequence", "ProgramStream", "StateValues", "StepUpdate", "TokenChunk", "TokenStream",
    "Context", "Decision", "Even", "Event", "EventBus", "GenRequest", "GenResult", "Knob", "Length", "ProgramRun",
    "ManagedSequence", "Mermaid", "Policy", "Program", "ProgramInfo", "Result", "RetryPolicy", "Runtime",
    "RuntimeLimits", "make_runtime", "Scheduler", "SchedulingPolicy", "ScoreRequest", "ScoreResult", "ScriptedBackend",
    "BackendSequence", "Threshold", "Ticket", "TokenUsage", "Watch", "run_blocking",
]
