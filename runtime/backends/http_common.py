"""Shared pieces of the HTTP backends: URL/host checks, program-affine routing, SSE, errors.

Security rules every HTTP backend follows (see ``docs/backends.md``):

* worker URLs are validated once, at construction: ``http``/``https`` only, a host, no
  credentials, query or fragment in the URL (pass ``api_key`` instead);
* ``allowed_hosts`` (default: the hosts of the configured URLs) is checked again before
  every request is sent, so no code path can reach another host;
* the HTTP client never follows redirects and ignores proxy environment variables.

Example:
    >>> validate_url("http://127.0.0.1:8000/v1/")
    'http://127.0.0.1:8000/v1'
    >>> workers = ["http://a:1", "http://b:1", "http://c:1"]
    >>> pick_worker("prog-7", workers) == pick_worker("prog-7", workers)
    True
    >>> probs_from_top({" Yes": -0.1, " No": -2.5, "Maybe": -4.0}, ("Yes", "No"))["Yes"] > 0.9
    True
    >>> wire_rid("p1-s1"), wire_rid("p1-s10").startswith(wire_rid("p1-s1"))
    ('p1-s1#', False)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from certa.runtime.backends.base import Backend
from certa.runtime.errors import BackendError, ConfigError
from certa.runtime.types import FinishReason, GenRequest, GenResult

RETRYABLE_STATUS = frozenset({408, 429, 502, 503, 504})
_MAX_MESSAGE = 500


# ---- URLs and hosts -----------------------------------------------------------------------
def _host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def validate_url(url: str, allowed_hosts: Iterable[str] | None = None) -> str:
    """Return ``url`` normalised (no trailing slash) or raise ``ConfigError``.

    Accepts only ``http``/``https`` URLs with a host and no user info, query or fragment.
    When ``allowed_hosts`` is given, the URL's host must be one of them.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(f"worker URL must be a non-empty string, not {url!r}")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"worker URL {url!r} must use http or https", hint="e.g. http://127.0.0.1:8000")
    if not parts.hostname:
        raise ConfigError(f"worker URL {url!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"worker URL {url!r} must not embed credentials", hint="pass api_key=... instead")
    if parts.query or parts.fragment:
        raise ConfigError(f"worker URL {url!r} must not have a query or fragment")
    try:
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ConfigError(f"worker URL {url!r} has an invalid port") from None
    if allowed_hosts is not None:
        allowed = {h.lower() for h in allowed_hosts}
        if parts.hostname.lower() not in allowed:
            raise ConfigError(f"worker host {parts.hostname!r} is not in allowed_hosts",
                              hint=f"allowed: {', '.join(sorted(allowed)) or '(none)'}")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


class HostGuard:
    """Checks, before each send, that a URL targets an allowed host over http(s)."""

    def __init__(self, allowed_hosts: Iterable[str]) -> None:
        self.allowed = frozenset(h.lower() for h in allowed_hosts)

    def check(self, url: str, req: GenRequest | None = None) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or (parts.hostname or "").lower() not in self.allowed:
            raise BackendError(f"refusing to send to unconfigured host {parts.hostname!r}", retryable=False,
                               **where(req))
        return url


def resolve_urls(owner: str, base_url: str | Sequence[str] | None, urls: str | Sequence[str] | None) -> str | Sequence[str]:
    """The worker URL(s) of a backend built with ``base_url=`` (one server) or ``urls=`` (many).

    Exactly one must be given. A list passed as ``base_url`` (positionally, as the docs showed)
    and a single URL passed as ``urls`` are accepted.
    """
    if (base_url is None) == (urls is None):
        raise ConfigError(f"{owner} needs exactly one of base_url= (one server) or urls= (several workers)",
                          hint=f"e.g. {owner}(base_url='http://127.0.0.1:30000')")
    return base_url if base_url is not None else urls  # type: ignore[return-value]


def normalise_workers(urls: str | Sequence[str], allowed_hosts: Iterable[str] | None) -> tuple[list[str], HostGuard]:
    """Validate one URL or a list of worker URLs; return them and the guard for later sends."""
    raw = [urls] if isinstance(urls, str) else list(urls)
    if not raw:
        raise ConfigError("at least one worker URL is required")
    allowed = None if allowed_hosts is None else [h for h in allowed_hosts]
    workers = [validate_url(u, allowed) for u in raw]
    if len(set(workers)) != len(workers):
        raise ConfigError("worker URLs must be distinct")
    return workers, HostGuard(allowed if allowed is not None else [_host_of(w) for w in workers])


# ---- routing -------------------------------------------------------------------------------
def affinity_key(req: Any) -> str:
    """The routing key of a request: its program (so branches share a prefix cache)."""
    return getattr(req, "program_id", "") or getattr(req, "prefix_hint", None) or getattr(req, "rid", "")


def rank_workers(key: str, workers: Sequence[str]) -> list[str]:
    """Rendezvous (highest-random-weight) order of ``workers`` for ``key``: the first serves it,
    the next ones take over, in order, while it is down. Stable; only 1/N keys move per change."""
    if len(workers) == 1:
        return list(workers)

    def weight(worker: str) -> bytes:
        return hashlib.blake2b(f"{worker}|{key}".encode(), digest_size=8).digest()

    return sorted(workers, key=weight, reverse=True)


def pick_worker(key: str, workers: Sequence[str]) -> str:
    """The first worker of :func:`rank_workers`."""
    return rank_workers(key, workers)[0]


ROUTING_HEADER = "X-SMG-Routing-Key"


def routing_header(key: str) -> dict[str, str]:
    """The gateway routing header for an affinity key (SGLang Model Gateway's
    ``consistent_hashing`` policy hashes it); keys that are not short printable ASCII are hashed."""
    if not key:
        return {}
    if not (key.isascii() and key.isprintable() and len(key) <= 200):
        key = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    return {ROUTING_HEADER: key}


# ---- rids on the wire -------------------------------------------------------------------------
RID_END = "#"


def wire_rid(rid: str) -> str:
    """The rid sent to an engine that aborts by PREFIX (SGLang's scheduler matches
    ``req.rid.startswith(abort_rid)``): ``%`` and ``#`` are escaped and ``#`` ends it, so no
    rid sent is a prefix of another and aborting ``X-s1`` never touches ``X-s10``."""
    return rid.replace("%", "%25").replace(RID_END, "%23") + RID_END


# ---- errors ---------------------------------------------------------------------------------
def where(req: Any) -> dict[str, Any]:
    """``program``/``step``/``branch`` keywords for a ``BackendError`` about ``req``."""
    if req is None:
        return {}
    return {"program": getattr(req, "program_id", "") or None, "step": getattr(req, "step", "") or None,
            "branch": getattr(req, "branch", None)}


def server_message(body: bytes | str) -> str:
    """The human-readable message of an error body (OpenAI, FastAPI or SGLang shapes)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:_MAX_MESSAGE]
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            val = data.get(key)
            if isinstance(val, dict) and "message" in val:
                return str(val["message"])[:_MAX_MESSAGE]
            if val:
                return str(val)[:_MAX_MESSAGE]
    return text.strip()[:_MAX_MESSAGE]


def status_error(status: int, body: bytes | str, req: Any, url: str) -> BackendError:
    """A ``BackendError`` for an HTTP error status; 408/429/502/503/504 are retryable."""
    if 300 <= status < 400:
        msg = f"server at {url} answered a redirect ({status}); redirects are never followed"
        return BackendError(msg, retryable=False, **where(req))
    return BackendError(f"HTTP {status} from {url}: {server_message(body) or '(empty body)'}",
                        retryable=status in RETRYABLE_STATUS, **where(req))


def stream_error(data: dict, req: Any, url: str) -> BackendError:
    """The error for an error event INSIDE a 200 stream, ``{"error": {"message", "code", ...}}``
    (SGLang, vLLM); ``code`` is the HTTP status it stands for (500 when absent or not a number)."""
    err = data.get("error")
    body = err if isinstance(err, dict) else {"message": err}
    code = body.get("code", data.get("status_code"))
    try:
        status = int(code)
    except (TypeError, ValueError):
        status = 500
    exc = status_error(status, json.dumps({"error": body}), req, url)
    if isinstance(body.get("retryable"), bool):
        exc.retryable = body["retryable"]
    return exc


def transport_error(exc: Exception, req: Any, url: str) -> BackendError:
    """A retryable ``BackendError`` for a connect/read/timeout failure."""
    return BackendError(f"cannot reach {url}: {type(exc).__name__}: {exc}", retryable=True, **where(req))


# ---- streaming -------------------------------------------------------------------------------
_FINISH: dict[str, FinishReason] = {"stop": "stop", "eos": "stop", "length": "length", "abort": "abort"}


@dataclass(slots=True)
class StreamState:
    """What one streamed request has produced so far (filled by each backend's chunk parser)."""

    text: list[str] = field(default_factory=list)
    chunks: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int = 0
    finish: str | None = None
    logprobs: list[float] = field(default_factory=list)
    first_top: dict[str, float] | None = None
    abort_status: int | None = None
    abort_message: str = ""
    on_text: Callable[[str], None] | None = None  # streaming: called with each new piece of text
    _items: int = 0  # pieces of ``text`` delivered to ``on_text`` (the last one possibly in part)
    _chars: int = 0  # characters of ``text[_items]`` delivered

    def flush(self) -> None:
        """Hand the text parsed since the last call to ``on_text``. Works for incremental
        pieces (``text`` grows by items) and cumulative ones (``text`` is one growing item)."""
        if self.on_text is None:
            return
        parts: list[str] = []
        while self._items < len(self.text):
            item = self.text[self._items]
            parts.append(item[self._chars:])
            if self._items == len(self.text) - 1:  # the last piece may still grow (cumulative text)
                self._chars = len(item)
                break
            self._items, self._chars = self._items + 1, 0
        new = "".join(parts)
        if new:
            self.on_text(new)

    def result(self, req: GenRequest, aborted: bool = False) -> GenResult:
        tokens = self.completion_tokens if self.completion_tokens is not None else self.chunks
        prompt = self.prompt_tokens if self.prompt_tokens is not None else max(1, (len(req.prompt.encode()) + 3) // 4)
        finish: FinishReason = "abort" if aborted else _FINISH.get(self.finish or "stop", "stop")
        return GenResult(text="".join(self.text), tokens=tokens, prompt_tokens=prompt, finish_reason=finish,
                         rid=req.rid, token_logprobs=list(self.logprobs) if req.logprobs else None,
                         cached_prompt_tokens=self.cached_tokens)


def server_abort_error(st: StreamState, req: GenRequest) -> BackendError:
    """The error for a request the SERVER aborted (evicted, preempted, rejected), not certa."""
    status = st.abort_status
    return BackendError(f"server aborted request {req.rid!r}: {st.abort_message or 'no reason given'}",
                        retryable=status is None or status in RETRYABLE_STATUS, **where(req))


async def iter_sse(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """Yield the ``data`` payload of each server-sent event until ``[DONE]`` or the end.

    Multi-line data fields are joined with newlines; comments and other fields are ignored.
    """
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                payload, data = "\n".join(data), []
                if payload.strip() == "[DONE]":
                    return
                yield payload
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        payload = "\n".join(data)
        if payload.strip() != "[DONE]":
            yield payload


def make_client(timeout: float, headers: dict[str, str] | None = None) -> Any:
    """An ``httpx.AsyncClient`` that never follows redirects nor uses proxy env vars."""
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError("the HTTP backends need httpx", hint="pip install 'certa[http]'") from exc
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), follow_redirects=False,
                             trust_env=False, headers=headers or {}, limits=limits)


# ---- scoring ---------------------------------------------------------------------------------
def probs_from_top(top: dict[str, float], options: Sequence[str]) -> dict[str, float] | None:
    """Turn first-token top logprobs into option probabilities, or None if none match.

    A token counts for an option when the option starts with the token (stripped, case
    folded); a token matching several options is shared equally among them.
    """
    mass = {o: 0.0 for o in options}
    for token, logprob in top.items():
        t = token.strip().lower()
        if not t or logprob is None or not math.isfinite(logprob):
            continue
        hits = [o for o in options if o.strip().lower().startswith(t)]
        for o in hits:
            mass[o] += math.exp(logprob) / len(hits)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {o: v / total for o, v in mass.items()}


class StreamingBackend(Backend):
    """A backend that runs every request as a stream (the OpenAI-compatible HTTP servers, the
    SGLang engine): :meth:`run_stream` fills a :class:`StreamState`, and ``generate`` /
    ``generate_stream`` hand back its result."""

    async def run_stream(self, req: GenRequest, top: int = 0, on_text: Callable[[str], None] | None = None
                         ) -> tuple[StreamState, bool]:
        """Run ``req`` as a stream (``top``: top logprobs of the first token, for ``score``;
        ``on_text``: each text delta); returns the stream's state and whether it was aborted."""
        raise NotImplementedError

    async def generate(self, req: GenRequest) -> GenResult:
        st, aborted = await self.run_stream(req)
        return st.result(req, aborted)

    async def generate_stream(self, req: GenRequest, on_text: Callable[[str], None]) -> GenResult:
        """``generate``, handing each streamed text delta to ``on_text`` as it arrives."""
        st, aborted = await self.run_stream(req, on_text=on_text)
        return st.result(req, aborted)
