"""A loaded GGUF model over llama-cpp-python's low-level API: tokens, text, chat template, samplers.

This module owns no context and no thread; :mod:`llamacpp_engine` does. The chat template
is read from the GGUF's ``tokenizer.chat_template`` metadata and rendered in a jinja2
``SandboxedEnvironment``. Message contents are tokenized as plain text (special-token
strings inside a question cannot open a new chat turn); only the template's own text may
contain special tokens.

Example:
    >>> from certa.runtime.models import resolve_model            # doctest: +SKIP
    >>> m = LlamaModel(resolve_model("qwen2.5-coder-0.5b"))       # doctest: +SKIP
    >>> m.detokenize(m.tokenize("Hello world"))                   # doctest: +SKIP
    'Hello world'
"""

from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path

import llama_cpp as lc
from jinja2.sandbox import SandboxedEnvironment

from certa.runtime.errors import BackendError, ConfigError

_backend_lock = threading.Lock()
_backend_ready = False
_SENTINEL = "\x1ecerta-msg-{}\x1e"


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            lc.llama_backend_init()
            _backend_ready = True


# ggml's log levels (ggml.h): NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the
# previous message). llama-cpp-python's own callback maps them one off (WARN as ERROR), so its
# "errors only" setting still prints warnings such as "control-looking token ... was not
# control-type" on every load; certa installs its own callback instead.
_GGML_ERROR, _GGML_CONT = 4, 5
_log_state = {"verbose": False, "last": 0}


@lc.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:  # pragma: no cover - C calls it
    shown = level if level != _GGML_CONT else _log_state["last"]
    _log_state["last"] = shown
    if _log_state["verbose"] or shown == _GGML_ERROR:
        sys.stderr.write(text.decode("utf-8", errors="replace"))
        sys.stderr.flush()


def set_llama_logs(verbose: bool) -> None:
    """Route llama.cpp's native log to stderr: everything when ``verbose``, else errors only.

    Process-wide (llama.cpp has one log callback); the last call wins.
    """
    _log_state["verbose"] = verbose
    lc.llama_log_set(_log_callback, ctypes.c_void_p(0))


def quiet_llama_logs() -> None:
    """llama.cpp's native log: errors only (``set_llama_logs(False)``)."""
    set_llama_logs(False)


