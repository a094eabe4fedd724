r"""Request and response models of the OpenAI-compatible endpoints (pydantic).

Types are strict, as JSON gives them: ``"max_tokens": "100"`` or ``"stream": "yes"`` is a
400, not coerced (an integer is still accepted where a number is). certa's per-request
options travel in the ``certa`` field, which the official client sends
with ``extra_body={"certa": {...}}``. Unknown fields — top level or inside ``certa`` — are
refused with a 400 that names them, so a typo never silently falls back to a default.
Sampling fields of OpenAI's API (``temperature``, ``top_p``, ``stop``, ...) are accepted and
ignored: a reasoning program samples the way it was written to. Fields certa cannot honour
(``n`` > 1, ``tools``, ``logprobs``, ...) are refused.

Example:
    >>> req = parse_request(ChatRequest, {"model": "sc", "messages": [{"role": "user", "content": "2+2?"}],
    ...                                   "certa": {"knob_cap": 8, "policy": {"kind": "esc", "window": 4}}})
    >>> req.question(), req.certa.knob_cap, req.certa.policy["kind"]
    ('2+2?', 8, 'esc')
    >>> parse_request(ChatRequest, {"model": "sc", "messages": [], "certa": {"knobcap": 8}})
    Traceback (most recent call last):
    ...
    certa.serve.errors.BadRequestError: CT410 bad-request: certa.knobcap: unknown field (known: policy, knob_cap, preset, deadline_s, answer_format, progress)
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from certa.runtime.errors import ConfigError, LimitExceededError
from certa.serve.errors import BadRequestError

__all__ = ["CertaOptions", "ChatMessage", "ChatRequest", "CompletionRequest", "StreamOptions", "check_limits",
           "parse_request"]

AnswerFormat = Literal["boxed", "plain"]


class CertaOptions(BaseModel):
    """certa's per-request options (``extra_body={"certa": {...}}``).

    ``policy``: a stopping policy as ``Policy.to_dict()`` gives it (``{"kind": "threshold",
    "tau": 0.6, ...}``); ``knob_cap``: the most knob units (branches, iterations or tokens)
    this run may spend, at most the server's ``--max-knob``; ``preset``: a CoT saving-effort
    preset (``mild`` ... ``crazy``); ``deadline_s``: the latency SLO this request counts
    against in ``/metrics``; ``answer_format``: ``boxed`` (``\boxed{18}``) or ``plain``
    (``18``); ``progress``: stream certaindex updates as chunks (a ``reasoning_content`` line
    each, plus the ``certa`` field; default true).
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    policy: dict[str, Any] | None = None
    knob_cap: int | None = Field(default=None, ge=1)
    preset: str | None = Field(default=None, min_length=1, max_length=32)
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    answer_format: AnswerFormat | None = None
    progress: bool = True

    @field_validator("policy")
    @classmethod
    def _policy_has_kind(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and not (isinstance(v.get("kind"), str) and v["kind"]):
            raise ValueError('a policy needs a "kind", e.g. {"kind": "threshold", "tau": 0.6}')
        bad = _non_finite(v, "")
        if bad is not None:  # JSON's Infinity/NaN parse to floats no policy can use
            raise ValueError(f"{bad[0]}={bad[1]} is not a finite number")
        return v


def _non_finite(v: Any, path: str) -> tuple[str, str] | None:
    """The first ``(path, value)`` in ``v`` (nested dicts and lists) that is an infinite or NaN float."""
    if isinstance(v, float) and not math.isfinite(v):
        return path or "value", "NaN" if math.isnan(v) else ("-Infinity" if v < 0 else "Infinity")
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        bad = _non_finite(x, f"{path}.{k}" if path and isinstance(k, str) else f"{path}[{k}]" if path else str(k))
        if bad is not None:
            return bad
    return None


def check_limits(opts: CertaOptions, *, max_knob: int | None, max_token_budget: int | None) -> None:
    """Refuse (CT205, HTTP 400, naming the field and the limit) a ``knob_cap`` or policy field
    over the server's maximums; a fraction field (``tau``, ``threshold``) outside [0, 1] is a
    CT300 (a bad policy); an unknown policy kind a CT300 listing the kinds.

    What each field counts is the policy's own declaration (``Policy.fields``, see
    :mod:`certa.runtime.policy`): knob-unit fields (``detect_at``, ``every``, ``window``,
    ``even``'s ``cap``, ...) are bounded by ``max_knob``, token fields (``length``'s
    ``max_tokens``) by ``max_token_budget`` (``None``: no bound).

    >>> check_limits(CertaOptions(policy={"kind": "even", "cap": 99}), max_knob=16, max_token_budget=None)
    Traceback (most recent call last):
    ...
    certa.runtime.errors.LimitExceededError: CT205 limit-exceeded: certa.policy.cap=99 is over this server's limit of 16 (--max-knob)
    """
    if opts.knob_cap is not None and max_knob is not None and opts.knob_cap > max_knob:
        _over("certa.knob_cap", opts.knob_cap, max_knob, "--max-knob")
    if not opts.policy:
        return
    from certa.algorithms.policies import STOPPING_POLICIES
    units = STOPPING_POLICIES.get(opts.policy["kind"]).fields
    limits = {"knob": (max_knob, "--max-knob"), "tokens": (max_token_budget, "--max-token-budget")}
    for key, value in opts.policy.items():
        unit = units.get(key)
        if unit == "fraction":
            values = value.values() if isinstance(value, dict) else [value]
            if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= 1 for t in values):
                err = ConfigError(f"bad policy {opts.policy['kind']!r}: certa.policy.{key}={value!r} is outside [0, 1]")
                err.param = f"certa.policy.{key}"  # type: ignore[attr-defined]
                raise err
        limit, flag = limits.get(unit, (None, ""))  # type: ignore[arg-type]
        if limit is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
            _over(f"certa.policy.{key}", value, limit, flag)


