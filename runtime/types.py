"""Value types that cross the runtime/backend boundary: requests, results, token usage, knobs.

These are plain slotted dataclasses (not pydantic) because they sit on the hot path of every
request; user-facing configuration is validated with pydantic elsewhere.

Example:
    >>> req = GenRequest(prompt="What is 2+2?", max_tokens=16, rid="p1-s0-b0", program_id="p1")
    >>> req.kind
    'main'
    >>> u = TokenUsage(); u.add("main", 10); u.add("probe", 3); u.total
    13
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from certa.runtime.errors import ConfigError

TokenKind = Literal["main", "probe", "score"]
KnobUnit = Literal["branches", "iterations", "tokens"]
FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(slots=True)
class GenRequest:
    """One generation request. ``rid`` is unique per request and is what ``abort`` takes.

    ``prefix_hint`` names a shared prefix (e.g. the question) so backends can share its KV;
    ``priority``: lower value = more urgent (certa's convention; backends map it).
    """

    prompt: str
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    rid: str = ""
    program_id: str = ""
    step: str = ""
    branch: int = 0
    priority: float = 0.0
    prefix_hint: str | None = None
    kind: TokenKind = "main"
    logprobs: int = 0
    chat: bool = False  # True: ``prompt`` is a user message to wrap in the model's chat template
    system: str | None = None  # system message when ``chat`` is True
    assistant_prefix: str = ""  # chat: text the assistant turn already holds; the model continues it


@dataclass(slots=True)
class GenResult:
    """The outcome of a ``GenRequest``. ``tokens`` counts generated tokens only."""

    text: str
    tokens: int
    prompt_tokens: int = 0
    finish_reason: FinishReason = "stop"
    rid: str = ""
    token_logprobs: list[float] | None = None
    cached_prompt_tokens: int = 0


@dataclass(slots=True)
class ScoreRequest:
    """Ask for the probability of each option as the next text after ``prompt``.

    Used for self-evaluation rewards (e.g. P("Yes") to "Is this step correct?").
    """

    prompt: str
    options: tuple[str, ...] = ("Yes", "No")
    rid: str = ""
    program_id: str = ""
    step: str = ""
    branch: int = 0
    priority: float = 0.0
    chat: bool = False


@dataclass(slots=True)
class ScoreResult:
    probs: dict[str, float]
    prompt_tokens: int = 0
    tokens: int = 1
    rid: str = ""


@dataclass(slots=True)
class Capabilities:
    """What a backend can do natively. Absent features fall back to generic code paths."""

    rollback_probe: bool = False  # exact KV rollback probes on a live sequence
    score: bool = True
    logprobs: bool = False
    priority: bool = False  # honours request priority itself
    streaming: bool = False  # ``generate_stream`` delivers text as it is decoded (else: one chunk at the end)
    name: str = "backend"


@dataclass(slots=True)
class TokenUsage:
    """Tokens by kind. ``prompt`` counts prefill tokens actually computed (cache misses)."""

    main: int = 0
    probe: int = 0
    score: int = 0
    prompt: int = 0
    requests: int = 0

    def add(self, kind: TokenKind, n: int) -> None:
        if kind == "main":  # the common kind, without getattr/setattr
            self.main += n
        else:
            setattr(self, kind, getattr(self, kind) + n)

    def merge(self, other: "TokenUsage") -> None:
        self.main += other.main
        self.probe += other.probe
        self.score += other.score
        self.prompt += other.prompt
        self.requests += other.requests

    @property
    def total(self) -> int:
        """Decode tokens of every kind (main + probe + score); prefill is separate."""
        return self.main + self.probe + self.score

    def as_dict(self) -> dict[str, int]:
        return {"main": self.main, "probe": self.probe, "score": self.score,
                "prompt": self.prompt, "total": self.total, "requests": self.requests}


@dataclass(slots=True)
class Knob:
    """The resource a program spends, with a cap: ``branches``, ``iterations`` or ``tokens``.

    ``step`` names the step whose launches count (branches/iterations); when omitted the
    compiler picks the graph's only fan-out or loop step.
    """

    unit: KnobUnit = "branches"
    cap: int | None = None
    step: str | None = None

    def __post_init__(self) -> None:
        if self.unit not in ("branches", "iterations", "tokens"):
            raise ConfigError(f"knob unit must be branches, iterations or tokens, not {self.unit!r}")
        if self.cap is not None and (isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 1):
            raise ConfigError(f"knob cap must be >= 1, not {self.cap}")


@dataclass(slots=True)
class CertaindexPoint:
    """One certaindex measurement: knob value when measured, per-signal values, combined value."""

    knob: int
    value: float
    signals: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
