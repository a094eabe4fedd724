"""API keys for ``certa serve``: where they come from, and the ASGI middleware that checks them.

Keys come from ``--api-key`` (repeatable), ``--api-key-file`` (one key a line, ``#``
comments) and the ``CERTA_API_KEY`` environment variable (comma-separated for several);
all are merged. A client sends one as ``Authorization: Bearer KEY`` (what the OpenAI
client does with ``api_key=``). Every key is compared in constant time
(:func:`hmac.compare_digest` on SHA-256 digests, all keys checked, so neither a key's
length nor which key matched leaks through timing). A missing or wrong key gets a 401 with
OpenAI's error shape and code CT414. ``/health`` is always open; ``/metrics`` needs a key
unless ``public_metrics`` is set.

Example:
    >>> keys = load_api_keys(["k-1"], env={"CERTA_API_KEY": "k-2, k-3"})
    >>> keys
    ('k-1', 'k-2', 'k-3')
    >>> check = KeyCheck(keys)
    >>> check.matches(b"Bearer k-2"), check.matches(b"Bearer k-4"), check.matches(b"")
    (True, False, False)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pathlib
from collections.abc import Iterable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from certa.runtime.errors import ConfigError

from certa.serve.errors import UnauthorizedError
from certa.serve.format import error_body

__all__ = ["ENV_VAR", "ApiKeyMiddleware", "KeyCheck", "load_api_keys"]

ENV_VAR = "CERTA_API_KEY"
OPEN_PATHS = frozenset({"/health"})


def _valid(key: str, where: str) -> str:
    if not key or any(c.isspace() for c in key) or not key.isprintable():
        raise ConfigError(f"an API key from {where} is empty or has spaces or control characters")
    return key


def load_api_keys(keys: Iterable[str] = (), key_file: str | os.PathLike[str] | None = None, *,
                  env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The API keys from ``keys``, ``key_file`` and ``$CERTA_API_KEY``, deduplicated, in order.

    Raises ConfigError for an unreadable key file, an empty file, or a key with whitespace.
    """
    out: list[str] = [_valid(k, "--api-key") for k in keys]
    if key_file is not None:
        path = pathlib.Path(key_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the API key file {path}: {exc}") from None
        lines = [ln.strip() for ln in text.splitlines()]
        found = [_valid(ln, str(path)) for ln in lines if ln and not ln.startswith("#")]
        if not found:
            raise ConfigError(f"the API key file {path} has no keys")
        out += found
    raw = (os.environ if env is None else env).get(ENV_VAR, "")
    out += [_valid(k.strip(), f"${ENV_VAR}") for k in raw.split(",") if k.strip()]
    return tuple(dict.fromkeys(out))


class KeyCheck:
    """Constant-time check of an ``Authorization`` header value against a set of keys."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys]
        if not self._digests:
            raise ConfigError("KeyCheck needs at least one key")

    def matches(self, authorization: bytes) -> bool:
        scheme, _, token = authorization.partition(b" ")
        given = hashlib.sha256(token.strip()).digest()
        ok = False
        for d in self._digests:  # no early exit: every key costs the same
            ok |= hmac.compare_digest(d, given)
        return ok and scheme.lower() == b"bearer"


class ApiKeyMiddleware:
    """Refuse HTTP requests without a valid key (401, OpenAI's error shape, code CT414)."""

    def __init__(self, app: ASGIApp, keys: Iterable[str], *, public_metrics: bool = False) -> None:
        self.app, self.check = app, KeyCheck(keys)
        self.open = OPEN_PATHS | ({"/metrics"} if public_metrics else set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open:
            await self.app(scope, receive, send)
            return
        auth = b""
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                auth = value
        if self.check.matches(auth):
            await self.app(scope, receive, send)
            return
        err = UnauthorizedError("a valid API key is required (Authorization: Bearer KEY)" if not auth
                                else "the API key is not valid")
        body = json.dumps(error_body(err.message, "invalid_request_error", err.code)).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="certa"')]})
        await send({"type": "http.response.body", "body": body})
