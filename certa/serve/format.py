r"""OpenAI wire format: Completions and Progress as chat/text completion objects and SSE chunks.

certaindex progress goes where OpenAI-compatible clients keep a model's reasoning: chat
chunks carry it as a ``reasoning_content`` delta (one line per update, e.g. ``certaindex
0.750 at knob 4 (400 tokens)``; DeepSeek's and vLLM's field, read by LangChain's ChatDeepSeek
into ``additional_kwargs["reasoning_content"]`` and by litellm as ``delta.reasoning_content``),
beside an empty ``content`` and the structured ``certa`` extension field (``{"event":
"certaindex", "value", "knob", "tokens"}``, kept by the official client on
``chunk.model_extra``). Before the answer a last ``reasoning_content`` line gives the exit; a
non-streaming chat message carries all these lines as ``message.reasoning_content``. The
``usage`` object's ``certa`` member holds the run's figures (see
:meth:`~certa.serve.completion.Completion.usage`). Text completions have no delta: their
progress chunks are empty text plus the ``certa`` field.

Example:
    >>> from certa.serve.completion import Progress
    >>> f = Formatter("chat", request_id="r1", model="sc", created=0)
    >>> chunk = f.progress(Progress("sc-0", 4, 0.75, 400))
    >>> chunk["choices"][0]["delta"], chunk["certa"]["value"]
    ({'content': '', 'reasoning_content': 'certaindex 0.750 at knob 4 (400 tokens)\n'}, 0.75)
    >>> sse({"a": 1})
    b'data: {"a":1}\n\n'
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from certa.serve.completion import Completion, Progress

__all__ = ["DONE", "Formatter", "error_body", "log_safe", "sse"]

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def log_safe(text: str) -> str:
    """``text`` with control characters, line separators and lone surrogates escaped
    (``\\n``, ``\\x1b``, ``\\ud800``), so a client's string cannot forge a log line.

    >>> log_safe("x\\nINFO forged")
    'x\\\\nINFO forged'
    """
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"


def sse(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as compact JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def error_body(message: str, kind: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error JSON shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class Formatter:
    """Builds the response objects of one request (``chat`` or ``text`` completions)."""

    def __init__(self, kind: Literal["chat", "text"], *, request_id: str, model: str, created: int) -> None:
        self.kind, self.model, self.created = kind, model, created
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + request_id

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def response(self, c: Completion) -> dict[str, Any]:
        """The non-streaming response body (chat: the progress lines as ``message.reasoning_content``)."""
        if self.kind == "chat":
            message = {"role": "assistant", "content": c.content, "reasoning_content": c.reasoning()}
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": c.finish_reason,
                                      "logprobs": None}
            head = self._head("chat.completion")
        else:
            choice = {"index": 0, "text": c.content, "finish_reason": c.finish_reason, "logprobs": None}
            head = self._head("text_completion")
        return {**head, "choices": [choice], "usage": c.usage(), "certa": c.certa()}

    def _chunk(self, delta: dict[str, Any] | None, text: str, finish: str | None) -> dict[str, Any]:
        if self.kind == "chat":
            head = self._head("chat.completion.chunk")
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}
        else:
            head = self._head("text_completion")
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return {**head, "choices": [choice]}

    def start(self) -> dict[str, Any]:
        """The first chunk (chat: the assistant role)."""
        return self._chunk({"role": "assistant", "content": ""}, "", None)

    def progress(self, p: Progress) -> dict[str, Any]:
        """A certaindex update: a ``reasoning_content`` line (chat) beside an empty content
        delta, plus the ``certa`` extension."""
        return {**self._chunk({"content": "", "reasoning_content": p.text()}, "", None), "certa": p.as_dict()}

    def final(self, c: Completion, include_usage: bool) -> list[dict[str, Any]]:
        """Chat: the exit as a ``reasoning_content`` line; then the answer chunk, the finish chunk
        (with the ``certa`` details), and the usage chunk (``usage.certa``: the run's figures)."""
        out = [self._chunk({"content": "", "reasoning_content": c.exit_line()}, "", None)] if self.kind == "chat" else []
        out.append(self._chunk({"content": c.content}, c.content, None))
        out.append({**self._chunk({}, "", c.finish_reason), "certa": {"event": "done", **c.certa()}})
        if include_usage:
            out.append({**self._head("chat.completion.chunk" if self.kind == "chat" else "text_completion"),
                        "choices": [], "usage": c.usage()})
        return out
