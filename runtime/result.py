"""The outcome of one program run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from certa.runtime.errors import CertaError, StepFailedError
from certa.runtime.policy import ExitReason, saves_tokens
from certa.runtime.types import CertaindexPoint, TokenUsage

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.program import Program
    from certa.runtime.program_run import ProgramRun


@dataclass
class Result:
    """What ``Runtime.run`` returns.

    ``exit_reason`` is an :data:`~certa.runtime.policy.ExitReason`: ``certaindex`` (the policy
    stopped it early), ``cap`` (knob cap reached), ``budget``/``length`` (baseline policies),
    ``done`` (finished on its own), ``error``, ... (``certa.runtime.policy.EXIT_REASONS`` says
    what each means). ``tokens_saved`` estimates decode tokens not spent compared
    with running to the knob cap (0 unless it exited early). ``cancelled``: the ``(step,
    branch)`` pairs still running when the program exited, which the exit cancelled (an early
    exit's, usually); ``aborted``: the rids of the backend requests the runtime aborted — theirs
    in flight at the exit, and any a cancelled step, a failure or a timeout gave up on.
    """

    program_id: str
    name: str
    answer: Any
    state: Any
    certaindex: list[CertaindexPoint] = field(default_factory=list)
    tokens: TokenUsage = field(default_factory=TokenUsage)
    knob_used: int = 0
    knob_cap: int | None = None
    exit_reason: ExitReason = "done"
    tokens_saved: int = 0
    wall_s: float = 0.0
    error: BaseException | None = None
    cancelled: list[tuple[str, int]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)

    @classmethod
    def refused(cls, name: str, program_id: str, error: BaseException) -> Result:
        """A run that failed before its program started (bad inputs, a bad thread): no answer."""
        return cls(program_id=program_id, name=name, answer=None, state=None, exit_reason="error", error=error)

    @classmethod
    def unfinished(cls, program: Program, reason: ExitReason, error: BaseException | None, wall_s: float) -> Result:
        """A run stopped from outside its loop (a server's time limit): its tokens and knob so far,
        no answer, nothing saved."""
        return cls(program_id=program.program_id, name=program.display_name, answer=None, state=None,
                   tokens=program.tokens, knob_used=program.knob_value, knob_cap=program.knob_cap,
                   exit_reason=reason, wall_s=wall_s, error=error)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def final_certaindex(self) -> float | None:
        return self.certaindex[-1].value if self.certaindex else None

    def summary(self) -> dict[str, Any]:
        """A JSON-serialisable summary (used by the CLI, journals and the server)."""
        return {
            "program_id": self.program_id, "name": self.name, "answer": jsonable(self.answer),
            "exit_reason": self.exit_reason, "knob_used": self.knob_used, "knob_cap": self.knob_cap,
            "tokens": self.tokens.as_dict(), "tokens_saved": self.tokens_saved,
            "certaindex": [{"knob": p.knob, "value": round(p.value, 6), "tokens": p.tokens,
                            **({"signals": {k: round(v, 6) for k, v in p.signals.items()}} if len(p.signals) > 1 else {})}
                           for p in self.certaindex],
            "wall_s": round(self.wall_s, 4), "error": None if self.error is None else str(self.error),
            "cancelled": [list(c) for c in self.cancelled], "aborted": list(self.aborted),
        }


def jsonable(x: Any) -> Any:
    """``x`` as JSON-compatible values (containers walked, anything else as its ``str``)."""
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    return str(x)


def result_of(run: "ProgramRun", reason: ExitReason, error: BaseException | None, wall: float) -> Result:
    """The :class:`Result` of ``run``, which exited with ``reason`` (and ``error``) after ``wall``
    seconds: tokens saved against running to the cap, and the answer (an ``answer()`` that raises
    is the run's error when it has none)."""
    prog = run.program
    saved = 0
    cap = prog.policy.budget_cap(prog) if prog.policy else prog.knob_cap
    if saves_tokens(reason) and cap and prog.knob_value < cap:
        if prog.knob.unit == "tokens":
            saved = cap - prog.knob_value
        else:
            saved = round(prog.tokens.total / max(prog.knob_value, 1) * (cap - prog.knob_value))
    try:
        answer = prog.answer()
    except Exception as exc:  # noqa: BLE001 - a broken answer() must not hide the run's own error
        answer = None
        if error is None:  # ... but with none, it is the run's error (never a silent None answer)
            error = exc if isinstance(exc, CertaError) else StepFailedError(
                f"answer() raised {type(exc).__name__}: {exc}", program=prog.program_id)
            if error is not exc:
                error.__cause__ = exc
            error.program = error.program or prog.program_id
            reason = "error"
    return Result(program_id=prog.program_id, name=prog.display_name, answer=answer, state=prog.state,
                  certaindex=list(prog.trajectory), tokens=prog.tokens, knob_used=prog.knob_value,
                  knob_cap=prog.knob_cap, exit_reason=reason, tokens_saved=saved, wall_s=wall, error=error,
                  cancelled=getattr(prog, "cancelled", None) or [], aborted=run.aborted)
