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
from collections.abc import Callable, Sequence
from typing import Any

from certa.runtime.errors import ConfigError

from certa.serve.connections import ConnectionLimits
from certa.serve.server import Server

__all__ = ["BackgroundServer", "ConnectionLimits", "run", "security_options", "start_background"]


def _uvicorn() -> Any:
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise ConfigError(f"the HTTP server needs starlette and uvicorn ({exc.name} is missing)",
                          hint="pip install 'certa[serve]'") from None
    return uvicorn


def security_options(host: str, api_keys: Sequence[str] = (), api_key_file: str | None = None,
                     public_metrics: bool = False, *, warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``create_app`` options from ``certa serve``'s flags and ``$CERTA_API_KEY``; warns (via
    ``warn``) when a non-loopback ``host`` would serve without a key."""
    from certa.serve.auth import load_api_keys
    keys = load_api_keys(api_keys, api_key_file)
    if not keys and not _is_loopback(host) and warn is not None:
        warn(f"warning: serving on {host} with no API key: anyone who can reach it can run programs "
             "(use --api-key or $CERTA_API_KEY, and TLS in front; see docs/serve.md)")
    return {"api_keys": keys, "public_metrics": public_metrics}


def _is_loopback(host: str) -> bool:
    import ipaddress
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _uvicorn_server(server: Server, *, shutdown_timeout: float, log_level: str, access_log: bool,
                    connections: ConnectionLimits | None = None, **app_options: Any) -> Any:
    """A uvicorn server whose shutdown first drains the certa Server: listeners close, running
    programs get ``shutdown_timeout`` seconds, the rest are aborted (their clients get a 503 or an
    in-stream error), and only then does uvicorn wait for connections and run the app's shutdown.
    ``connections`` (default :class:`ConnectionLimits`) sets uvicorn's limits and the app's body timeout."""
    uvicorn = _uvicorn()
    from certa.serve.http import create_app
    limits = connections or ConnectionLimits()
    app = create_app(server, shutdown_timeout=0, body_timeout_s=limits.body_timeout_s, **app_options)
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on",
                            timeout_graceful_shutdown=5.0,  # after the drain only responses are left to send
                            **limits.uvicorn_options())

    class _Draining(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            for s in self.servers:
                s.close()  # stop accepting while programs finish
            await server.drain(shutdown_timeout)
            await super().shutdown(sockets)

    return _Draining(config)


def run(server: Server, host: str = "127.0.0.1", port: int = 8000, *, shutdown_timeout: float = 30.0,
        log_level: str = "info", access_log: bool = False, **app_options: Any) -> None:
    """Serve until SIGINT/SIGTERM, then shut down gracefully: running programs get
    ``shutdown_timeout`` seconds to finish, the rest are aborted, then the backend is closed.
    ``connections=ConnectionLimits(...)`` sets the timeouts and caps (``certa serve``'s flags);
    other ``app_options`` go to :func:`certa.serve.http.create_app`."""
    uv = _uvicorn_server(server, shutdown_timeout=shutdown_timeout, log_level=log_level, access_log=access_log,
                         **app_options)
    uv.config.host, uv.config.port = host, port
    uv.run()


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
    uv = _uvicorn_server(server, shutdown_timeout=shutdown_timeout, log_level=log_level, access_log=False,
                         **app_options)
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
