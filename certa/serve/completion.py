r"""What one served request produces: progress updates while it runs, then a Completion.

Example:
    >>> from certa.runtime.result import Result
    >>> from certa.runtime.types import CertaindexPoint, TokenUsage
    >>> r = Result("sc-0", "sc", "18", None, certaindex=[CertaindexPoint(4, 1.0, {}, 400)],
    ...            tokens=TokenUsage(main=380, probe=0, score=20, prompt=50), knob_used=4, knob_cap=16,
    ...            exit_reason="certaindex", tokens_saved=1200)
    >>> c = Completion.from_result(r, request_id="abc", model="sc", answer_format="boxed", latency_s=0.5)
    >>> c.content, c.finish_reason, c.usage()["completion_tokens"], c.usage()["certa"]["score"]
    ('\\boxed{18}', 'stop', 400, 20)
    >>> c.usage()["certa"]["exit_reason"], c.usage()["certa"]["knob_used"], c.usage()["certa"]["tokens_saved"]
    ('certaindex', 4, 1200)
    >>> c.reasoning()
    'certaindex 1.000 at knob 4 (400 tokens)\nexit certaindex at knob 4 of 16 (400 tokens, ~1200 saved)\n'
    >>> c.certa()["exit_reason"], c.certa()["certaindex"][0]["value"]
    ('certaindex', 1.0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from certa.runtime.policy import ExitReason, finish_reason
from certa.runtime.result import Result
from certa.runtime.streaming import CertaindexUpdate
from certa.runtime.types import CertaindexPoint, TokenUsage

__all__ = ["Completion", "Heartbeat", "Progress", "format_answer", "progress_line"]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True, slots=True)
class Progress(CertaindexUpdate):
    """A certaindex measurement of a running program (``value`` combines all ``signals``): the
    runtime's :class:`~certa.runtime.streaming.CertaindexUpdate`, with the server's renderings."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": "certaindex", "program_id": self.program_id, "knob": self.knob,
                               "value": round(self.value, 6), "tokens": self.tokens}
        if len(self.signals) > 1:
            out["signals"] = {k: round(v, 6) for k, v in self.signals.items()}
        return out

    def text(self) -> str:
        """One line for the ``reasoning_content`` channel: ``certaindex 0.750 at knob 4 (400 tokens)``."""
        return progress_line(self.knob, self.value, self.tokens, self.signals)


def progress_line(knob: int, value: float, tokens: int, signals: dict[str, float] | None = None) -> str:
    """A certaindex measurement as a line of reasoning text (signals listed when several)."""
    extra = ""
    if signals and len(signals) > 1:
        extra = " [" + ", ".join(f"{k} {v:.3f}" for k, v in signals.items()) + "]"
    return f"certaindex {value:.3f} at knob {knob} ({tokens} tokens){extra}\n"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Nothing new for a while; the program is still running (streams send a comment line)."""


def format_answer(answer: Any, answer_format: str) -> str:
    r"""The message text for an answer: ``\boxed{18}`` (``boxed``) or ``18`` (``plain``); "" if None."""
    if answer is None:
        return ""
    text = answer if isinstance(answer, str) else str(answer)
    return f"\\boxed{{{text}}}" if answer_format == "boxed" else text


@dataclass
class Completion:
    """The outcome of one request: the answer as message text plus usage and certa details.

    ``finish_reason`` is OpenAI's: ``length`` when the token budget (``max_tokens``) stopped
    the program, else ``stop``; ``exit_reason`` is certa's (``certaindex``, ``cap``, ``done``,
    ``budget``, ``length``, ...).
    """

    request_id: str
    model: str
    program_id: str
    answer: Any
    content: str
    finish_reason: FinishReason
    exit_reason: ExitReason
    tokens: TokenUsage
    tokens_saved: int
    knob_used: int
    knob_cap: int | None
    certaindex: list[CertaindexPoint]
    latency_s: float
    created: int = field(default_factory=lambda: int(time.time()))
    deadline_s: float | None = None
    result: Result | None = field(default=None, repr=False)

    @classmethod
    def from_result(cls, result: Result, *, request_id: str, model: str, answer_format: str, latency_s: float,
                    deadline_s: float | None = None) -> Completion:
        return cls(request_id=request_id, model=model, program_id=result.program_id, answer=result.answer,
                   content=format_answer(result.answer, answer_format),
                   finish_reason=finish_reason(result.exit_reason),
                   exit_reason=result.exit_reason, tokens=result.tokens, tokens_saved=result.tokens_saved,
                   knob_used=result.knob_used, knob_cap=result.knob_cap, certaindex=list(result.certaindex),
                   latency_s=latency_s, deadline_s=deadline_s, result=result)

    @property
    def deadline_met(self) -> bool | None:
        return None if self.deadline_s is None else self.latency_s <= self.deadline_s

    def usage(self) -> dict[str, Any]:
        """OpenAI ``usage``: ``completion_tokens`` = main + probe + score decode tokens,
        ``prompt_tokens`` = prefill tokens computed; ``certa`` splits the decode tokens by kind
        and adds the run's figures (knob used and cap, exit reason, tokens saved, the last
        certaindex), so clients that keep ``usage`` (LangChain's ``response_metadata``) get them."""
        t = self.tokens
        last = self.certaindex[-1].value if self.certaindex else None
        return {"prompt_tokens": t.prompt, "completion_tokens": t.total, "total_tokens": t.prompt + t.total,
                "certa": {"main": t.main, "probe": t.probe, "score": t.score, "requests": t.requests,
                          "knob_used": self.knob_used, "knob_cap": self.knob_cap, "exit_reason": self.exit_reason,
                          "tokens_saved": self.tokens_saved,
                          "certaindex": None if last is None else round(last, 6)}}

    def exit_line(self) -> str:
        """The run's outcome as a line of reasoning text: ``exit certaindex at knob 4 of 16 (160
        tokens, ~480 saved)``."""
        cap = "" if self.knob_cap is None else f" of {self.knob_cap}"
        return (f"exit {self.exit_reason} at knob {self.knob_used}{cap} ({self.tokens.total} tokens, "
                f"~{self.tokens_saved} saved)\n")

    def reasoning(self) -> str:
        """The ``reasoning_content`` of a non-streaming response: one line per certaindex point,
        then the exit line (what a stream sends as ``reasoning_content`` deltas)."""
        return "".join(progress_line(p.knob, p.value, p.tokens, p.signals) for p in self.certaindex) + self.exit_line()

    def certa(self) -> dict[str, Any]:
        """The ``certa`` extension of a response: trajectory, exit reason, savings, knob."""
        out: dict[str, Any] = {
            "program_id": self.program_id, "request_id": self.request_id, "exit_reason": self.exit_reason,
            "answer": _plain(self.answer), "tokens_saved": self.tokens_saved, "knob_used": self.knob_used,
            "knob_cap": self.knob_cap, "latency_s": round(self.latency_s, 4),
            "certaindex": [{"knob": p.knob, "value": round(p.value, 6), "tokens": p.tokens,
                            **({"signals": {k: round(v, 6) for k, v in p.signals.items()}}
                               if len(p.signals) > 1 else {})} for p in self.certaindex],
        }
        if self.deadline_s is not None:
            out["deadline_s"], out["deadline_met"] = self.deadline_s, self.deadline_met
        return out


def _plain(x: Any) -> Any:
    return x if x is None or isinstance(x, (str, int, float, bool)) else str(x)
