"""The ``certa`` command line. Errors print one clear line plus a hint (``--debug`` for tracebacks)."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from typing import Any, Optional

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from rich.console import Console
from rich.table import Table

from certa.algorithms.programs.library import PROGRAMS
from certa.cli_choices import (BACKEND_HELP, PROGRAM_HELP, SCHEDULER_HELP, backend_options, check_backend, make_runtime,
                               registry_epilog)
from certa.cli_errors import error_line, fail
from certa.runtime.backends.registry import BACKENDS
from certa.runtime.errors import CertaError, ConfigError
from certa.runtime.scheduling.policies import POLICIES

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="certa: declarative LLM reasoning programs with certaindex early exit.\n\n"
                       "Example: certa run sc --dataset gsm8k --limit 2 --backend scripted")
console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from certa import __version__
        typer.echo(f"certa {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="print the version and exit")) -> None:
    """certa: declarative LLM reasoning programs with certaindex early exit."""


_fail = fail
_error_line = error_line


@app.command(epilog=registry_epilog(("Programs", PROGRAMS), ("Backends", BACKENDS), ("Schedulers", POLICIES)))
def run(
    target: str = typer.Argument(..., help=PROGRAM_HELP),
    dataset: str = typer.Option("gsm8k", help="gsm8k, math500, aime24, amc23, asdiv, or a .jsonl path"),
    idx: Optional[str] = typer.Option(None, help="problem indices, e.g. 0:20"),
    limit: Optional[int] = typer.Option(None, help="run at most this many problems"),
    backend: str = typer.Option("auto", help=BACKEND_HELP),
    model: Optional[str] = typer.Option(None, help="GGUF path or model name (llamacpp), model path (sglang)"),
    url: Optional[str] = typer.Option(None, help="server URL(s), comma-separated (openai, sglang-http)"),
    policy: Optional[str] = typer.Option(None, help="policy JSON file (e.g. from certa calibrate)"),
    scheduler: str = typer.Option("fcfs", help=SCHEDULER_HELP),
    concurrency: int = typer.Option(4, help="programs in flight at once"),
    journal: Optional[str] = typer.Option(None, help="append results to this JSONL journal"),
    resume: bool = typer.Option(False, help="continue an existing --journal"),
    json_out: Optional[str] = typer.Option(None, "--json", help="write a JSON report here"),
    record: Optional[str] = typer.Option(None, help="also write what ran as reasoning traces (JSONL) here"),
    debug: bool = typer.Option(False, help="show full tracebacks"),
) -> None:
    """Run a program over a dataset and print accuracy, tokens by kind and exit reasons.

    Example: certa run sc --dataset gsm8k --limit 2 --backend scripted
    """
    try:
        _check_run_options(concurrency=concurrency, limit=limit, journal=journal, resume=resume)
        _run(target, dataset, idx, limit, backend, model, url, policy, scheduler, concurrency, journal, resume,
             json_out, record)
    except (CertaError, OSError) as exc:
        _fail(exc, debug)
    except KeyboardInterrupt:  # asyncio.run cancelled the batch: every in-flight request was aborted
        console.print("[yellow]interrupted[/yellow]: in-flight requests were aborted"
                      + (f"; {journal} keeps finished work (rerun with --resume)" if journal else ""))
        raise typer.Exit(130) from None


class _RunOptions(BaseModel):
    """The ``run`` options that typer's types alone do not check."""

    model_config = ConfigDict(extra="forbid")
    concurrency: int = Field(ge=1)
    limit: Optional[int] = Field(default=None, ge=0)
    journal: Optional[str] = None
    resume: bool = False

    @model_validator(mode="after")
    def _resume_needs_journal(self) -> "_RunOptions":
        if self.resume and not self.journal:
            raise ValueError("--resume needs --journal FILE")
        return self


class _PolicyFile(BaseModel):
    """A policy file: a policy object (``{"kind": ...}``) or ``{"policy": {...}, ...}``."""

    model_config = ConfigDict(extra="allow")
    kind: str = Field(min_length=1)


