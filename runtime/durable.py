"""Durable JSONL appends: each line is flushed and fsynced before the call returns.

Used by every journal (``certa run --journal``, ``certa traces collect``) so a SIGKILL
loses at most the line being written.

Example:
    >>> import json, pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "j.jsonl"
    >>> with open(p, "a", encoding="utf-8") as fh:
    ...     append_synced(fh, {"idx": 1})
    >>> json.loads(p.read_text())
    {'idx': 1}
"""

from __future__ import annotations

import json
import os
from typing import IO, Any


def append_synced(fh: IO[str], row: dict[str, Any]) -> None:
    """Write ``row`` as one JSON line, flush and fsync it."""
    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so a newly created file's entry survives a crash (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
