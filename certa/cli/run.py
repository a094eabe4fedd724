"""``certa run``: a program over a dataset, with progress from the first second and a summary.

Registered on the main app by :mod:`certa.cli`. Progress goes to stderr (:mod:`certa.cli.progress`);
the report (problems, summary) to stdout.

Example:
    certa run sc --dataset gsm8k --limit 2 --backend scripted
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from pathlib import Path
from typing import Any, List, Optional

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from rich.console import Console
from rich.table import Table

from certa.cli.options import BACKEND_HELP, PROGRAM_HELP, SCHEDULER_HELP, check_backend, parse_backend_opts
from certa.cli.errors import fail
from certa.runtime.backends.registry import auto_backend
from certa.runtime.build import make_runtime
from certa.runtime.errors import CertaError, ConfigError

__all__ = ["load_policy", "load_program", "run"]

console = Console(stderr=True)


def run(
    target: str = typer.Argument(..., help=PROGRAM_HELP),
    dataset: str = typer.Option("gsm8k", help="gsm8k, math500, aime24, amc23, asdiv, or a .jsonl path"),
    idx: Optional[str] = typer.Option(None, help="problem indices, e.g. 0:20"),
    limit: Optional[int] = typer.Option(None, help="run at most this many problems"),
    backend: str = typer.Option("auto", help=BACKEND_HELP),
    model: Optional[str] = typer.Option(None, help="GGUF path or model name (llamacpp), model path (sglang)"),
    url: Optional[str] = typer.Option(None, help="server URL(s), comma-separated (openai, sglang-http)"),
    threads: Optional[int] = typer.Option(None, help="llama.cpp threads (default: the cores less one, so the "
                                          "machine stays usable; all cores are faster on an idle machine)"),
    backend_opt: List[str] = typer.Option([], "--backend-opt", help="extra backend option KEY=VALUE (VALUE as JSON "
                                          "if it parses), repeatable, e.g. --backend-opt n_seq=8"),
    policy: Optional[str] = typer.Option(None, help="policy JSON file (e.g. from certa calibrate)"),
    cap: Optional[int] = typer.Option(None, help="the program's knob cap (branches, iterations or tokens; "
                                      "built-in programs)"),
    scheduler: str = typer.Option("certa", help=f"{SCHEDULER_HELP}: one policy for every request, certa's by "
                                  "default, as in certa serve"),
    concurrency: int = typer.Option(4, help="programs in flight at once"),
    final: bool = typer.Option(False, "--final", help="allow the reserved test rows (GSM8K idx >= 800, MATH-500 "
                               "idx >= 300): final reports only, never for tuning"),
    journal: Optional[str] = typer.Option(None, help="append results to this JSONL journal"),
    resume: bool = typer.Option(False, help="continue an existing --journal"),
    json_out: Optional[str] = typer.Option(None, "--json", help="write a JSON report here"),
    record: Optional[str] = typer.Option(None, help="also write what ran as reasoning traces (JSONL) here"),
    self_calibrate: Optional[float] = typer.Option(None, "--self-calibrate", help="sc, cot: explore some problems "
                                                   "to full compute and move the certaindex only once answer change "
                                                   "<= RISK is certified (no gold read)"),
    verbose: bool = typer.Option(False, "--verbose", help="show the engine's own log (llama.cpp)"),
    debug: bool = typer.Option(False, help="show full tracebacks"),
) -> None:
    """Run a program over a dataset and print accuracy, tokens by kind and exit reasons.

    Example: certa run sc --dataset gsm8k --limit 2 --backend scripted
    """
    try:
        _RunOptions(concurrency=concurrency, limit=limit, journal=journal, resume=resume, threads=threads, cap=cap)
        _run(target, dataset, idx, limit, backend, model, url, policy, scheduler, concurrency, journal, resume,
             json_out, record, engine=parse_backend_opts(backend_opt), threads=threads, verbose=verbose, cap=cap,
             final=final, self_calibrate=self_calibrate)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    except KeyboardInterrupt:  # asyncio.run cancelled the batch: every in-flight request was aborted
        console.print("[yellow]interrupted[/yellow]: in-flight requests were aborted"
                      + (f"; {journal} keeps finished work (rerun with --resume)" if journal else ""))
        raise typer.Exit(130) from None


class _RunOptions(BaseModel):
    """The ``run`` options that typer's types alone do not check."""

    model_config = ConfigDict(extra="forbid")
    concurrency: int = Field(ge=1)
    limit: Optional[int] = Field(default=None, ge=0)
    threads: Optional[int] = Field(default=None, ge=1)
    cap: Optional[int] = Field(default=None, ge=1)
    journal: Optional[str] = None
    resume: bool = False

    @model_validator(mode="after")
    def _resume_needs_journal(self) -> "_RunOptions":
        if self.resume and not self.journal:
            raise ValueError("--resume needs --journal FILE")
        return self

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = "--" + str(err["loc"][0]).replace("_", "-") + ": " if err["loc"] else ""
            raise ConfigError(f"{name}{err['msg'].removeprefix('Value error, ')}") from None