def _over(field: str, value: Any, limit: int, flag: str) -> None:
    err = LimitExceededError(f"{field}={value} is over this server's limit of {limit} ({flag})")
    err.param = field  # type: ignore[attr-defined]  # the HTTP error body's "param"
    raise err


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False
    include_obfuscation: bool | None = None  # accepted, ignored (nothing to obfuscate)


class ChatMessage(BaseModel):
    """One chat message; only ``role`` and the text of ``content`` are read."""

    model_config = ConfigDict(extra="allow", strict=True)
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type", "text") == "text")
        return self.content or ""


class _Base(BaseModel):
    """Fields both endpoints take. Sampling fields are accepted and ignored (see module docs)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str = Field(min_length=1, max_length=256)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    n: Literal[1] = 1
    user: str | None = None
    certa: CertaOptions = Field(default_factory=CertaOptions)
    # accepted and ignored: the program decides how to sample
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    def budget(self) -> int | None:
        """The decode-token budget the client asked for (main + probe + score)."""
        return self.max_tokens

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatRequest(_Base):
    """``POST /v1/chat/completions``: the question is the last user message."""

    messages: list[ChatMessage]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: Literal[False] | None = None
    reasoning_effort: str | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    modalities: list[Literal["text"]] | None = None
    verbosity: str | None = None

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and v.get("type") != "text":
            raise ValueError("only {\"type\": \"text\"} is supported")
        return v

    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def question(self) -> str:
        users = [m for m in self.messages if m.role == "user"]
        if not users or not users[-1].text().strip():
            raise BadRequestError("messages must contain a user message with text", param="messages")
        return users[-1].text()


class CompletionRequest(_Base):
    """``POST /v1/completions``: the question is the prompt (one prompt per request)."""

    prompt: str | list[str]
    echo: Literal[False] | None = None
    logprobs: None = None
    best_of: Literal[1] | None = None
    suffix: None = None

    def question(self) -> str:
        p = self.prompt
        if isinstance(p, list):
            if len(p) != 1:
                raise BadRequestError(f"one prompt per request, got {len(p)}", param="prompt")
            p = p[0]
        if not p.strip():
            raise BadRequestError("prompt is empty", param="prompt")
        return p


def parse_request(model: type[BaseModel], body: Any, *, prefix: str = "") -> Any:
    """Validate a decoded JSON body; the first problem becomes a :class:`BadRequestError`.

    ``prefix`` names where ``body`` sits in the request (``"certa."`` for the options).
    """
    if not isinstance(body, dict):
        raise BadRequestError(f"{prefix.rstrip('.') or 'the request body'} must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = prefix + ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            owner = CertaOptions if loc.startswith("certa.") else model
            known = ", ".join(f for f in owner.model_fields)
            msg = f"{loc}: unknown field (known: {known})" if owner is CertaOptions else \
                f"{loc}: unsupported field (certa serve accepts: {known})"
        elif loc in ("n", "best_of"):
            msg = f"{loc}: only 1 is supported (one program per request)"
        elif loc in ("logprobs", "echo", "suffix"):
            msg = f"{loc}: not supported by certa serve"
        else:
            msg = f"{loc or '<body>'}: {err['msg'].removeprefix('Value error, ')}"
        raise BadRequestError(msg, param=loc or None) from None
