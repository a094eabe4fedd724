"""``python -m llama_cpp.server`` that runs on AMX CPUs: the same server and arguments, with
llama.cpp's extra weight buffers off where they crash (see :func:`.model.cpu_has_amx`).

llama-cpp-python's server offers no switch for them, so this wrapper sets
``use_extra_bufts`` in the default model parameters its ``Llama`` class starts from, then
runs the server module unchanged. Elsewhere it is exactly ``python -m llama_cpp.server``.

Usage::

    python -m certa.runtime.backends.llamacpp.server --model M.gguf --port 8080 [...]
"""

from __future__ import annotations

import runpy
import sys

import llama_cpp.llama_cpp as lc

from certa.runtime.backends.llamacpp.model import cpu_has_amx


def without_extra_buffers() -> None:
    """Make every model llama-cpp-python loads from now on skip the extra weight buffers."""
    default = lc.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    lc.llama_model_default_params = params


def main(argv: list[str] | None = None) -> None:
    if cpu_has_amx():
        without_extra_buffers()
    sys.argv = ["llama_cpp.server", *(sys.argv[1:] if argv is None else argv)]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
