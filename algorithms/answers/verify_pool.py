"""A lazy pool of math-verify worker processes with a timeout that works anywhere.

math-verify's own timeouts use ``signal.alarm``, which raises off the main thread, and
sympy can run for minutes on inputs such as ``9^{9^{9}}``. So certa runs
``verify(parse(gold), parse(pred))`` with math-verify's timeouts off in worker processes
and enforces its own: a worker that does not answer in time is killed and replaced later.

Workers are plain ``subprocess`` children (``python -c <script>``) speaking JSON lines
over pipes, not ``multiprocessing`` spawn/forkserver children: those re-import the parent's
``__main__`` (breaking unguarded scripts and notebooks) and cannot be started from a
daemonic process. A subprocess works from any thread of any process, imports nothing of
certa, and exits by itself when its parent goes away (stdin reaches EOF).

The pool starts on the first call, is rebuilt after ``fork()``, and is stopped by
:func:`shutdown` (registered with ``atexit``).
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
import warnings

POOL_SIZE = max(2, min(4, (os.cpu_count() or 2) // 2))
STARTUP_TIMEOUT = 60.0

_WORKER_SCRIPT = r"""
import json, logging, sys
out, sys.stdout = sys.stdout, sys.stderr
logging.disable(logging.WARNING)
try:
    from math_verify import parse, verify
except Exception as e:
    out.write(json.dumps({"ready": False, "error": repr(e)}) + "\n"); out.flush()
    raise SystemExit(0)
out.write('{"ready": true}\n'); out.flush()
for line in sys.stdin:
    rid = None
    try:
        req = json.loads(line); rid = req["id"]
        g = parse(req["gold"], parsing_timeout=None)
        p = parse(req["pred"], parsing_timeout=None)
        res = {"id": rid, "ok": bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=None))}
    except Exception as e:
        res = {"id": rid, "ok": False, "error": type(e).__name__}
    out.write(json.dumps(res) + "\n"); out.flush()
"""


class _Worker:
    """One worker process plus a thread that turns its stdout into a queue of lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_SCRIPT],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, encoding="utf-8", bufsize=1, close_fds=True,
            start_new_session=(os.name == "posix"),  # Ctrl-C goes to the parent only
        )
        self.lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._read, name="certa-verify-reader", daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        self.lines.put(None)

    def send(self, obj: dict) -> bool:
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            return True
        except (OSError, ValueError):
            return False

    def recv(self, timeout: float) -> dict | None:
        """The next message, or ``None`` on timeout, EOF or garbage."""
        try:
            line = self.lines.get(timeout=max(timeout, 0.001))
        except queue.Empty:
            return None
        if line is None:
            return None
        try:
            msg = json.loads(line)
        except ValueError:
            return None
        return msg if isinstance(msg, dict) else None

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except Exception:
                pass


class _Pool:
    def __init__(self, size: int) -> None:
        self.size = size
        self.pid = os.getpid()
        self.idle: list[_Worker] = []
        self.alive = 0
        self.closed = False
        self.unavailable = False
        self.cond = threading.Condition()
        self.ids = itertools.count()
        self.started = False  # a worker has come up at least once

    def _acquire(self, deadline: float) -> _Worker | None | bool:
        """An idle worker; False when ``deadline`` passes first; None when math-verify is unusable.

        Workers start in a background thread, so a caller never waits past its deadline for
        one to come up (it becomes idle for later calls instead).
        """
        with self.cond:
            while True:
                if self.closed or self.unavailable:
                    return None
                if self.idle:
                    return self.idle.pop()
                if self.alive < self.size:
                    self.alive += 1
                    threading.Thread(target=self._start_worker, name="certa-verify-start", daemon=True).start()
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)

    def _start_worker(self) -> None:
        try:
            worker = _Worker()
        except OSError as exc:
            self._give_up(f"cannot start a math-verify worker ({exc}); using fast paths only")
            return
        ready = worker.recv(STARTUP_TIMEOUT)
        if ready is not None and ready.get("ready") is True:
            self.started = True
            self._release(worker, healthy=True)
            return
        worker.kill()
        if ready is not None:  # the worker could not import math-verify
            self._give_up(f"math-verify is not importable in workers ({ready.get('error')})")
        else:
            with self.cond:
                self.alive -= 1
                self.cond.notify()

    def _give_up(self, why: str) -> None:
        warnings.warn(why, RuntimeWarning, stacklevel=4)
        with self.cond:
            self.unavailable = True
            self.alive -= 1
            self.cond.notify_all()

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self.cond:
            keep = healthy and not self.closed
            if keep:
                self.idle.append(worker)
            else:
                self.alive -= 1
            self.cond.notify()
        if not keep:
            worker.kill()

    def verify(self, gold: str, pred: str, timeout: float) -> bool | None:
        now = time.monotonic()
        deadline = now + timeout
        # the very first call also waits for the pool to start (a one-time ~1 s; see warm_up)
        cold = not self.started
        worker = self._acquire(max(deadline, now + STARTUP_TIMEOUT) if cold else deadline)
        if cold:
            deadline = time.monotonic() + timeout  # startup waited for is not the comparison's time
        if worker is None:
            return None if self.unavailable else False
        if worker is False:  # no worker free in time: the call times out like a slow one
            return False
        rid = next(self.ids)
        if not worker.send({"id": rid, "gold": gold, "pred": pred}):
            self._release(worker, healthy=False)
            return False
        reply = worker.recv(deadline - time.monotonic())
        if reply is None or reply.get("id") != rid:
            self._release(worker, healthy=False)  # hung, crashed or confused: kill it
            return False
        self._release(worker, healthy=True)
        return bool(reply.get("ok"))

    def close(self) -> None:
        with self.cond:
            self.closed = True
            idle, self.idle = self.idle, []
            self.alive -= len(idle)
            self.cond.notify_all()
        for worker in idle:
            worker.kill()


_pool: _Pool | None = None
_pool_lock = threading.Lock()
_atexit_registered = False


def available() -> bool:
    """Whether math-verify can be imported (checked without importing it here)."""
    try:
        return importlib.util.find_spec("math_verify") is not None
    except (ImportError, ValueError):
        return False


def verify(gold: str, pred: str, *, timeout: float) -> bool | None:
    """``verify(parse(gold), parse(pred))`` in a worker; ``None`` if math-verify is missing.

    A timeout, a crash or an error in the worker mean ``False``.
    """
    global _pool, _atexit_registered
    if not available():
        return None
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():  # first use, or we were forked
            _pool = _Pool(POOL_SIZE)
            if not _atexit_registered:
                atexit.register(shutdown)
                _atexit_registered = True
        pool = _pool
    return pool.verify(gold, pred, timeout)


def warm_up() -> bool:
    """Start one worker now (so the first real call does not pay ~1 s); False if unavailable."""
    return verify("\\boxed{1}", "\\boxed{1}", timeout=STARTUP_TIMEOUT) is True


def shutdown() -> None:
    """Stop every worker; the next :func:`verify` starts a fresh pool."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None and pool.pid == os.getpid():
        pool.close()
