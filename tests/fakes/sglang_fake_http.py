"""SGLang's native HTTP routes and ``sglang.Engine``'s core around the contract fake.

``FakeSGLangServer`` serves, on a loopback port, what certa and SGLang Model Gateway use
(``entrypoints/http_server.py``, ``utils/auth.py`` of ``sglang==0.5.23``):

* ``POST /generate`` (streams ``data: {...}`` events then ``data: [DONE]``): a body the
  request contract refuses gets HTTP 400 ``{"error": "..."}``; a request the tokenizer
  manager refuses (duplicate rid, ...) gets HTTP 200 and ONE in-stream event
  ``{"error": {"message", "type", "code": 400, "retryable": false}}``;
* ``POST /abort_request`` (auth level ADMIN_OPTIONAL: with ``admin_api_key`` only that key
  opens it; with only ``api_key``, that key; otherwise open), ``POST /v1/chat/completions``
  with ``rid``/``priority`` extras;
* the probes a gateway makes when it registers a worker: ``/health``, ``/health_generate``,
  ``/v1/models`` (``owned_by: sglang``), ``/server_info`` (``/get_server_info``),
  ``/model_info`` (``/get_model_info``), ``/version``; health and metrics need no key.

``FakeEngine`` stands in for ``sglang.Engine``: ``async_generate(..., stream=True)``,
``tokenizer_manager.abort_request`` and a tokenizer that decodes the fake's token ids.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .http_server import FakeHTTPServer, FakeRequest, Reply
from .sglang_fake import FakeSGLang, FakeSGLangConfig

_OPEN_PATHS = ("/health", "/ready", "/metrics")


class FakeSGLangServer:
    """``FakeSGLang`` behind SGLang's native HTTP routes on a loopback port."""

    def __init__(self, config: FakeSGLangConfig | None = None, *, name: str = "sglang") -> None:
        self.core = FakeSGLang(config)
        self.name = name
        self.http = FakeHTTPServer(self._handle)
        self.abort_calls: list[dict] = []
        self.unauthorized: list[str] = []  # paths refused for a missing/wrong key

    @property
    def url(self) -> str:
        return self.http.url

    async def start(self, port: int = 0) -> "FakeSGLangServer":
        await self.http.start(port)
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def close(self) -> None:
        """Stop serving at once (in-flight streams are cut, as when the process dies)."""
        await self.http.close()
        self.core.abort_request(abort_all=True)

    def _allowed(self, req: FakeRequest, path: str) -> bool:
        c = self.core.config
        if path.startswith(_OPEN_PATHS):
            return True
        token = req.headers.get("authorization", "")
        token = token[7:] if token.lower().startswith("bearer ") else None
        if path == "/abort_request":  # ADMIN_OPTIONAL
            key = c.admin_api_key or c.api_key
            return key is None or token == key
        return c.api_key is None or token == c.api_key  # NORMAL

    async def _handle(self, req: FakeRequest) -> Reply:
        path = req.path.split("?", 1)[0]
        if not self._allowed(req, path):
            self.unauthorized.append(path)
            return Reply(401, {"error": "Unauthorized"})
        if path == "/abort_request":
            body = req.json() or {}
            self.abort_calls.append(body)
            self.core.abort_request(rid=body.get("rid", ""), abort_all=bool(body.get("abort_all")))
            return Reply(200, b"")
        info = self._info(path)
        if info is not None:
            return Reply(200, info)
        if path not in ("/generate", "/v1/chat/completions"):
            return Reply(404, {"detail": "Not Found"})
        body = req.json()
        chat = path == "/v1/chat/completions"
        obj = _chat_to_generate(body) if chat else body
        if "priority" in (obj.get("sampling_params") or {}):  # the JSON contract gate
            return Reply(400, {"error": "sampling_params: unknown field `priority`"})
        try:
            r = self.core.submit(obj)
        except ValueError as exc:  # http_server.stream_results: an in-stream error event
            return Reply(200, stream=_one(json.dumps({"error": {
                "message": str(exc), "type": "invalid_request_error", "code": 400, "retryable": False}})))
        outs = self.core.stream(r, req.disconnected)
        if chat:
            return Reply(200, stream=_openai_chunks(outs, bool((body.get("stream_options") or {}).get("include_usage"))))
        return Reply(200, stream=(json.dumps(o) async for o in outs))

    def _info(self, path: str) -> Any:
        if path in ("/health", "/health_generate"):
            return b""
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": "fake-sglang", "object": "model", "owned_by": "sglang",
                                                "root": "fake-sglang", "max_model_len": 32768}]}
        if path in ("/server_info", "/get_server_info"):
            args = {k: v for k, v in dataclasses.asdict(self.core.config).items() if "api_key" not in k}
            return {**args, "model_path": "fake-sglang", "version": "0.5.23", "name": self.name}
        if path in ("/model_info", "/get_model_info"):
            return {"model_path": "fake-sglang", "tokenizer_path": "fake-sglang", "is_generation": True}
        if path == "/version":
            return {"version": "0.5.23"}
        return None