class _PolicyFile(BaseModel):
    """A policy file: a policy object (``{"kind": ...}``) or ``{"policy": {...}, ...}``."""

    model_config = ConfigDict(extra="allow")
    kind: str = Field(min_length=1)


def _program_options(path: str, target: str) -> dict[str, Any]:
    """A calibrated policy file's ``program`` section as factory options for ``target`` ({} if none)."""
    data = _read_policy_json(path)
    spec = data.get("program") if isinstance(data, dict) and "policy" in data else None
    if not isinstance(spec, dict):
        return {}
    name = spec.get("name")
    if name is not None and name != target:
        raise ConfigError(f"policy file {path} was calibrated for program {name!r}, not {target!r}",
                          hint=f"run it with `certa run {name} --policy {path}`")
    return {k: v for k, v in spec.items() if k != "name"}


def _read_policy_json(path: str) -> Any:
    try:
        return json.loads(open(path, encoding="utf-8").read())
    except (OSError, ValueError, RecursionError) as exc:  # unreadable, not UTF-8, not JSON, nested too deep
        raise ConfigError(f"cannot read policy file {path}: {type(exc).__name__}: {exc}") from None


def load_policy(path: str):
    """The stopping policy in a policy file (``certa calibrate`` writes them)."""
    from certa.algorithms.policies import policy_from_dict
    data = _read_policy_json(path)
    spec = data.get("policy", data) if isinstance(data, dict) else data
    try:
        _PolicyFile.model_validate(spec)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "<root>"
        msg = "expected a JSON object" if err["type"] in ("model_type", "dict_type") else err["msg"]
        raise ConfigError(f"policy file {path}: {where}: {msg}",
                          hint='expected {"kind": "threshold", "tau": 0.5, ...} or {"policy": {...}}') from None
    try:
        return policy_from_dict(spec)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"policy file {path}: {exc}") from None


def load_program(target: str, policy: str | None, cap: int | None, self_calibrate: float | None = None) -> Any:
    """The program ``certa run``/``certa serve`` run: ``target`` with a policy file (its ``program``
    section rebuilds a built-in program), a knob cap, or self-calibrating (:mod:`certa.selfcal`)."""
    from certa.loading import load_target
    if self_calibrate is not None:
        if policy:
            raise ConfigError("--self-calibrate starts from the shipped default; it takes no --policy")
        from certa.selfcal import SelfCalibrating
        return SelfCalibrating(target, self_calibrate, **({"cap": cap} if cap else {}))
    builtin = ".py" not in target
    options = {**(_program_options(policy, target) if policy and builtin else {}), **({"cap": cap} if cap else {})}
    if cap and not builtin:
        raise ConfigError("--cap sets a built-in program's knob cap", hint="set the cap in your graph's Knob")
    program = load_target(target, options or None)
    if policy:
        if not hasattr(program, "with_policy"):
            raise ConfigError(f"{target} is not a compiled graph; --policy needs one")
        program = program.with_policy(load_policy(policy))
    return program


def _model_to_load(model: str | None) -> tuple[str, str, str]:
    """(what to load, its name, the loading phase's text) for the llama.cpp engine, before it loads."""
    from certa.runtime import models
    with warnings.catch_warnings(record=True) as caught:  # the default's fallback: a note, not a warning dump
        warnings.simplefilter("always")
        choice = models.pick(model)
    for w in caught:
        _note(str(w.message).removeprefix("certa: "))
    if isinstance(choice, Path):
        return str(choice), choice.name, f"loading model {choice.name}"
    where = "the cache" if (models.cache_dir() / choice.filename).is_file() else "the installed packages"
    return choice.name, choice.name, f"loading model {choice.name} ({choice.size / 1e9:.1f} GB, from {where})"


