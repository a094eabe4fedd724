"""The one way a :class:`~certa.runtime.Runtime` is built from options.

``certa run``, ``certa serve`` (:class:`certa.serve.Server`) and the serving simulator build
their Runtime here, so a backend option, a scheduling default or a limit added once applies to
all of them. A Runtime made by hand (``Runtime(backend, scheduler=..., limits=...)``) is the
same object; this function only owns the defaults and the mapping from names to parts:

- ``backend``: a :class:`~certa.runtime.backends.base.Backend`, a registered name, or ``auto``
  (the installed engine, :func:`~certa.runtime.backends.registry.auto_backend`); ``model`` and
  ``url`` go to it as the registry says it takes them (``--model``, ``--url``);
- ``scheduler``: a policy name (``certa`` by default, as the CLI and the server use), a
  :class:`~certa.runtime.scheduling.tickets.SchedulingPolicy`, or a whole
  :class:`~certa.runtime.scheduling.scheduler.Scheduler`; ``max_inflight`` caps the backend
  requests admitted at once (the scheduler orders the rest);
- an option the backend's constructor does not take is a ``ConfigError`` naming it.

Example:
    >>> rt = make_runtime("scripted", scheduler="fcfs", max_inflight=4, responses=["\\\\boxed{4}"])
    >>> type(rt.backend).__name__, rt.scheduler.policy.name, rt.scheduler.limits.max_requests
    ('ScriptedBackend', 'fcfs', 4)
    >>> make_runtime("scripted", bogus=1)
    Traceback (most recent call last):
    ...
    certa.runtime.errors.ConfigError: CT300 config-error: bad option for backend 'scripted': ... (hint: see docs/backends.md)
"""

from __future__ import annotations

from typing import Any

from certa.runtime.backends.base import Backend
from certa.runtime.errors import ConfigError
from certa.runtime.limits import RetryPolicy, RuntimeLimits
from certa.runtime.runtime import Runtime
from certa.runtime.scheduling.scheduler import AdmissionLimits, Scheduler, SchedulingPolicy

__all__ = ["make_runtime"]


def make_runtime(backend: Backend | str = "auto", *, model: str | None = None, url: str | None = None,
                 scheduler: str | SchedulingPolicy | Scheduler = "certa", max_inflight: int | None = None,
                 limits: RuntimeLimits | None = None, retry: RetryPolicy | None = None, seed: int = 0,
                 checkpointer: Any = None, **backend_options: Any) -> Runtime:
    """A Runtime on ``backend`` with one scheduling policy for all its programs (see the module docs)."""
    if isinstance(scheduler, Scheduler):
        if max_inflight is not None:
            raise ConfigError("max_inflight configures a new Scheduler; set it on the Scheduler given")
        sched = scheduler
    else:
        if isinstance(scheduler, str):
            from certa.runtime.scheduling.policies import make_policy
            scheduler = make_policy(scheduler)
        sched = Scheduler(policy=scheduler, limits=AdmissionLimits(max_requests=max_inflight))
    if isinstance(backend, str):
        from certa.runtime.backends.registry import auto_backend, cli_options
        backend = auto_backend() if backend == "auto" else backend
        backend_options = {**backend_options, **cli_options(backend, model, url)}
    elif model or url:
        raise ConfigError("model= and url= configure a backend made by name, not the instance given")
    try:
        return Runtime(backend, scheduler=sched, limits=limits, retry=retry, seed=seed, checkpointer=checkpointer,
                       **backend_options)
    except TypeError as exc:  # an option the backend's constructor does not take
        raise ConfigError(f"bad option for backend {backend!r}: {exc}", hint="see docs/backends.md") from None