def _check_run_options(**values: Any) -> None:
    try:
        _RunOptions(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = "--" + str(err["loc"][0]).replace("_", "-") + ": " if err["loc"] else ""
        raise ConfigError(f"{name}{err['msg'].removeprefix('Value error, ')}") from None


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


def _load_policy(path: str):
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


def _run(target, dataset, idx, limit, backend, model, url, policy, scheduler, concurrency, journal, resume,
         json_out, record=None) -> None:
    from certa.eval.datasets import load_dataset
    from certa.batch import Journal, exit_if_interrupt_stalls, run_dataset
    from certa.loading import load_target
    from certa.progress import BatchProgress

    check_backend(backend)  # a --backend typo is the error shown, not a missing data directory
    program = load_target(target, _program_options(policy, target) if policy and ".py" not in target else None)
    if policy:
        pol = _load_policy(policy)
        if not hasattr(program, "with_policy"):
            raise ConfigError(f"{target} is not a compiled graph; --policy needs one")
        program = program.with_policy(pol)
    problems = load_dataset(dataset, idx=idx, limit=limit, sample_fallback=_note)
    runtime = make_runtime(backend, model, scheduler, **backend_options(backend, None, url))
    jr = Journal(journal, resume=resume) if journal else None
    console.print(f"running [bold]{target}[/bold] on {len(problems)} {dataset} problems with backend "
                  f"[bold]{type(runtime.backend).__name__}[/bold]")
    from certa.recording import Recorder
    recorder = Recorder.attach(runtime, record) if record else None
    try:
        with BatchProgress(len(problems), console) as progress:
            batch = run_dataset(program, problems, runtime, concurrency=concurrency, journal=jr,
                                on_row=progress.update, record=recorder.on_row if recorder else None)
            report = asyncio.run(exit_if_interrupt_stalls(batch))  # Ctrl-C: the shell is back within seconds
    finally:
        if jr:
            jr.close()
        asyncio.run(runtime.close())
    _print_report(report, detail=len(problems) <= 10)
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump({"target": target, "dataset": dataset, "accuracy": report.accuracy, "n": report.n,
                       "tokens": {k: report.tokens(k) for k in ("main", "probe", "score", "prompt", "total")},
                       "tokens_saved": report.tokens_saved, "exit_reasons": report.exit_reasons(),
                       "rows": report.rows}, f, indent=1)


def _note(text: str) -> None:
    """One unwrapped note line on stderr (e.g. that the bundled sample stands in for the data)."""
    from rich.markup import escape
    console.print(f"[yellow]note[/yellow]: {escape(text)}", soft_wrap=True, highlight=False)


def _print_report(report, detail: bool) -> None:
    out = Console()
    if detail:
        t = Table(title="problems")
        for col in ("idx", "answer", "gold", "ok", "tokens main/probe/score", "exit", "certaindex"):
            t.add_column(col)
        for r in report.rows:
            tk = r["tokens"]
            traj = " ".join(f"{p['value']:.2f}" for p in r["certaindex"][-8:])
            t.add_row(str(r["idx"]), str(r["answer"])[:24], str(r["gold"])[:16], "✓" if r["correct"] else "✗",
                      f"{tk['main']}/{tk['probe']}/{tk['score']}", r["exit_reason"], traj)
        out.print(t)
    s = Table(title="summary")
    s.add_column("metric")
    s.add_column("value")
    s.add_row("problems", str(report.n))
    s.add_row("accuracy", f"{report.accuracy:.3f}")
    for k in ("main", "probe", "score", "prompt"):
        s.add_row(f"tokens {k}", str(report.tokens(k)))
    s.add_row("tokens saved vs cap (est.)", str(report.tokens_saved))
    s.add_row("exit reasons", json.dumps(report.exit_reasons()))
    out.print(s)


def _mount(module: str, name: str, help_text: str) -> None:
    """Mount a sub-app; its own help wins when it carries an example."""
    try:
        sub = importlib.import_module(module)
    except ImportError:
        return
    own = sub.app.info.help
    app.add_typer(sub.app, name=name, help=own if isinstance(own, str) and "Example" in own else help_text)


_mount("certa.cli_models", "models", "Find, assemble and verify model files.\n\nExample: certa models list")
_mount("certa.cli_sim", "sim", "Serving simulator: simulate workloads, fit the cost model.")
try:  # certa calibrate, certa bench tokens, certa traces collect
    from certa import cli_eval as _eval
    app.command("calibrate")(_eval.calibrate)
    app.add_typer(_eval.bench_app, name="bench", help=_eval.BENCH_HELP)
    app.add_typer(_eval.traces_app, name="traces", help=_eval.TRACES_HELP)
except ImportError:  # pragma: no cover
    pass
try:  # certa serve
    from certa.cli_serve import serve as _serve
    app.command("serve", epilog=registry_epilog(("Programs", PROGRAMS), ("Backends", BACKENDS),
                                                ("Schedulers", POLICIES)))(_serve)
except ImportError:  # pragma: no cover
    pass


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Usage errors print one line plus a hint, not a panel or a traceback."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = sys.argv[1:] if argv is None else argv
    try:
        code = app(args, prog_name="certa", standalone_mode=False)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: in-flight requests were aborted; journals keep finished work")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - click usage errors, and bugs without --debug
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):  # click's UsageError / ClickException
            if type(exc).__name__ != "NoArgsIsHelpError":  # (that one has printed the help already)
                ctx = getattr(exc, "ctx", None)
                _error_line(exc.format_message(), f"see '{ctx.command_path} --help'" if ctx is not None else None)
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Abort":
            console.print("[yellow]aborted[/yellow]")
            sys.exit(1)
        if "--debug" in args:
            raise
        _error_line(f"{type(exc).__name__}: {exc}", "rerun with --debug for the full traceback")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