def _run(target, dataset, idx, limit, backend, model, url, policy, scheduler, concurrency, journal, resume,
         json_out, record=None, *, engine: dict[str, Any] | None = None, threads: int | None = None,
         verbose: bool = False, cap: int | None = None, final: bool = False,
         self_calibrate: float | None = None) -> None:
    from certa.batch import Journal, exit_if_interrupt_stalls, run_dataset
    from certa.eval.datasets import load_dataset
    from certa.cli.progress import RunProgress
    from certa.recording import Recorder

    check_backend(backend)  # a --backend typo is the error shown, not a missing data directory
    engine = dict(engine or {})
    program = load_program(target, policy, cap, self_calibrate)
    problems = load_dataset(dataset, idx=idx, limit=limit, sample_fallback=_note, allow_reserved=final,
                            allow_with="--final")
    backend = auto_backend() if backend == "auto" else backend  # named now: the header and the summary show it
    name, loading = (backend, f"starting backend {backend}")
    if backend == "llamacpp":
        engine.update({"verbose": verbose, **({"n_threads": threads} if threads else {})})
        model, name, loading = _model_to_load(model)
    elif threads:
        raise ConfigError(f"--threads sets the llama.cpp engine's threads; --backend {backend} has none",
                          hint="pass a backend's own options with --backend-opt KEY=VALUE")
    jr = Journal(journal, resume=resume) if journal else None
    console.print(f"running [bold]{target}[/bold] on {len(problems)} {dataset} problems with backend "
                  f"[bold]{backend}[/bold], scheduler [bold]{scheduler}[/bold]", highlight=False)
    t0 = time.monotonic()
    runtime = None
    try:
        with RunProgress(len(problems), console) as progress:
            progress.phase(loading)
            runtime = make_runtime(backend, model=model, url=url, scheduler=scheduler, **engine)
            recorder = Recorder.attach(runtime, record) if record else None
            progress.watch(runtime)
            batch = run_dataset(program, problems, runtime, concurrency=concurrency, journal=jr,
                                on_row=progress.update, record=recorder.on_row if recorder else None)
            report = asyncio.run(exit_if_interrupt_stalls(batch))  # Ctrl-C: the shell is back within seconds
    finally:
        if jr:
            jr.close()
        if runtime is not None:
            asyncio.run(runtime.close())
    about = {"model": name, "program": target, "policy": _policy_text(program), "backend": backend,
             "scheduler": scheduler, "dataset": dataset, "wall_s": round(time.monotonic() - t0, 1),
             "first_answer_s": None if progress.first_answer_s is None else round(progress.first_answer_s, 1),
             "self_calibration": program.snapshot() if self_calibrate is not None else None}
    _print_report(report, about, detail=len(problems) <= 10)
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump({"target": target, "dataset": dataset, **about, "accuracy": report.accuracy, "n": report.n,
                       "tokens": {k: report.tokens(k) for k in ("main", "probe", "score", "prompt", "total")},
                       "tokens_saved": report.tokens_saved, "exit_reasons": report.exit_reasons(),
                       "rows": report.rows}, f, indent=1)


def _policy_text(program: Any) -> str:
    policy = getattr(program, "policy", None)
    spec = policy.to_dict() if hasattr(policy, "to_dict") else None
    if not isinstance(spec, dict):
        return type(policy).__name__ if policy is not None else "-"
    args = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "kind")
    return f"{spec.get('kind')}({args})"


def _note(text: str) -> None:
    """One unwrapped note line on stderr (e.g. that the bundled sample stands in for the data)."""
    from rich.markup import escape
    console.print(f"[yellow]note[/yellow]: {escape(text)}", soft_wrap=True, highlight=False)


def _print_report(report, about: dict[str, Any], detail: bool) -> None:
    out = Console()
    if detail:
        t = Table(title="problems")
        for col in ("idx", "answer", "gold", "ok", "tokens main/probe/score", "exit", "certaindex"):
            t.add_column(col)
        for r in report.rows:
            tk = r["tokens"]
            traj = " ".join(f"{p['value']:.2f}" for p in r["certaindex"][-8:])
            ok = "-" if r["correct"] is None else "✓" if r["correct"] else "✗"
            t.add_row(str(r["idx"]), str(r["answer"])[:24], str(r["gold"])[:16], ok,
                      f"{tk['main']}/{tk['probe']}/{tk['score']}", r["exit_reason"], traj)
        out.print(t)
    out.print(_summary_table(report, about))


def _summary_table(report, about: dict[str, Any]) -> Table:
    s = Table(title="summary")
    s.add_column("metric", no_wrap=True)
    s.add_column("value")
    for key in ("model", "program", "policy", "backend", "scheduler"):
        s.add_row(key, str(about[key]))
    first = about.get("first_answer_s")
    s.add_row("wall time", f"{about['wall_s']:.1f} s" + (f" (first answer after {first:.1f} s)" if first is not None else ""))
    s.add_row("problems", str(report.n))
    graded = sum(r.get("correct") is not None for r in report.rows)
    s.add_row("accuracy", f"{report.accuracy:.3f} ({sum(bool(r.get('correct')) for r in report.rows)}/{graded})"
              if graded else "- (no gold answers)")
    spent = report.tokens("main") + report.tokens("probe") + report.tokens("score")
    for k in ("main", "probe", "score", "prompt"):
        s.add_row(f"tokens {k}", str(report.tokens(k)))
    s.add_row("tokens spent (decoded)", f"{spent:,}")
    saved, budget = report.tokens_saved, spent + report.tokens_saved
    s.add_row("tokens saved (est.)", f"{saved:,} of a full budget of {budget:,} ({saved / budget:.0%})"
              if budget else str(saved))
    s.add_row("exit reasons", json.dumps(report.exit_reasons()))
    cal = about.get("self_calibration")
    if cal:
        state = "certified" if cal["certified"] else "not yet certified: the shipped default"
        rate = "n/a" if cal["change_rate"] is None else f"{cal['change_rate']:.3f}"
        s.add_row("self-calibration", f"{cal['setting']} ({state}; risk {cal['risk']:g}), change rate {rate} on "
                  f"{cal['explored']} explored, explore cost {cal['explore_cost_tokens']:,.0f} tokens "
                  f"({cal['explore_cost_share']:.1%})")
    return s

