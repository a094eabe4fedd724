"""The outcome of one program run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from certa.runtime.types import CertaindexPoint, TokenUsage


@dataclass
class Result:
    """What ``Runtime.run`` returns.

    ``exit_reason`` is one of ``certaindex`` (the policy stopped it early), ``cap`` (knob cap
    reached), ``budget``/``length`` (baseline policies), ``done`` (finished on its own),
    ``error`` or ``cancelled``. ``tokens_saved`` estimates decode tokens not spent compared
    with running to the knob cap (0 unless it exited early).
    """

    program_id: str
    name: str
    answer: Any
    state: Any
    certaindex: list[CertaindexPoint] = field(default_factory=list)
    tokens: TokenUsage = field(default_factory=TokenUsage)
    knob_used: int = 0
    knob_cap: int | None = None
    exit_reason: str = "done"
    tokens_saved: int = 0
    wall_s: float = 0.0
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def final_certaindex(self) -> float | None:
        return self.certaindex[-1].value if self.certaindex else None

    def summary(self) -> dict[str, Any]:
        """A JSON-serialisable summary (used by the CLI, journals and the server)."""
        return {
            "program_id": self.program_id, "name": self.name, "answer": _jsonable(self.answer),
            "exit_reason": self.exit_reason, "knob_used": self.knob_used, "knob_cap": self.knob_cap,
            "tokens": self.tokens.as_dict(), "tokens_saved": self.tokens_saved,
            "certaindex": [{"knob": p.knob, "value": round(p.value, 6), "tokens": p.tokens,
                            **({"signals": {k: round(v, 6) for k, v in p.signals.items()}} if len(p.signals) > 1 else {})}
                           for p in self.certaindex],
            "wall_s": round(self.wall_s, 4), "error": None if self.error is None else str(self.error),
        }


def _jsonable(x: Any) -> Any:
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    return str(x)
