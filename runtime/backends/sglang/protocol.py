"""SGLang's wire contract, shared by the HTTP and the embedded-engine backends.

What certa sends and reads, as checked against the ``sglang==0.5.23`` wheel: the integer
priority (higher = first by default), the ``/generate`` / ``async_generate`` output dicts,
PREFIX-FREE rids (SGLang's scheduler aborts every request whose rid starts with the one
aborted: :func:`~certa.runtime.backends.http_common.wire_rid`), the in-stream 503 abort of a
request that carries a priority on a server without priority scheduling, and seeds, which
SGLang honours only with ``--enable-deterministic-inference``.

Example:
    >>> from certa.runtime.types import GenRequest
    >>> st = StreamState()
    >>> parse_native({"text": "4", "meta_info": {"completion_tokens": 1, "finish_reason": {"type": "length"}}}, st)
    >>> st.text, st.completion_tokens, st.finish
    (['4'], 1, 'length')
    >>> st = StreamState(finish="abort", abort_status=503, abort_message=PRIORITY_DISABLED_HINT)
    >>> type(abort_error(st, GenRequest(prompt="", rid="r"))).__name__
    'ConfigError'
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from certa.runtime.errors import ConfigError
from certa.runtime.types import GenRequest
from certa.runtime.backends.http_common import StreamState, server_abort_error

PRIORITY_DISABLED_HINT = "Using priority is disabled"
"""How SGLang's scheduler words the 503 abort of a request with a priority it will not use."""

PRIORITY_POLICIES = ("fcfs", "lof")
"""The only ``--schedule-policy`` values SGLang accepts with ``--enable-priority-scheduling``."""

_INT_LIMIT = 2**31 - 1


def sglang_priority(priority: float, *, scale: float = 1.0, low_values_first: bool = False) -> int:
    """Map certa's priority (lower = urgent) to SGLang's integer priority.

    >>> sglang_priority(2.0), sglang_priority(2.0, low_values_first=True)
    (-2, 2)
    >>> sglang_priority(0.25, scale=100)
    -25
    """
    value = max(-_INT_LIMIT, min(_INT_LIMIT, round(priority * scale)))
    return int(value) if low_values_first else int(-value)


def sampling_params(req: GenRequest) -> dict[str, Any]:
    """SGLang's ``sampling_params`` for ``req`` (the native ``/generate`` body and ``async_generate``).

    >>> sampling_params(GenRequest(prompt="", max_tokens=8, top_k=0, stop=("\\n",), seed=3))["sampling_seed"]
    3
    """
    params: dict[str, Any] = {"max_new_tokens": req.max_tokens, "temperature": req.temperature, "top_p": req.top_p}
    if req.top_k > 0:
        params["top_k"] = req.top_k
    if req.stop:
        params["stop"] = list(req.stop)
    if req.seed is not None:
        params["sampling_seed"] = req.seed
    return params


def parse_native(data: dict, st: StreamState, incremental: bool = False,
                 token_text: Callable[[int], str] | None = None) -> None:
    """Fold one SGLang ``/generate`` stream event (or engine output dict) into ``st``.

    Text and logprobs are cumulative unless the server runs with
    ``--incremental-streaming-output``; ``completion_tokens`` is cumulative either way.
    Top-logprob entries are ``(logprob, token_id, text)``; ``token_text`` decodes an id
    when the text is absent (the engine API does not return it).
    """
    meta = data.get("meta_info") or {}
    text = data.get("text")
    lps = [float(x[0]) for x in meta.get("output_token_logprobs") or [] if x and x[0] is not None]
    if incremental:
        st.text.append(text or "")
        st.logprobs.extend(lps)
    else:
        if text is not None:
            st.text = [text]
        if lps or "output_token_logprobs" in meta:
            st.logprobs = lps
    if meta.get("completion_tokens") is not None:
        st.completion_tokens = int(meta["completion_tokens"])
    if meta.get("prompt_tokens") is not None:
        st.prompt_tokens = int(meta["prompt_tokens"])
    st.cached_tokens = int(meta.get("cached_tokens") or st.cached_tokens)
    tops = meta.get("output_top_logprobs") or []
    if st.first_top is None and tops and tops[0]:
        st.first_top = {_token_text(t, token_text): float(t[0]) for t in tops[0] if t and t[0] is not None}
    reason = meta.get("finish_reason")
    if isinstance(reason, dict):
        st.finish = str(reason.get("type") or "stop")
        if st.finish == "abort":
            st.abort_status = reason.get("status_code")
            st.abort_message = str(reason.get("message") or "aborted by the server")
    elif isinstance(reason, str):
        st.finish = reason


def _token_text(entry: Sequence[Any], decode: Callable[[int], str] | None) -> str:
    if len(entry) > 2 and entry[2] is not None:
        return str(entry[2])
    return decode(int(entry[1])) if decode is not None else str(entry[1])



def abort_error(st: StreamState, req: Any) -> Exception:
    """The error for a request SGLang aborted on its own.

    A priority sent to a server without priority scheduling (and with
    ``--abort-on-priority-when-disabled``) comes back as an in-stream 503 abort: retrying
    cannot help, so it is a ``ConfigError`` saying how to fix the setup. Anything else is the
    generic server-abort ``BackendError`` (retryable unless the server gave a 4xx status).
    """
    if st.abort_status == 503 and PRIORITY_DISABLED_HINT in (st.abort_message or ""):
        return ConfigError(f"the SGLang server refused request {req.rid!r}: it carries a priority but the server "
                           f"runs without priority scheduling ({st.abort_message})",
                           hint="start SGLang with --enable-priority-scheduling --schedule-policy fcfs, or pass "
                                "server_priority=False (certa then orders requests client-side)")
    return server_abort_error(st, req)


class SeedNotice:
    """Warns once (per backend) that seeds are ignored without deterministic inference."""

    def __init__(self, deterministic: bool, where: str) -> None:
        self.deterministic = deterministic
        self.where = where
        self.warned = False

    def check(self, req: Any) -> None:
        if self.deterministic or self.warned or req.seed is None or req.temperature <= 0:
            return
        self.warned = True
        warnings.warn(f"{self.where}: SGLang ignores sampling_seed unless it runs with "
                      "--enable-deterministic-inference, so seeded samples are not reproducible "
                      "(see docs/backends.md, 'Seeds')", RuntimeWarning, stacklevel=4)
