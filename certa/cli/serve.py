"""``certa serve``: an OpenAI-compatible reasoning server (registered in :mod:`certa.cli`).

Example:
    certa serve --program sc --backend scripted --port 8000 --max-concurrent 64 --max-knob 16

Then any OpenAI client works against ``http://127.0.0.1:8000/v1`` (see ``docs/serve.md``).
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from certa.cli.errors import console, fail
from certa.cli.options import BACKEND_HELP, PROGRAM_HELP, SCHEDULER_HELP, parse_backend_opts

__all__ = ["serve"]


class _ServeOptions(BaseModel):
    """The ``serve`` options that typer's types alone do not check."""

    model_config = ConfigDict(extra="forbid")
    port: int = Field(ge=0, le=65535)
    max_concurrent: Optional[int] = Field(default=None, ge=1)
    max_knob: Optional[int] = Field(default=None, ge=1)
    max_token_budget: Optional[int] = Field(default=None, ge=1)
    max_inflight: Optional[int] = Field(default=None, ge=1)
    max_request_seconds: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    shutdown_timeout: float = Field(ge=0)
    header_timeout: float = Field(gt=0, allow_inf_nan=False)
    body_timeout: float = Field(gt=0, allow_inf_nan=False)
    keep_alive_timeout: float = Field(gt=0, allow_inf_nan=False)
    max_connections: int = Field(ge=1)
    max_header_bytes: int = Field(ge=1024)
    answer_format: str = Field(pattern="^(boxed|plain)$")


