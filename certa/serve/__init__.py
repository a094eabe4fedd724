"""certa.serve: an OpenAI-compatible reasoning server with certaindex early exit.

:class:`Server` is the in-process API (no HTTP); :func:`create_app` builds the ASGI app
over a Server (needs ``pip install 'certa[serve]'``); ``certa serve`` runs it with uvicorn.

Example:
    >>> import asyncio
    >>> from certa.serve import Server
    >>> from certa.runtime import ScriptedBackend
    >>> server = Server("sc", ScriptedBackend(responses=["\\\\boxed{4}"]), max_knob=16)
    >>> asyncio.run(server.complete("What is 2+2?")).content
    '\\\\boxed{4}'
"""

from __future__ import annotations

from certa.runtime.lazy import lazy_exports
from certa.serve.completion import Completion, Heartbeat, Progress
from certa.serve.errors import BadRequestError, ServerBusyError, ShuttingDownError, UnknownModelError
from certa.serve.schemas import CertaOptions
from certa.serve.server import Server
from certa.serve.stream import CompletionStream

__all__ = ["BadRequestError", "CertaOptions", "Completion", "CompletionStream", "Heartbeat", "Progress", "Server",
           "ServerBusyError", "ShuttingDownError", "UnknownModelError", "create_app", "start_background"]


# the HTTP layer needs starlette/uvicorn: import it only when asked
__getattr__, __dir__ = lazy_exports(__name__, {"create_app": ("certa.serve.http", "create_app"),
                                               "start_background": ("certa.serve.launch", "start_background")})
