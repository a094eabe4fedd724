"""The OpenAI-compatible wire format: request bodies and streamed chunks (completions, chat).

Example:
    >>> st = StreamState()
    >>> parse_completion({"choices": [{"index": 0, "text": "4", "finish_reason": "stop"}],
    ...                   "usage": {"completion_tokens": 1, "prompt_tokens": 5}}, st)
    >>> st.text, st.completion_tokens, st.finish
    (['4'], 1, 'stop')
"""

from __future__ import annotations

from typing import Any

from certa.runtime.backends.http_common import StreamState
from certa.runtime.types import GenRequest

__all__ = ["parse_chat", "parse_completion", "request_body", "usage"]


def request_body(req: GenRequest, model: str | None, n_top: int, stream_usage: bool) -> tuple[dict[str, Any], bool]:
    """The JSON body for ``req`` (without ``stream``/extras) and whether it goes to the chat route."""
    body: dict[str, Any] = {"max_tokens": req.max_tokens, "temperature": req.temperature, "top_p": req.top_p}
    if model is not None:
        body["model"] = model
    if req.top_k > 0:
        body["top_k"] = req.top_k
    if req.seed is not None:
        body["seed"] = req.seed
    if req.stop:
        body["stop"] = list(req.stop)
    if stream_usage:
        body["stream_options"] = {"include_usage": True}
    if not req.chat:
        body["prompt"] = req.prompt
        if n_top:
            body["logprobs"] = n_top
        return body, False
    messages = ([{"role": "system", "content": req.system}] if req.system else [])
    body["messages"] = messages + [{"role": "user", "content": req.prompt}]
    if req.assistant_prefix:  # continue the assistant turn (vLLM/SGLang chat-template options)
        body["messages"].append({"role": "assistant", "content": req.assistant_prefix})
        body.update(continue_final_message=True, add_generation_prompt=False)
    if n_top:
        body.update(logprobs=True, top_logprobs=min(n_top, 20))
    return body, True


def usage(data: dict, st: StreamState) -> None:
    """Fold an OpenAI ``usage`` object (completion, prompt, cached prompt tokens) into ``st``."""
    u = data.get("usage")
    if isinstance(u, dict):
        st.completion_tokens = u.get("completion_tokens", st.completion_tokens)
        st.prompt_tokens = u.get("prompt_tokens", st.prompt_tokens)
        details = u.get("prompt_tokens_details") or {}
        st.cached_tokens = int(details.get("cached_tokens") or 0)


def parse_completion(data: dict, st: StreamState) -> None:
    """Fold one streamed ``/v1/completions`` chunk into ``st`` (choice 0 only)."""
    usage(data, st)
    for ch in data.get("choices") or []:
        if ch.get("index", 0) != 0:
            continue
        text, lp = ch.get("text") or "", ch.get("logprobs") or {}
        toks = lp.get("tokens") or []
        st.logprobs.extend(float(x) for x in lp.get("token_logprobs") or [] if x is not None)
        tops = lp.get("top_logprobs") or []
        if st.first_top is None and tops and isinstance(tops[0], dict):
            st.first_top = {str(k): float(v) for k, v in tops[0].items()}
        st.text.append(text)
        st.chunks += len(toks) if toks else (1 if text else 0)
        st.finish = ch.get("finish_reason") or st.finish


def parse_chat(data: dict, st: StreamState) -> None:
    """Fold one streamed ``/v1/chat/completions`` chunk into ``st`` (choice 0 only)."""
    usage(data, st)
    for ch in data.get("choices") or []:
        if ch.get("index", 0) != 0:
            continue
        text = (ch.get("delta") or {}).get("content") or ""
        content = (ch.get("logprobs") or {}).get("content") or []
        for item in content:
            st.logprobs.append(float(item.get("logprob", 0.0)))
            if st.first_top is None and item.get("top_logprobs"):
                st.first_top = {str(t["token"]): float(t["logprob"]) for t in item["top_logprobs"]}
        st.text.append(text)
        st.chunks += len(content) if content else (1 if text else 0)
        st.finish = ch.get("finish_reason") or st.finish