def serve(
    program: List[str] = typer.Option(["sc"], "--program", help=f"{PROGRAM_HELP}; repeat to serve several (the "
                                      "request's model picks one)"),
    backend: str = typer.Option("auto", help=BACKEND_HELP),
    model: Optional[str] = typer.Option(None, help="GGUF path or model name (llamacpp), model path (sglang)"),
    url: Optional[str] = typer.Option(None, help="server URL(s), comma-separated (openai, sglang-http)"),
    backend_opt: List[str] = typer.Option([], "--backend-opt", help="extra backend option KEY=VALUE (VALUE as "
                                          "JSON if it parses), repeatable, e.g. --backend-opt max_in_flight=8"),
    host: str = typer.Option("127.0.0.1", help="address to bind (loopback by default)"),
    port: int = typer.Option(8000, help="port to bind"),
    scheduler: str = typer.Option("certa", help=f"{SCHEDULER_HELP} (one for all requests)"),
    max_concurrent: Optional[int] = typer.Option(None, help="programs running at once; more get 429"),
    max_knob: Optional[int] = typer.Option(4096, help="largest knob cap (and knob-unit policy field) a request "
                                           "may ask for (else 400); also clamps a program's own cap"),
    max_token_budget: Optional[int] = typer.Option(None, "--max-token-budget", "--max-tokens",
                                                   help="largest decode-token budget (a request's max_tokens) a "
                                                   "request may ask for (else 400); also the default budget "
                                                   "(--max-tokens: its old name)"),
    max_inflight: Optional[int] = typer.Option(None, help="backend requests admitted at once; the scheduler "
                                               "orders the rest"),
    max_request_seconds: Optional[float] = typer.Option(600.0, help="wall-time limit of one request: a program "
                                                        "still running then is aborted (CT415)"),
    answer_format: str = typer.Option("boxed", help="boxed (\\boxed{18}) or plain (18)"),
    shutdown_timeout: float = typer.Option(30.0, help="seconds running programs get to finish on shutdown"),
    log_level: str = typer.Option("info", help="debug, info, warning, error"),
    debug: bool = typer.Option(False, help="show full tracebacks"),
    api_key: List[str] = typer.Option([], "--api-key", help="require this key (Authorization: Bearer KEY); "
                                      "repeatable; also $CERTA_API_KEY (comma-separated)"),
    api_key_file: Optional[str] = typer.Option(None, help="require one of the keys in this file (one a line)"),
    public_metrics: bool = typer.Option(False, help="serve /metrics without a key"),
    header_timeout: float = typer.Option(10.0, help="seconds a connection has to send a request's head (also "
                                         "the next one's, after a response); then it is closed"),
    body_timeout: float = typer.Option(30.0, help="seconds a request has, after its head, to send its whole "
                                       "body; then 408 (CT416) and the connection is closed"),
    keep_alive_timeout: float = typer.Option(5.0, help="seconds an idle keep-alive connection stays open"),
    max_connections: int = typer.Option(1024, help="open connections at once; past it requests get 503"),
    max_header_bytes: int = typer.Option(64 << 10, help="largest request head in bytes (more: 400)"),
    sim_preset: Optional[str] = typer.Option(None, "--sim-preset", "--preset", help="--backend sim: the simulated "
                                             "GPU x model (cost model and KV pool, ESTIMATES; default "
                                             "h200-r1-distill-qwen-7b; --preset: its old name)"),
    speed: Optional[float] = typer.Option(None, help="--backend sim: engine seconds per wall second (default 1)"),
    policy: Optional[str] = typer.Option(None, help="policy file (certa calibrate) for the served built-in program"),
    self_calibrate: Optional[float] = typer.Option(None, "--self-calibrate", help="sc, cot: explore some requests "
                                                   "to full compute; move the certaindex only once answer change "
                                                   "<= RISK is certified (state on /metrics)"),
) -> None:
    """Serve reasoning programs behind an OpenAI-compatible API with certaindex early exit.

    Example: certa serve --program sc --backend scripted --port 8000
    """
    from certa.runtime.errors import CertaError, ConfigError
    try:
        try:
            _ServeOptions(port=port, max_concurrent=max_concurrent, max_knob=max_knob, max_token_budget=max_token_budget,
                          max_inflight=max_inflight, max_request_seconds=max_request_seconds,
                          shutdown_timeout=shutdown_timeout, answer_format=answer_format,
                          header_timeout=header_timeout, body_timeout=body_timeout,
                          keep_alive_timeout=keep_alive_timeout, max_connections=max_connections,
                          max_header_bytes=max_header_bytes)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None
        sim = {k: v for k, v in (("preset", sim_preset), ("speed", speed)) if v is not None}
        if sim and backend != "sim":
            raise ConfigError("--sim-preset and --speed are options of --backend sim")
        backend_opt = [*backend_opt, *(f"{k}={v}" for k, v in sim.items())]
        program = _calibrated(program, policy, self_calibrate)
        server = _build_server(program, backend, model, url, backend_opt, scheduler, max_concurrent=max_concurrent,
                               max_knob=max_knob, max_token_budget=max_token_budget, max_inflight=max_inflight,
                               max_request_s=max_request_seconds, answer_format=answer_format)
        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        console.print(f"serving [bold]{', '.join(server.models)}[/bold] on http://{host}:{port}/v1 with backend "
                      f"[bold]{type(server.runtime.backend).__name__}[/bold], scheduler [bold]{scheduler}[/bold]")
        from certa.serve.launch import ConnectionLimits, run, security_options
        connections = ConnectionLimits(header_timeout_s=header_timeout, body_timeout_s=body_timeout,
                                       keep_alive_s=keep_alive_timeout, max_connections=max_connections,
                                       max_header_bytes=max_header_bytes)
        run(server, host, port, shutdown_timeout=shutdown_timeout, log_level=log_level, connections=connections,
            **security_options(host, api_key, api_key_file, public_metrics, warn=console.print))
    except (CertaError, OSError) as exc:
        fail(exc, debug)


def _calibrated(programs: List[str], policy: Optional[str], risk: Optional[float]) -> List[Any]:
    """The served programs with a policy file applied (one built-in program) or self-calibrating (sc, cot)."""
    from certa.runtime.errors import ConfigError
    if policy is None and risk is None:
        return programs
    if len(programs) != 1 or (policy is not None and risk is not None):
        raise ConfigError("--policy and --self-calibrate apply to one served program, not both at once")
    if risk is not None:
        from certa.selfcal import SelfCalibrating
        return [SelfCalibrating(programs[0], risk)]
    from certa.cli.run import load_program
    return [load_program(programs[0], policy, None)]


def _build_server(programs: List[Any], backend: str, model: Optional[str], url: Optional[str],
                  backend_opts: List[str], scheduler: str, **limits: Any):
    """The Server ``certa serve`` runs (its Runtime built by :func:`~certa.runtime.build.make_runtime`)."""
    from certa.serve import Server
    from certa.serve.programs import served_programs
    specs = served_programs(programs)  # a file's program is served under its graph's name
    return Server(specs, backend, scheduler=scheduler, model=model, url=url, **limits,
                  **parse_backend_opts(backend_opts))
