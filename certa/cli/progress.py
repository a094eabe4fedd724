"""What ``certa run`` shows while it works, from its first second.

A status line names the phase — loading the model, warming up (until the first token is
decoded), then the problems: done and running of n, tokens decoded so far, elapsed time — and
each finished problem gets a line of its own: its answer against the gold one, tokens, and why
it stopped. In a terminal the status line is a live spinner (``rich``); elsewhere (a pipe, a CI
log) the phases and problems are plain lines, with the status repeated every ``heartbeat_s``
seconds while nothing else is printed.

Example (no terminal: plain lines):
    >>> import io
    >>> from rich.console import Console
    >>> out = io.StringIO()
    >>> with RunProgress(2, Console(file=out, width=100), heartbeat_s=0) as p:
    ...     p.phase("loading model m")
    ...     p.update({"idx": 0, "answer": "18", "gold": "18", "correct": True, "exit_reason": "certaindex",
    ...               "knob_used": 3, "knob_cap": 16, "tokens": {"total": 600}, "wall_s": 41.0})
    >>> print(out.getvalue().strip())
    loading model m
    [1/2] idx 0: 18 ✓ (gold 18) · 600 tokens · certaindex exit at 3/16 · 41 s
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner

__all__ = ["RunProgress", "live_tokens", "problem_line"]


def live_tokens(runtime: Any) -> int:
    """Tokens decoded so far: the engine's own count where it keeps one (llama.cpp counts each
    token as it is sampled), else what the runtime has counted for finished requests."""
    stats = getattr(runtime.backend, "stats", None)
    if callable(stats):
        try:
            counts = stats()
            return int(sum(counts.get(k, 0) for k in ("main", "probe", "score")))
        except Exception:  # noqa: BLE001 - a backend whose stats fail: fall back to the runtime's count
            pass
    return sum(p.tokens.total for pid, p in list(runtime.active_programs.items()) if "/" not in pid)


def problem_line(row: dict[str, Any], done: int, total: int) -> str:
    """``[i/n] idx 0: 18 ✓ (gold 18) · 600 tokens · certaindex exit at 3/16 · 41 s``."""
    mark = "" if row.get("correct") is None else (" ✓" if row["correct"] else " ✗")
    gold = "" if row.get("gold") is None else f" (gold {row['gold']})"
    answer = str(row.get("answer"))[:40]
    knob = f" at {row.get('knob_used')}/{row.get('knob_cap')}" if row.get("knob_cap") else ""
    wall = f" · {row['wall_s']:.0f} s" if isinstance(row.get("wall_s"), (int, float)) else ""
    return (f"[{done}/{total}] idx {row.get('idx')}: {answer}{mark}{gold} · {row['tokens']['total']:,} tokens · "
            f"{row.get('exit_reason')} exit{knob}{wall}")


class RunProgress:
    """Context manager: :meth:`phase` names what is happening, :meth:`watch` starts counting a
    runtime's tokens, :meth:`update` reports each finished problem (a batch row).

    Args:
        total: problems in the run.
        console: where to draw (stderr in the CLI); ``console.is_terminal`` picks live or plain.
        heartbeat_s: plain mode: repeat the status line after this many quiet seconds.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, total: int, console: Console, *, heartbeat_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.console, self.heartbeat_s, self.clock = total, console, heartbeat_s, clock
        self.started = clock()
        self.done = self.correct = self.graded = self.row_tokens = 0
        self.first_answer_s: float | None = None
        self._phase = "starting"
        self._runtime: Any = None
        self._warm = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_line = self.started
        self._spinner = Spinner("dots", text="")
        self._live: Live | None = None
        self._beat: threading.Thread | None = None

    # ---- what the caller tells --------------------------------------------------------
    def phase(self, text: str) -> None:
        """A new phase (``loading model …``): printed, and the status line shows it with the time."""
        with self._lock:
            self._phase = text
        self._print(escape(text))

    def watch(self, runtime: Any) -> None:
        """Count ``runtime``'s tokens from now on; the phase is "warming up" until the first one."""
        self._runtime = runtime
        self.phase(f"warming up: the first prompt of {self.total} problem{'s' * (self.total != 1)}")

    def update(self, row: dict[str, Any]) -> None:
        """One problem finished (a row of :func:`certa.batch.run_dataset`)."""
        with self._lock:
            self.done += 1
            self.row_tokens += row["tokens"]["total"]
            if row.get("correct") is not None:
                self.graded += 1
                self.correct += bool(row["correct"])
            if self.first_answer_s is None:
                self.first_answer_s = self.clock() - self.started
            line = problem_line(row, self.done, self.total)
        self._print(escape(line))

    # ---- what it shows ----------------------------------------------------------------
    def status(self) -> str:
        """The status line: phase (or problems done/running), tokens so far, elapsed."""
        elapsed = self.clock() - self.started
        clock = f"{int(elapsed // 60)}:{int(elapsed % 60):02d}"
        tokens = self._tokens()
        with self._lock:
            if tokens and self._runtime is not None and not self._warm:
                self._warm = True
            if not self._warm and not self.done:
                return f"{self._phase} · {clock}"
            running = self._running()
            acc = f" ({self.correct} ✓ of {self.graded} graded)" if self.graded else ""
            return (f"problems: {self.done} done{acc}, {running} running of {self.total} · "
                    f"{tokens:,} tokens so far · {clock}")

    def _tokens(self) -> int:
        if self._runtime is None:
            return 0
        try:
            return max(live_tokens(self._runtime), self.row_tokens)
        except Exception:  # noqa: BLE001 - the status line must never break the run
            return self.row_tokens

    def _running(self) -> int:
        try:
            return sum("/" not in pid for pid in list(self._runtime.active_programs))
        except Exception:  # noqa: BLE001
            return 0

    def _print(self, text: str) -> None:
        self._last_line = self.clock()
        self.console.print(text, soft_wrap=True, highlight=False)
        if self._live is not None:
            self._live.refresh()  # the status line under it, up to date at once

    def _render(self) -> Spinner:
        self._spinner.update(text=escape(self.status()))
        return self._spinner

    def _heartbeat(self) -> None:
        while not self._stop.wait(1.0):
            if self.clock() - self._last_line >= self.heartbeat_s:
                self._print("… " + escape(self.status()))

    # ---- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> "RunProgress":
        if self.console.is_terminal:
            self._live = Live(console=self.console, get_renderable=self._render, refresh_per_second=8,
                              transient=True, redirect_stdout=False)
            self._live.__enter__()
        elif self.heartbeat_s > 0:
            self._beat = threading.Thread(target=self._heartbeat, name="certa-progress", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
        if self._beat is not None:
            self._beat.join(timeout=2.0)
