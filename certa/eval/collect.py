r"""Collect reasoning traces with a real engine: SC samples plus CoT probe answers, resumable.

For each problem all ``samples`` are issued at once (the engine batches them): the first
``probe_samples`` as native sequences grown ``interval`` tokens at a time and probed after
each chunk (``seq.probe(probe_text, probe_tokens)``, exact KV rollback, so the probed chain
is token-identical to an unprobed one), the rest as plain requests. Sampling matches
:func:`~certa.algorithms.programs.self_consistency.sc_program` (the ``math_cot`` prompt in the chat
template, T=0.7, sample ``i`` seeded ``seed * 100_000 + i``), so a live SC run with the same
seed samples from the same distribution with the same seeds (not token for token: batched
llama.cpp decoding is not bit-reproducible across batch shapes).

Each finished problem is one trace line (the DESIGN.md format, plus ``dataset``, sampling
settings and per sample ``seed``/``finish_reason``, per probe its continuation ``text``,
decode ``tokens``, ``prompt_tokens``, ``chars`` (length of the chain's text when probed) and,
where the engine gives them, ``logprobs`` of the greedy probe tokens; and, where the engine gives
token logprobs (``capabilities.logprobs``), per sample its ``mean_logprob`` and
``min_window_logprob``, the lowest mean over ``logprob_window`` consecutive tokens: DeepConf's
confidence, read by the SC vote policies), written and fsynced before the next problem
starts. :class:`TraceFile` makes a rerun continue a killed one: it cuts a torn last line and
skips every idx already in the file, so nothing is lost or duplicated. Reserved splits
(GSM8K idx >= 800, MATH-500 idx >= 300) are refused.

Example:
    >>> import asyncio, tempfile, os
    >>> from certa.runtime.backends.testing.scripted import ScriptedBackend
    >>> from certa.eval.datasets import Problem
    >>> out = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> make = lambda: ScriptedBackend(responses=["step " * 40 + "so \\boxed{4}"], probe=lambda t, s: "4} \\]")
    >>> rep = asyncio.run(collect_traces([Problem("gsm8k", 0, "2+2?", "4")], out, make,
    ...                                  CollectConfig(samples=3, probe_samples=1, interval=16)))
    >>> rep.written, [s["correct"] for s in TraceFile(out).rows[0]["samples"]]
    (1, [True, True, True])
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from certa.runtime.durable import append_synced, fsync_dir
from certa.runtime.backends.base import Backend, probe_kwargs
from certa.eval.errors import DatasetError, TraceFormatError
from certa.runtime.errors import ConfigError
from certa.eval.traces import parse_trace_line
from certa.runtime.types import GenRequest, GenResult

from certa.algorithms.answers import extract_answer, extract_probe_answer
from certa.eval.datasets import RESERVED_FROM, Problem
from certa.algorithms.answers.equivalence import grade
from certa.algorithms.prompts import probe_text, prompt
from certa.algorithms.signals.votes import sample_confidence

__all__ = ["CollectConfig", "CollectReport", "TraceFile", "collect_problem", "collect_traces"]


@dataclass(frozen=True)
class CollectConfig:
    """What to collect per problem (defaults: the issue's GSM8K setting)."""

    samples: int = 16
    probe_samples: int = 4
    interval: int = 32
    max_tokens: int = 512
    seed: int = 0
    temperature: float = 0.7
    top_p: float = 1.0
    probe_tokens: int = 20
    family: str = "default"  # probe template family
    logprob_window: int = 32  # tokens per window of a sample's min_window_logprob

    def __post_init__(self) -> None:
        if min(self.samples, self.interval, self.max_tokens, self.probe_tokens, self.logprob_window) < 1:
            raise ConfigError("samples, probe interval, max tokens, probe tokens and logprob window must be >= 1")
        if not 0 <= self.probe_samples <= self.samples:
            raise ConfigError(f"--probe-samples must be between 0 and --samples ({self.samples}), "
                              f"got {self.probe_samples}")


@dataclass
class CollectReport:
    written: int = 0
    skipped: int = 0
    wall_s: float = 0.0
    idx: list[int] = field(default_factory=list)


class TraceFile:
    """An append-only trace file that survives kills: one fsynced line per finished problem.

    Opening it validates every line, cuts a torn tail (the last line, cut short by a kill)
    and remembers the idx already collected. A bad line *before* good ones is corruption:
    TraceFormatError.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = []
        self.done: set[str] = set()
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        good_end, pos, torn = 0, 0, None
        for no, raw in enumerate(data.splitlines(keepends=True), 1):
            pos += len(raw)
            if not raw.strip():
                good_end = pos if torn is None else good_end
                continue
            try:
                if not raw.endswith(b"\n"):
                    raise TraceFormatError("line not terminated")
                parse_trace_line(raw.decode("utf-8"), where=f"{self.path.name}:{no}")
                row = json.loads(raw)
            except (TraceFormatError, UnicodeDecodeError):
                torn = torn or no
                continue
            if torn is not None:
                raise TraceFormatError(f"{self.path.name}:{torn}: not a trace line, and complete lines follow it",
                                       hint="the trace file is corrupt; move it aside and collect again")
            self.rows.append(row)
            self.done.add(str(row["idx"]))
            good_end = pos
        if good_end < len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())

    def append(self, row: dict[str, Any]) -> None:
        """Write one problem as one line, then flush and fsync (a new file's directory too)."""
        created = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            append_synced(fh, row)
        if created:
            fsync_dir(self.path.parent)
        self.rows.append(row)
        self.done.add(str(row["idx"]))


def _check_reserved(problems: Sequence[Problem]) -> None:
    for p in problems:
        cut = RESERVED_FROM.get(p.dataset)
        if cut is not None and p.idx >= cut:
            raise DatasetError(f"{p.dataset} idx >= {cut} is the reserved test split (asked for {p.idx})",
                               hint=f"collect development traces only (idx < {cut})")


async def _graded(text: str, finish: str, problem: Problem) -> dict[str, Any]:
    pred = extract_answer(text, problem.dataset) or ""
    correct = bool(pred) and await asyncio.to_thread(grade, pred, problem.gold, problem.dataset)
    return {"finished": finish == "stop", "pred": pred, "correct": bool(correct), "text": text}


async def collect_problem(backend: Backend, problem: Problem, cfg: CollectConfig, *, model: str = "") -> dict[str, Any]:
    """All samples of one problem, concurrently; returns its trace line (a dict)."""
    question = prompt("math_cot", question=problem.question)
    probe = probe_text(cfg.family)
    pid = f"collect-{problem.dataset}-{problem.idx}"
    logprobs = 1 if getattr(backend.capabilities, "logprobs", False) else 0

    def request(i: int) -> GenRequest:
        return GenRequest(prompt=question, max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                          seed=cfg.seed * 100_000 + i, rid=f"{pid}-s{i}", program_id=pid, branch=i, chat=True,
                          prefix_hint=pid, logprobs=logprobs)

    async def plain(i: int) -> dict[str, Any]:
        out: GenResult = await backend.generate(request(i))
        return {"tokens": out.tokens, **await _graded(out.text, out.finish_reason, problem),
                "seed": cfg.seed * 100_000 + i, "finish_reason": out.finish_reason,
                **_confidence(out.token_logprobs, out.tokens, cfg)}

    async def probed(i: int) -> dict[str, Any]:
        seq = await backend.open_sequence(request(i))
        probes: list[dict[str, Any]] = []
        lps: list[float] | None = []
        try:
            while not seq.finished and seq.tokens < cfg.max_tokens:
                chunk = await seq.extend(cfg.interval)
                lps = None if lps is None or chunk.token_logprobs is None else lps + list(chunk.token_logprobs)
                if seq.finished:
                    break
                p = await seq.probe(probe, cfg.probe_tokens, **probe_kwargs(seq, close_brace=True))
                row = {"at": seq.tokens, "answer": extract_probe_answer(p.text), "text": p.text,
                       "tokens": p.tokens, "prompt_tokens": p.prompt_tokens, "chars": len(seq.text)}
                if p.token_logprobs is not None:
                    row["logprobs"] = [round(x, 4) for x in p.token_logprobs]
                probes.append(row)
        finally:
            await seq.close()
        finish = seq.finish_reason or ("length" if seq.tokens >= cfg.max_tokens else "stop")
        return {"tokens": seq.tokens, **await _graded(seq.text, finish, problem), "seed": cfg.seed * 100_000 + i,
                "finish_reason": finish, **_confidence(lps, seq.tokens, cfg), "probes": probes}

    t0 = time.perf_counter()
    samples = await asyncio.gather(*(probed(i) if i < cfg.probe_samples else plain(i) for i in range(cfg.samples)))
    settings = {k: v for k, v in asdict(cfg).items() if k not in ("interval", "samples")}
    return {"idx": problem.idx, "gold": problem.gold, "model": model, "interval": cfg.interval,
            "dataset": problem.dataset, **settings, "wall_s": round(time.perf_counter() - t0, 2),
            "samples": list(samples)}


def _confidence(logprobs: Sequence[float] | None, tokens: int, cfg: CollectConfig) -> dict[str, float]:
    """A sample's token confidence fields, when the engine gave one logprob per generated token."""
    if not logprobs or len(logprobs) != tokens:
        return {}
    return sample_confidence(logprobs, cfg.logprob_window)


def _model_name(backend: Backend) -> str:
    path = getattr(backend, "model_path", None)
    return Path(path).name if path else backend.capabilities.name


async def collect_traces(problems: Sequence[Problem], out: str | os.PathLike[str],
                         backend_factory: Callable[[], Backend], cfg: CollectConfig = CollectConfig(), *,
                         on_problem: Callable[[dict[str, Any]], None] | None = None) -> CollectReport:
    """Collect every problem not yet in ``out``, one fsynced line each; resumable after a kill.

    ``backend_factory`` builds the engine (only if something is left to collect).
    Refuses a file collected with another model or probe interval.
    """
    _check_reserved(problems)
    trace = TraceFile(out)
    todo = [p for p in problems if str(p.idx) not in trace.done]
    report = CollectReport(skipped=len(problems) - len(todo))
    if not todo:
        return report
    t0 = time.perf_counter()
    backend = backend_factory()
    try:
        model = _model_name(backend)
        for row in trace.rows[:1]:
            if row.get("model") != model or row.get("interval") != cfg.interval:
                raise ConfigError(f"{trace.path} holds traces of model {row.get('model')!r} with interval "
                                  f"{row.get('interval')}; this run is {model!r} with interval {cfg.interval}",
                                  hint="collect into another file")
        for p in todo:
            row = await collect_problem(backend, p, cfg, model=model)
            trace.append(row)
            report.written += 1
            report.idx.append(p.idx)
            if on_problem is not None:
                on_problem(row)
    finally:
        await backend.close()
    report.wall_s = time.perf_counter() - t0
    return report
