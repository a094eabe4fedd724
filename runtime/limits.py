"""Runtime limits: input caps (RuntimeLimits) and the retry policy for retryable backend errors."""

from __future__ import annotations

import random
from dataclasses import dataclass

from certa.runtime.errors import ConfigError


@dataclass(slots=True)
class RuntimeLimits:
    """Refuse oversized inputs and bound the work one program may do (``None`` = no limit).

    Inputs: ``max_prompt_chars``, ``max_tokens_per_request``, ``max_fanout`` (CT205);
    ``max_concurrent_programs`` caps ``run_many``. Work: ``max_call_depth`` — sub-programs
    (``ctx.call``) nested deeper are refused (CT206, naming the chain of program ids);
    ``max_steps`` — ``execute()`` calls per program, one per finished branch of a graph (CT207,
    naming program and step): a loop bounded only by a certaindex that never fires stops there;
    ``request_timeout`` — seconds one backend request (a generation, a score, a chunk or a
    probe of a sequence, opening a sequence) may take once sent (CT208; the request is aborted).
    """

    max_prompt_chars: int | None = 200_000
    max_tokens_per_request: int | None = 32_768
    max_fanout: int | None = 1024
    max_concurrent_programs: int | None = None
    max_call_depth: int | None = 32
    max_steps: int | None = 10_000
    request_timeout: float | None = 600.0

    def __post_init__(self) -> None:
        for name in ("max_prompt_chars", "max_tokens_per_request", "max_fanout", "max_concurrent_programs",
                     "max_call_depth", "max_steps"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"RuntimeLimits.{name} must be a positive integer or None, not {value!r}")
        t = self.request_timeout
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf")):
            raise ConfigError(f"RuntimeLimits.request_timeout must be a positive number of seconds or None, not {t!r}")


@dataclass(slots=True)
class RetryPolicy:
    """Bounded, jittered retries for backend errors marked ``retryable``.

    ``retry_timeouts``: retry a request that hit ``RuntimeLimits.request_timeout`` (CT208).
    Off by default: each attempt may cost the whole timeout again, and a backend that never
    answers would hold the program for ``max_attempts`` timeouts instead of one.
    """

    max_attempts: int = 3
    base_delay: float = 0.05
    max_delay: float = 1.0
    retry_timeouts: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigError(f"RetryPolicy.max_attempts must be an integer >= 1, not {self.max_attempts!r}")
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ConfigError(f"RetryPolicy.{name} must be a finite number >= 0, not {value!r}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        return min(self.max_delay, self.base_delay * 2 ** attempt) * (0.5 + rng.random())


__all__ = ["RetryPolicy", "RuntimeLimits"]