def cpu_has_amx(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU advertises Intel AMX int8 tiles (Sapphire Rapids and later).

    llama.cpp's AMX weight repacking segfaults in ``ggml_backend_amx_mul_mat`` on the first
    decode of a K-quant model on such CPUs (measured here on a 2-core Sapphire Rapids VM;
    upstream ggml-org/llama.cpp#20824, closed unfixed), so :class:`LlamaModel` turns llama.cpp's
    extra weight buffers off there by default.

    Example:
        >>> cpu_has_amx("/nonexistent")
        False
    """
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and " amx_int8" in line for line in text.splitlines())


def _raise(message: str) -> None:
    raise BackendError(f"chat template error: {message}")


class LlamaModel:
    """One GGUF model: weights, vocabulary, tokenizer, chat template and sampler factory."""

    def __init__(self, path: str | Path, *, n_gpu_layers: int = 0, extra_buffers: bool | None = None,
                 mmap: bool = True, name: str | None = None) -> None:
        """Load ``path``. ``extra_buffers``: llama.cpp's repacked weight layouts (faster CPU
        matmuls); None (default) enables them except on AMX CPUs, where they crash
        (:func:`cpu_has_amx`). ``mmap=False`` reads the file into llama.cpp's own buffers (for
        an in-memory file that is freed after loading). ``name``: the file name to report
        (default: ``path``'s)."""
        _init_backend()
        self.path = Path(path) if name is None else Path(name)  # an in-memory file: its name only
        params = lc.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        if not mmap:
            params.load_mode = lc.LLAMA_LOAD_MODE_NONE
        self.extra_buffers = (not cpu_has_amx()) if extra_buffers is None else extra_buffers
        params.use_extra_bufts = self.extra_buffers
        ptr = lc.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            raise ConfigError(f"llama.cpp could not load {self.path}", hint="is it a complete GGUF file?")
        self.ptr = ptr
        self.vocab = lc.llama_model_get_vocab(ptr)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self.n_ctx_train = int(lc.llama_model_n_ctx_train(ptr))
        self.name = self.meta("general.name") or self.path.name
        self.chat_template = self.meta("tokenizer.chat_template")
        self._piece_cache: dict[int, bytes] = {}
        self._jinja = None

    # ---- metadata -------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string, or None."""
        size = 1 << 12
        while True:
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_model_meta_val_str(self.ptr, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    # ---- tokens ---------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = False) -> list[int]:
        if not self.ptr:
            raise BackendError(f"model {self.name} is closed")
        data = text.encode("utf-8")
        cap = len(data) + 16
        arr = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        return list(arr[:n])

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens render empty)."""
        cached = self._piece_cache.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        out = buf.raw[:n]
        self._piece_cache[token] = out
        return out

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self.vocab, token))

    def token_text(self, token: int) -> str:
        return (lc.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", errors="replace")

    # ---- prompts --------------------------------------------------------------------
    def encode_prompt(self, prompt: str, *, chat: bool = False, system: str | None = None,
                      assistant_prefix: str = "") -> list[int]:
        """Prompt tokens: raw text (with BOS if the model wants one), or a chat-templated turn
        (continuing ``assistant_prefix``, plain text, when given)."""
        if not chat:
            return self.tokenize(prompt, add_special=True)
        messages = ([{"role": "system", "content": system}] if system is not None else [])
        messages.append({"role": "user", "content": prompt})
        head = self.encode_chat(messages)
        return head + self.tokenize(assistant_prefix) if assistant_prefix else head

    def _environment(self) -> SandboxedEnvironment:
        if self._jinja is None:
            env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise
            self._jinja = env.from_string(self.chat_template or "")
        return self._jinja

    def render_chat(self, messages: list[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """The chat template (from the GGUF) rendered for ``messages``."""
        if not self.chat_template:
            raise ConfigError(f"model {self.name} has no chat template in its GGUF",
                              hint="use chat=False with a hand-written prompt")
        bos = self.token_text(lc.llama_vocab_bos(self.vocab)) if self.add_bos else ""
        eos = self.token_text(lc.llama_vocab_eos(self.vocab))
        return self._environment().render(messages=messages, add_generation_prompt=add_generation_prompt,
                                          bos_token=bos, eos_token=eos, tools=None)

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Tokens of a chat: template text may hold special tokens, message contents never do."""
        marked = [dict(m, content=_SENTINEL.format(i)) for i, m in enumerate(messages)]
        rendered = self.render_chat(marked)
        tokens: list[int] = []
        rest = rendered
        for i, m in enumerate(messages):
            head, sep, rest_ = rest.partition(_SENTINEL.format(i))
            if not sep:  # the template transformed the content: fall back to one pass
                return self.tokenize(self.render_chat(messages), parse_special=True)
            tokens += self.tokenize(head, parse_special=True)
            tokens += self.tokenize(m["content"], parse_special=False)
            rest = rest_
        return tokens + self.tokenize(rest, parse_special=True)

    # ---- samplers -------------------------------------------------------------------
    @staticmethod
    def sampler(temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0):
        """A native sampler chain: greedy at temperature 0, else top_k → top_p → temp → dist(seed)."""
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        if temperature <= 0.0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
            return chain
        if top_k and top_k > 0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(int(top_k)))
        if top_p < 1.0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(float(top_p), 1))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(float(temperature)))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(int(seed) & 0xFFFFFFFF))
        return chain

    @staticmethod
    def free_sampler(chain) -> None:
        if chain:
            lc.llama_sampler_free(chain)

    def close(self) -> None:
        """Free the weights. Idempotent."""
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            lc.llama_model_free(ptr)


__all__ = ["LlamaModel", "quiet_llama_logs", "set_llama_logs"]
