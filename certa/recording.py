r"""``certa run --record FILE``: write what a run generated as reasoning traces (the trace format).

A :class:`Recorder` taps the runtime's backend (:class:`RecordingBackend`, a transparent
proxy) and keeps, per program, every completed main-kind generation (a *sample*) and every
live sequence with the probes taken on it (a *probed sample*). When a problem of a
``run_dataset`` batch finishes (``record=``, called before the journal stores its row, so a
kill between the two reruns the problem on resume and no trace is lost), the recorder writes
its trace line — ``idx``, ``gold``, ``model``,
``interval`` (probe spacing, None without probes), ``dataset`` and the samples with
``tokens``, ``finished``, ``pred``, ``correct``, ``text``, ``seed`` (and ``probes`` with
``at``, ``answer``, ``text``, ``tokens``, ``prompt_tokens``) — fsynced, one line per problem
(:class:`~certa.eval.collect.TraceFile`: a rerun skips problems already recorded).

What is recorded is what ran: samples an early exit cancelled are absent and an early-exited
CoT chain ends where it stopped. Record with a full-budget policy (``--policy`` with
``{"kind": "even", "cap": N}``) to get traces for calibration.

Example:
    >>> import asyncio, os, tempfile
    >>> from certa.runtime import Runtime, ScriptedBackend
    >>> from certa.algorithms.programs.self_consistency import sc_program
    >>> from certa.eval.datasets import Problem
    >>> from certa.batch import run_dataset
    >>> rt = Runtime(ScriptedBackend(responses=["so \\boxed{4}"]))
    >>> path = os.path.join(tempfile.mkdtemp(), "rec.jsonl")
    >>> rec = Recorder.attach(rt, path)
    >>> _ = asyncio.run(run_dataset(sc_program(cap=4), [Problem("gsm8k", 0, "2+2?", "4")], rt, record=rec.on_row))
    >>> rec.written, [s["pred"] for s in rec.file.rows[0]["samples"]]
    (1, ['4', '4', '4', '4'])
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from certa.algorithms.answers import extract_answer, extract_probe_answer
from certa.eval.collect import TraceFile
from certa.algorithms.answers.equivalence import grade
from certa.runtime.backends.base import Backend, BackendSequence
from certa.runtime.runtime import Runtime
from certa.runtime.types import GenRequest, GenResult, ScoreRequest, ScoreResult

__all__ = ["Recorder", "RecordingBackend"]


class _Tape:
    """What one sample produced (a generation, or a sequence and its probes)."""

    def __init__(self, req: GenRequest) -> None:
        self.seed, self.text, self.tokens, self.finish = req.seed, "", 0, None
        self.probes: list[dict[str, Any]] | None = None


class RecordingSequence(BackendSequence):
    """Forwards to the wrapped sequence and notes its chunks and probes on a tape."""

    def __init__(self, inner: BackendSequence, tape: _Tape) -> None:
        super().__init__(inner.req)
        self.inner, self.tape = inner, tape
        tape.probes = []

    def _sync(self) -> None:
        for name in ("text", "tokens", "finished", "finish_reason", "prompt_tokens"):
            setattr(self, name, getattr(self.inner, name))
        tape, inner = self.tape, self.inner
        tape.text, tape.tokens, tape.finish = inner.text, inner.tokens, inner.finish_reason

    async def extend(self, max_new_tokens: int) -> GenResult:
        out = await self.inner.extend(max_new_tokens)
        self._sync()
        return out

    async def probe(self, suffix: str, max_tokens: int = 20, *, rid: str = "") -> GenResult:
        out = await self.inner.probe(suffix, max_tokens, rid=rid)
        if out.finish_reason != "abort" and self.tape.probes is not None:
            self.tape.probes.append({"at": self.inner.tokens, "answer": extract_probe_answer(out.text),
                                     "text": out.text, "tokens": out.tokens, "prompt_tokens": out.prompt_tokens})
        return out

    async def close(self) -> None:
        self._sync()
        await self.inner.close()


class RecordingBackend(Backend):
    """A transparent proxy that records completed main generations and sequences per program."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.tapes: dict[str, list[_Tape]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:  # model_path, stats, ... of the wrapped engine
        return getattr(self.inner, name)

    @staticmethod
    def _program(req: GenRequest) -> str:
        return req.program_id.split("/")[0]  # sub-programs record under their top-level program

    async def generate(self, req: GenRequest) -> GenResult:
        out = await self.inner.generate(req)
        if req.kind == "main" and out.finish_reason != "abort":
            tape = _Tape(req)
            tape.text, tape.tokens, tape.finish = out.text, out.tokens, out.finish_reason
            self.tapes[self._program(req)].append(tape)
        return out

    async def open_sequence(self, req: GenRequest) -> BackendSequence:
        tape = _Tape(req)
        self.tapes[self._program(req)].append(tape)
        return RecordingSequence(await self.inner.open_sequence(req), tape)

    async def score(self, req: ScoreRequest) -> ScoreResult:
        return await self.inner.score(req)

    async def abort(self, rid: str) -> bool:
        return await self.inner.abort(rid)

    def live_rids(self) -> set[str]:
        return self.inner.live_rids()

    async def close(self) -> None:
        await self.inner.close()


class Recorder:
    """Writes one trace line per finished problem of a ``run_dataset`` batch."""

    def __init__(self, backend: RecordingBackend, path: str | os.PathLike[str]) -> None:
        self.backend, self.file, self.written = backend, TraceFile(path), 0
        path_attr = getattr(backend.inner, "model_path", None)
        self.model = Path(path_attr).name if path_attr else backend.capabilities.name

    @classmethod
    def attach(cls, runtime: Runtime, path: str | os.PathLike[str]) -> "Recorder":
        """Wrap ``runtime``'s backend (before any program runs) and record into ``path``."""
        backend = RecordingBackend(runtime.backend)
        runtime.backend = backend
        return cls(backend, path)

    def chain(self, then: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
        """An ``on_row`` callback that records, then calls ``then``."""
        def on_row(row: dict[str, Any]) -> None:
            self.on_row(row)
            if then is not None:
                then(row)
        return on_row

    def on_row(self, row: dict[str, Any]) -> None:
        tapes = self.backend.tapes.pop(str(row.get("program_id", "")).split("/")[0], None)
        if not tapes or str(row["idx"]) in self.file.done:
            return  # resumed from a journal (nothing ran), or recorded before
        dataset = row.get("dataset") or "math"
        samples = [self._sample(t, row.get("gold"), dataset) for t in tapes if t.tokens or t.finish]
        if not samples:
            return
        ats = [p["at"] for s in samples for p in s.get("probes", []) if p["at"] > 0]
        self.file.append({"idx": row["idx"], "gold": row.get("gold"), "model": self.model,
                          "interval": math.gcd(*ats) if ats else None, "dataset": dataset,
                          "program": row.get("name"), "samples": samples})
        self.written += 1

    @staticmethod
    def _sample(tape: _Tape, gold: Any, dataset: str) -> dict[str, Any]:
        pred = extract_answer(tape.text, dataset) or ""
        correct = bool(pred) and gold is not None and bool(grade(pred, str(gold), dataset))
        out = {"tokens": tape.tokens, "finished": tape.finish == "stop", "pred": pred, "correct": correct,
               "text": tape.text, "seed": tape.seed, "finish_reason": tape.finish}
        if tape.probes is not None:
            out["probes"] = tape.probes
        return out
