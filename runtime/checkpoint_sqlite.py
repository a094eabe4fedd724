"""SqliteCheckpointer: a thread's checkpoints in a SQLite file (stdlib ``sqlite3``), one row per step.

Each :meth:`~certa.runtime.checkpoint.Checkpointer.put` is its own transaction, committed
with ``synchronous=FULL`` in WAL mode before the runtime goes on: a process killed at any
moment (SIGKILL included) leaves every completed step's row, and the next run of the
thread, in this process or another, resumes from the newest. Other processes may read the
file while a run writes it (WAL).

Example:
    >>> import pathlib, tempfile
    >>> from certa.runtime.checkpoint import Checkpoint
    >>> saver = SqliteCheckpointer(pathlib.Path(tempfile.mkdtemp()) / "threads.db")
    >>> saver.put(Checkpoint("t1", 0, "demo", "input", None, None, "running", '{"n": 1}'))
    >>> SqliteCheckpointer(saver.path).latest("t1").state
    {'n': 1}
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from certa.runtime.checkpoint import COLUMNS, Checkpoint, Checkpointer, next_index_error
from certa.runtime.errors import CheckpointError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    program TEXT NOT NULL,
    source TEXT NOT NULL,
    step TEXT,
    branch INTEGER,
    status TEXT NOT NULL,
    state TEXT NOT NULL,
    knob_used INTEGER NOT NULL,
    tokens TEXT NOT NULL,
    next TEXT NOT NULL,
    data TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (thread_id, idx)
)
"""
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM checkpoints"


class SqliteCheckpointer(Checkpointer):
    """Checkpoints in the SQLite file ``path`` (created if missing; ``":memory:"`` works too).

    Safe to share between threads of one process (one connection behind a lock).
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        self.path = os.fspath(path)
        try:
            self._conn = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot open the checkpoint database {self.path!r}: {exc}") from exc
        self._lock = threading.Lock()

    def _insert(self, row: dict[str, Any]) -> None:
        tid = row["thread_id"]
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    (top,) = self._conn.execute("SELECT MAX(idx) FROM checkpoints WHERE thread_id = ?",
                                                (tid,)).fetchone()
                    expected = 0 if top is None else top + 1
                    if row["idx"] != expected:
                        raise next_index_error(tid, row["idx"], expected)
                    self._conn.execute(f"INSERT INTO checkpoints ({', '.join(COLUMNS)}) "
                                       f"VALUES ({', '.join('?' * len(COLUMNS))})", [row[c] for c in COLUMNS])
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise CheckpointError(f"cannot save checkpoint {row['idx']} of thread {tid!r} to {self.path!r}: "
                                      f"{exc}", program=row["program"], step=row["step"], branch=row["branch"]) from exc

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise CheckpointError(f"cannot read the checkpoint database {self.path!r}: {exc}") from exc

    def history(self, thread_id: str, *, limit: int | None = None) -> list[Checkpoint]:
        rows = self._query(f"{_SELECT} WHERE thread_id = ? ORDER BY idx DESC LIMIT ?",
                           (thread_id, -1 if limit is None else limit))
        return [Checkpoint.from_row(r) for r in rows]

    def threads(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id", ())]

    def delete(self, thread_id: str) -> None:
        self._query("DELETE FROM checkpoints WHERE thread_id = ?", (thread_id,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"SqliteCheckpointer({self.path!r})"


__all__ = ["SqliteCheckpointer"]
