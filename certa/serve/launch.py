"""Run a :class:`~certa.serve.Server` over HTTP with uvicorn: blocking, or in a background thread.

``run`` is what ``certa serve`` calls. ``start_background`` serves from a thread on a
free loopback port — for notebooks and tests that drive the server with an HTTP client.

Example:
    >>> from certa.serve import Server
    >>> from certa.runtime import ScriptedBackend
    >>> with start_background(Server("sc", ScriptedBackend(responses=["\\\\boxed{4}"]))) as bg:
    ...     import httpx
    ...     httpx.get(bg.url + "/health").json()["status"]
    'ok'
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from certa.runtime.errors import ConfigError

from .server import Server

__all__ = ["BackgroundServer", "run", "start_background"]


def _uvicorn() -> Any:
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise ConfigError(f"the HTTP server needs starlette and uvicorn ({exc.name} is missing)",
                          hint="pip install 'certa[serve]'") from None
    return uvicorn


def _config(server: Server, *, shutdown_timeout: float, log_level: str, access_log: bool, **app_options: Any) -> Any:
    uvicorn = _uvicorn()
    from .http import create_app
    app = create_app(server, shutdown_timeout=shutdown_timeout, **app_options)
    # uvicorn waits up to the same timeout for open requests, then cancels them (aborting their programs)
    return uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on",
                          timeout_graceful_shutdown=shutdown_timeout)


def run(server: Server, host: str = "127.0.0.1", port: int = 8000, *, shutdown_timeout: float = 30.0,
        log_level: str = "info", access_log: bool = False, **app_options: Any) -> None:
    """Serve until SIGINT/SIGTERM, then shut down gracefully (see :func:`certa.serve.http.create_app`)."""
    uvicorn = _uvicorn()
    config = _config(server, shutdown_timeout=shutdown_timeout, log_level=log_level, access_log=access_log,
                     **app_options)
    config.host, config.port = host, port
    uvicorn.Server(config).run()


class BackgroundServer:
    """A uvicorn server running in a daemon thread. ``url`` is ``http://host:port``;
    ``base_url`` the OpenAI client's (``.../v1``). ``stop()`` shuts down gracefully."""

    def __init__(self, uv_server: Any, sock: socket.socket, thread: threading.Thread) -> None:
        self._uv, self._sock, self._thread = uv_server, sock, thread
        host, port = sock.getsockname()[:2]
        self.url = f"http://{host}:{port}"
        self.base_url = self.url + "/v1"
        self.port = port

    def stop(self, timeout: float = 30.0) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_background(server: Server, host: str = "127.0.0.1", port: int = 0, *, shutdown_timeout: float = 5.0,
                     log_level: str = "warning", start_timeout: float = 20.0, **app_options: Any) -> BackgroundServer:
    """Serve ``server`` from a background thread (``port=0``: a free port) and wait until it is up."""
    uvicorn = _uvicorn()
    config = _config(server, shutdown_timeout=shutdown_timeout, log_level=log_level, access_log=False,
                     **app_options)
    uv = uvicorn.Server(config)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, name="certa-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not uv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            uv.should_exit = True
            sock.close()
            raise RuntimeError("the background server did not start")
        time.sleep(0.01)
    return BackgroundServer(uv, sock, thread)
