r"""The in-process reasoning server: one Runtime and one Scheduler shared by every request.

:class:`Server` is the whole server without HTTP (the ASGI app in :mod:`certa.serve.http`
is a thin layer over it). Each request runs a fresh program on its question; all programs
share one :class:`~certa.runtime.Runtime`, so its scheduler (default ``certa``: gang +
shortest-job-first + aging) orders every backend request of every request. Cancelling a
request — a cancelled ``complete``, a closed ``stream`` — aborts that program's in-flight
backend requests.

Example (the scripted fake backend; in a notebook just ``await``):
    >>> import asyncio
    >>> from certa.runtime import ScriptedBackend
    >>> async def main():
    ...     async with Server("sc", ScriptedBackend(responses=["so \\boxed{18}."])) as server:
    ...         c = await server.complete("What is 9 * 2?", knob_cap=8)
    ...         events = [e async for e in server.stream("What is 9 * 2?")]
    ...         return c.content, c.exit_reason, c.usage()["completion_tokens"] > 0, type(events[-1]).__name__
    >>> asyncio.run(main())
    ('\\boxed{18}', 'certaindex', True, 'Completion')
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from certa.runtime.backends.base import Backend
from certa.runtime.errors import ConfigError, LimitExceededError
from certa.runtime.events import Event
from certa.runtime.policy import Policy
from certa.runtime.limits import RuntimeLimits
from certa.runtime.result import Result
from certa.runtime.build import make_runtime
from certa.runtime.runtime import Runtime
from certa.runtime.scheduling.scheduler import SchedulingPolicy

from certa.serve.completion import Completion
from certa.serve.errors import ServerBusyError, ShuttingDownError, TimeLimitError, UnknownModelError
from certa.serve.metrics import ServeMetrics
from certa.serve.programs import ServedProgram
from certa.serve.schemas import CertaOptions, check_limits, parse_request
from certa.serve.stream import CompletionStream, Job

__all__ = ["CompletionStream", "Server"]

log = logging.getLogger("certa.serve")


class Server:
    """Serve reasoning programs with certaindex early exit, in process.

    Args:
        program: what to serve: a built-in name (``sc``, ``cot``, ``mcts``, ``rebase``,
            ``sc-mcts``), ``FILE.py:attr``, a compiled graph or Program class, or a
            ``{model_name: spec}`` mapping to serve several (the first is the default).
        backend: a :class:`~certa.runtime.Backend` or a backend name (``backend_options`` go to it;
            ``model``/``url`` as ``certa serve --model/--url``); required, as for a Runtime.
        scheduler: scheduling policy name (``certa``, ``fcfs``, ``lpm``, ``app-fifo``,
            ``certa-nocd``) or a :class:`SchedulingPolicy`.
        max_concurrent: programs running at once; more are refused (:class:`ServerBusyError`).
        max_knob: the largest ``knob_cap`` a request may ask for; also caps programs' defaults.
        max_token_budget: the largest decode-token budget (a request's ``max_tokens``) a request
            may ask for, and the default budget (``max_tokens=`` is its old, deprecated name).
        max_inflight: backend requests admitted at once (the scheduler queues and orders the
            rest: this is where scheduling pays off); None = no limit.
        answer_format: ``boxed`` (``\boxed{18}``) or ``plain`` — the default for requests.
        max_request_s: wall-time limit of one request, in seconds: a program still running then
            is aborted with its backend requests, and its caller gets :class:`TimeLimitError`
            (CT415; ``certa serve --max-request-seconds``, default 600); None = no limit.
        runtime: an existing Runtime to share (then ``backend``/``scheduler`` are not used).
    """

    def __init__(self, program: Any = "sc", backend: Backend | str | None = None, *,
                 scheduler: str | SchedulingPolicy = "certa", max_concurrent: int | None = None,
                 max_knob: int | None = None, max_token_budget: int | None = None, max_inflight: int | None = None,
                 answer_format: str = "boxed", limits: RuntimeLimits | None = None, runtime: Runtime | None = None,
                 max_request_s: float | None = None, **backend_options: Any) -> None:
        if "max_tokens" in backend_options:  # the old name: max_tokens means a request's budget only
            warnings.warn("Server(max_tokens=) is now max_token_budget=", DeprecationWarning, stacklevel=2)
            max_token_budget = backend_options.pop("max_tokens")
        for name, value in (("max_concurrent", max_concurrent), ("max_knob", max_knob),
                            ("max_token_budget", max_token_budget), ("max_inflight", max_inflight)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a positive integer or None, not {value!r}")
        if max_request_s is not None and (isinstance(max_request_s, bool) or not isinstance(max_request_s, (int, float))
                                          or not math.isfinite(max_request_s) or max_request_s <= 0):
            raise ConfigError(f"max_request_s must be a positive number of seconds or None, not {max_request_s!r}")
        if answer_format not in ("boxed", "plain"):
            raise ConfigError(f"answer_format must be 'boxed' or 'plain', not {answer_format!r}")
        specs = program.items() if isinstance(program, Mapping) else [(None, program)]
        self.programs: dict[str, ServedProgram] = {}
        for name, spec in specs:
            sp = ServedProgram.resolve(spec, name)
            self.programs[sp.name] = sp
        self._owns_backend = runtime is None and isinstance(backend, str)  # made here: closed at shutdown
        if runtime is None:
            runtime = make_runtime(backend, scheduler=scheduler, max_inflight=max_inflight, limits=limits,
                                   **backend_options)
        elif backend_options or max_inflight is not None or limits is not None:
            raise ConfigError("backend options, max_inflight and limits configure a new Runtime; "
                              "they cannot apply to the runtime= given")
        self.runtime = runtime
        self.max_concurrent, self.max_knob, self.max_token_budget = max_concurrent, max_knob, max_token_budget
        self.answer_format, self.max_request_s = answer_format, max_request_s
        self.started = time.time()
        self.stats = ServeMetrics(live=self._live)
        self._jobs: set[Job] = set()
        self._watch: dict[str, asyncio.Event] = {}
        self._unsubscribe: Any = None
        self._closing = False
        self._closed = False

    # ---- public API -----------------------------------------------------------------
    @property
    def models(self) -> list[str]:
        """Model names requests may ask for (the first is the default)."""
        return list(self.programs)

    @property
    def running(self) -> int:
        """Requests admitted and not yet finished."""
        return len(self._jobs)

    @property
    def closing(self) -> bool:
        return self._closing

    async def complete(self, question: str, **overrides: Any) -> Completion:
        """Run the program on ``question`` and return its :class:`Completion`.

        ``overrides``: ``model``, ``request_id``, ``max_tokens``, ``seed`` and the
        :class:`~certa.serve.schemas.CertaOptions` fields (``policy`` — a dict or a Policy —,
        ``knob_cap``, ``preset``, ``deadline_s``, ``answer_format``), or ``certa=`` a
        CertaOptions already validated (the HTTP layer's). Raises a CertaError (see
        :mod:`certa.serve.errors`) for a bad request or a failed program.
        """
        job = self._prepare(question, overrides)
        self.launch(job)
        assert job.task is not None
        try:
            result = await job.task
        except asyncio.CancelledError:
            self.end(job, None)
            cancelling = getattr(asyncio.current_task(), "cancelling", None)  # Python >= 3.11
            caller_cancelled = cancelling() > 0 if cancelling is not None else not self._closing
            if job.task.cancelled() and not caller_cancelled:
                raise ShuttingDownError("the server shut down before the program finished",
                                        program=job.program.program_id) from None
            raise
        except BaseException:
            self.end(job, None)
            raise
        return self.conclude(job, result)

    def stream(self, question: str, *, heartbeat_s: float | None = None, **overrides: Any) -> CompletionStream:
        """Run the program on ``question``, yielding :class:`Progress` updates then the Completion.

        Validation and admission happen here (errors raise at once). Use ``async with`` (or
        call ``aclose``) so leaving early aborts the program. ``heartbeat_s``: yield a
        :class:`Heartbeat` after that many seconds without news.
        """
        progress = overrides.pop("progress", None)
        job = self._prepare(question, overrides)
        return CompletionStream(self, job, progress=True if progress is None else progress, heartbeat_s=heartbeat_s)

    def metrics(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot: programs, tokens by kind, tokens saved, SLOs, queue depth."""
        return self.stats.snapshot()

    def prometheus(self) -> str:
        """The metrics in Prometheus text format (what ``/metrics`` serves)."""
        return self.stats.render()

    def _live(self) -> dict[str, Any]:
        """What the metrics read at scrape time (:data:`certa.serve.metrics.Live`)."""
        sched = self.runtime.scheduler
        try:
            inflight = len(self.runtime.backend.live_rids())
        except Exception:  # noqa: BLE001 - a backend that cannot tell still gets metrics
            inflight = sched.inflight
        live: dict[str, Any] = {"running": self.running, "queue_depth": sched.queue_depth,
                                "inflight_requests": inflight,
                                "info": {"models": ",".join(self.models), "scheduler": getattr(sched.policy, "name", "?"),
                                         "backend": type(self.runtime.backend).__name__}}
        calibrating = {name: sp.target.snapshot() for name, sp in self.programs.items()
                       if callable(getattr(type(sp.target), "snapshot", None))}  # certa.selfcal.SelfCalibrating
        if calibrating:
            live["self_calibration"] = calibrating
        backend_metrics = getattr(self.runtime.backend, "metrics", None)  # HTTP backends: aborts, failovers
        if callable(backend_metrics):
            try:
                live["backend"] = {k: int(v) for k, v in backend_metrics().items()}
            except Exception:  # noqa: BLE001 - a backend's counters never break the server's metrics
                pass
        return live

    async def drain(self, timeout: float = 30.0) -> None:
        """Refuse new requests; let running programs finish for up to ``timeout`` seconds, then
        abort the rest (their backend requests too). Their callers get :class:`ShuttingDownError`."""
        self._closing = True
        pending = [j.task for j in self._jobs if j.task is not None and not j.task.done()]
        if pending and timeout > 0:
            log.info("shutdown: refusing new requests; %d program(s) running get %.1fs to finish", len(pending), timeout)
            await asyncio.wait(pending, timeout=timeout)
        late = [j.task for j in self._jobs if j.task is not None and not j.task.done()]
        for t in late:
            t.cancel()
        if late:
            log.warning("shutdown: aborted %d unfinished program(s) after %.1fs", len(late), timeout)
            await asyncio.gather(*late, return_exceptions=True)

    async def shutdown(self, timeout: float = 30.0) -> None:
        """:meth:`drain`, then close the backend if it was given by name. Idempotent."""
        await self.drain(timeout)
        if self._owns_backend and not self._closed:
            self._closed = True
            await self.runtime.close()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    # ---- a job's life: what complete() and a CompletionStream drive ----------------
    def launch(self, job: Job) -> None:
        """Start ``job``'s program (its task: ``job.task``); refused once the server is closing."""
        if self._closing:
            self.end(job, None)
            raise ShuttingDownError("the server is shutting down")
        job.task = asyncio.ensure_future(self._run(job.program))

    def conclude(self, job: Job, result: Result) -> Completion:
        """Record ``job`` as finished with ``result`` and return its Completion (or raise its error)."""
        latency = self.end(job, result)
        if result.error is not None:
            raise result.error
        return Completion.from_result(result, request_id=job.request_id, model=job.model,
                                      answer_format=job.answer_format, latency_s=latency, deadline_s=job.deadline_s)

    def end(self, job: Job, result: Result | None) -> float:
        """Record a finished (or cancelled: ``result`` None) job once; returns its latency."""
        latency = time.perf_counter() - job.t0
        if job.ended:
            return latency
        job.ended = True
        self._jobs.discard(job)
        prog = job.program
        self._watch.pop(prog.program_id, None)
        if not self._watch and self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        reason = result.exit_reason if result is not None else "cancelled"
        tokens = prog.tokens.as_dict()
        self.stats.finished(reason, tokens, tokens_saved=result.tokens_saved if result else 0, latency_s=latency,
                            deadline_s=job.deadline_s)
        log.info("request_id=%s model=%s program=%s exit=%s tokens=%d/%d/%d prompt=%d latency=%.3fs%s",
                 job.request_id, job.model, prog.program_id or "-", reason, tokens["main"], tokens["probe"],
                 tokens["score"], tokens["prompt"], latency,
                 f" error={result.error.code if hasattr(result.error, 'code') else type(result.error).__name__}"
                 if result is not None and result.error is not None else "")
        return latency

    def watch(self, program_id: str, wake: asyncio.Event) -> None:
        """Set ``wake`` at each certaindex event of ``program_id`` (until its job ends)."""
        if self._unsubscribe is None:
            self._unsubscribe = self.runtime.events.subscribe(self._on_event)
        self._watch[program_id] = wake

    # ---- internals ------------------------------------------------------------------
    def _prepare(self, question: str, overrides: dict[str, Any]) -> Job:
        """Validate a request and admit it (sync, so admission cannot race)."""
        try:
            job = self._build(question, dict(overrides))
        except Exception as exc:
            self.stats.rejected(_reject_reason(exc))
            raise
        self._jobs.add(job)
        self.stats.admitted()
        return job

    def _build(self, question: str, o: dict[str, Any]) -> Job:
        if self._closing:
            raise ShuttingDownError("the server is shutting down")
        model = o.pop("model", None) or self.models[0]
        request_id = o.pop("request_id", None) or uuid.uuid4().hex
        max_tokens, seed = o.pop("max_tokens", None), o.pop("seed", None)
        opts = o.pop("certa", None)
        if opts is None:  # the in-process API: CertaOptions' fields as keywords
            if isinstance(o.get("policy"), Policy):
                o["policy"] = o["policy"].to_dict()
            opts = parse_request(CertaOptions, o, prefix="certa.")
        elif not isinstance(opts, CertaOptions) or o:
            raise ConfigError("certa= takes a CertaOptions (the HTTP layer's, validated once), without its fields "
                              f"as keywords beside it: {sorted(o)}")
        sp = self.programs.get(model)
        if sp is None:
            raise UnknownModelError(f"model {model!r} is not served here", hint=f"models: {', '.join(self.models)}")
        if not isinstance(question, str) or not question.strip():
            raise ConfigError("the question is empty")
        limit = self.runtime.limits.max_prompt_chars
        if limit is not None and len(question) > limit:
            raise LimitExceededError(f"the question has {len(question)} chars, over the limit of {limit}")
        check_limits(opts, max_knob=self.max_knob, max_token_budget=self.max_token_budget)  # cap, policy fields
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise ConfigError(f"max_tokens must be a positive integer, not {max_tokens!r}")
        if max_tokens is not None and self.max_token_budget is not None and max_tokens > self.max_token_budget:
            raise LimitExceededError(f"max_tokens={max_tokens} is over this server's limit of {self.max_token_budget} "
                                     "(--max-token-budget)")
        knob_cap = opts.knob_cap
        default_cap = sp.default_knob.cap
        if knob_cap is None and self.max_knob is not None and (default_cap is None or default_cap > self.max_knob):
            knob_cap = self.max_knob
        prog = sp.instantiate(question, preset=opts.preset, policy=opts.policy, knob_cap=knob_cap,
                              max_tokens=max_tokens or self.max_token_budget, seed=seed)
        if self.max_concurrent is not None and len(self._jobs) >= self.max_concurrent:
            mean = self.stats.mean_latency_s or 1.0
            n = len(self._jobs)
            raise ServerBusyError(f"{n} program{'s are' if n != 1 else ' is'} running, the limit is "
                                  f"{self.max_concurrent} (--max-concurrent)",
                                  retry_after_s=max(1, min(60, math.ceil(mean))))
        return Job(request_id, sp.name, prog, opts.answer_format or self.answer_format, opts.deadline_s)

    async def _run(self, program: Any) -> Result:
        """Run one request's program, aborting it at ``max_request_s`` (a Result with a CT415 error)."""
        limit = self.max_request_s
        if limit is None:
            return await self.runtime.run(program, return_errors=True)
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()  # the runtime aborts the program's backend requests as it unwinds

        timer = asyncio.get_running_loop().call_later(limit, expire)
        try:
            return await self.runtime.run(program, return_errors=True)
        except asyncio.CancelledError:
            uncancel = getattr(task, "uncancel", None)  # Python >= 3.11: was it only our cancel?
            if not expired or (uncancel is not None and uncancel() > 0):
                raise
            err = TimeLimitError(f"the program ran past this server's limit of {limit:g}s (--max-request-seconds) "
                                 "and was aborted", program=program.program_id)
            return Result.unfinished(program, "time_limit", err, limit)
        finally:
            timer.cancel()

    def _on_event(self, ev: Event) -> None:
        if ev.kind == "certaindex":
            wake = self._watch.get(ev.program_id)
            if wake is not None:
                wake.set()


def _reject_reason(exc: BaseException) -> str:
    return {"ServerBusyError": "busy", "ShuttingDownError": "shutting_down",
            "UnknownModelError": "unknown_model", "LimitExceededError": "over_limit"}.get(type(exc).__name__,
                                                                                          "bad_request")
