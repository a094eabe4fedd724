"""Runtime limits: input caps (RuntimeLimits) and the retry policy for retryable backend errors."""

from __future__ import annotations

import random
from dataclasses import dataclass

from certa.runtime.errors import ConfigError


@dataclass(slots=True)
class RuntimeLimits:
    """Refuse oversized inputs instead of running them (``None`` = no limit)."""

    max_prompt_chars: int | None = 200_000
    max_tokens_per_request: int | None = 32_768
    max_fanout: int | None = 1024
    max_concurrent_programs: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_prompt_chars", "max_tokens_per_request", "max_fanout", "max_concurrent_programs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"RuntimeLimits.{name} must be a positive integer or None, not {value!r}")


@dataclass(slots=True)
class RetryPolicy:
    """Bounded, jittered retries for backend errors marked ``retryable``."""

    max_attempts: int = 3
    base_delay: float = 0.05
    max_delay: float = 1.0

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
