"""A fake OpenAI-compatible worker (completions + chat, streaming) for routing/security tests.

Tokens are ``" w0", " w1", ...``; the worker's ``name`` is the first token so tests can see
which worker answered. ``status`` forces an error reply; ``usage`` toggles the usage chunk;
``logprobs`` toggles top-logprob support (off: the fields are ignored, like many servers);
``stream_error`` sends an error event inside a 200 stream.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from .http_server import FakeHTTPServer, FakeRequest, Reply


@dataclass
class FakeOpenAIWorker:
    name: str = "w"
    status: int = 200
    error_body: object = None
    usage: bool = True
    logprobs: bool = True
    token_delay: float = 0.0
    redirect_to: str | None = None
    stream_error: dict | None = None  # sent as the first event of a 200 stream (as vLLM/SGLang do)
    bodies: list[dict] = field(default_factory=list)
    disconnects: int = 0

    async def start(self) -> "FakeOpenAIWorker":
        self.http = await FakeHTTPServer(self._handle).start()
        return self

    @property
    def url(self) -> str:
        return self.http.url

    @property
    def requests(self) -> list[FakeRequest]:
        return self.http.requests

    async def close(self) -> None:
        await self.http.close()

    async def _handle(self, req: FakeRequest) -> Reply:
        if self.redirect_to is not None:
            return Reply(307, b"", headers={"Location": self.redirect_to + req.path})
        if req.path.endswith("/models"):
            return Reply(200, {"object": "list", "data": [{"id": f"model-{self.name}"}]})
        if self.status != 200:
            return Reply(self.status, self.error_body if self.error_body is not None else {"error": {"message": "nope"}})
        body = req.json()
        self.bodies.append(body)
        return Reply(200, stream=self._chunks(req, body))

    async def _chunks(self, req: FakeRequest, body: dict):
        chat = "messages" in body
        n = int(body.get("max_tokens", 16))
        tokens = [self.name] + [f" w{i}" for i in range(1, n)]
        if self.stream_error is not None:
            yield json.dumps({"error": self.stream_error})
            return
        try:
            for i, tok in enumerate(tokens):
                if self.token_delay:
                    await asyncio.sleep(self.token_delay)
                last = i == len(tokens) - 1
                choice: dict = {"index": 0, "finish_reason": "length" if last else None}
                if chat:
                    choice["delta"] = {"content": tok}
                else:
                    choice["text"] = tok
                if self.logprobs and body.get("logprobs"):
                    top = {" Yes": -0.3, " No": -1.5} if i == 0 else {tok: -0.1}
                    if chat:
                        choice["logprobs"] = {"content": [{"token": tok, "logprob": -0.1, "top_logprobs": [
                            {"token": k, "logprob": v} for k, v in top.items()]}]}
                    else:
                        choice["logprobs"] = {"tokens": [tok], "token_logprobs": [-0.1], "top_logprobs": [top]}
                yield json.dumps({"object": "text_completion", "choices": [choice]})
            if self.usage and (body.get("stream_options") or {}).get("include_usage"):
                yield json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": len(tokens),
                                                           "prompt_tokens_details": {"cached_tokens": 3}}})
        finally:
            if req.disconnected.is_set():
                self.disconnects += 1