async def _one(payload: str):
    yield payload


def _chat_to_generate(body: dict) -> dict:
    prompt = "\n".join(m.get("content", "") for m in body.get("messages", []))
    params = {"max_new_tokens": body.get("max_tokens", 128), "temperature": body.get("temperature", 1.0)}
    if body.get("stop"):
        params["stop"] = body["stop"]
    return {"text": prompt, "sampling_params": params, "rid": body.get("rid"), "priority": body.get("priority")}


async def _openai_chunks(outs, include_usage: bool):
    text, last = "", None
    async for o in outs:
        last = o
        delta, text = o["text"][len(text):], o["text"]
        fr = o["meta_info"]["finish_reason"]
        yield json.dumps({"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": delta}, "finish_reason": fr and fr["type"]}]})
    if include_usage and last is not None:
        m = last["meta_info"]
        yield json.dumps({"choices": [], "usage": {"prompt_tokens": m["prompt_tokens"],
                                                   "completion_tokens": m["completion_tokens"]}})


class _FakeTokenizer:
    def __init__(self, core: FakeSGLang) -> None:
        self.core = core

    def decode(self, ids: list[int]) -> str:
        inv = {v: k for k, v in self.core.vocab.items()}
        return "".join(inv.get(i, "<unk>") for i in ids)


class _FakeTokenizerManager:
    def __init__(self, core: FakeSGLang) -> None:
        self.core = core
        self.tokenizer = _FakeTokenizer(core)

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.core.abort_request(rid=rid, abort_all=abort_all)


class FakeEngine:
    """Stands in for ``sglang.Engine``: ``async_generate(..., stream=True)`` and abort."""

    def __init__(self, config: FakeSGLangConfig | None = None, **server_args: Any) -> None:
        known = {f.name for f in dataclasses.fields(FakeSGLangConfig)}
        self.kwargs = server_args  # everything sglang.Engine(**kwargs) was given
        self.core = FakeSGLang(config or FakeSGLangConfig(**{k: v for k, v in server_args.items() if k in known}))
        self.tokenizer_manager = _FakeTokenizerManager(self.core)
        self.server_args = self.core.config  # same field names as sglang's ServerArgs
        self.shut_down = False

    async def async_generate(self, prompt=None, sampling_params=None, *, rid=None, priority=None, stream=False,
                             return_logprob=False, top_logprobs_num=None, **_: Any):
        # Engine.async_generate has no return_text_in_logprobs: top logprobs carry ids only
        r = self.core.submit({"text": prompt, "sampling_params": sampling_params, "rid": rid, "priority": priority,
                              "return_logprob": return_logprob, "top_logprobs_num": top_logprobs_num})
        gen = self.core.stream(r)
        if stream:
            return gen
        out = None
        async for out in gen:
            pass
        return out

    def shutdown(self) -> None:
        self.shut_down = True
