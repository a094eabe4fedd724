"""The ``certa`` command line. Errors print one clear line plus a hint (``--debug`` for tracebacks)."""

from __future__ import annotations

import importlib
import os
import sys

import typer

from certa.algorithms.programs.library import PROGRAMS
from certa.cli.options import registry_epilog
from certa.cli.errors import console, error_line
from certa.cli.run import run as _run_command
from certa.runtime.backends.registry import BACKENDS
from certa.runtime.scheduling.policies import POLICIES

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="certa: declarative LLM reasoning programs with certaindex early exit.\n\n"
                       "Example: certa run sc --dataset gsm8k --limit 2 --backend scripted")


def _print_version(value: bool) -> None:
    if value:
        from certa import __version__
        typer.echo(f"certa {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="print the version and exit")) -> None:
    """certa: declarative LLM reasoning programs with certaindex early exit."""


app.command("run", epilog=registry_epilog(("Programs", PROGRAMS), ("Backends", BACKENDS),
                                         ("Schedulers", POLICIES)))(_run_command)


def _mount(module: str, name: str, help_text: str) -> None:
    """Mount a sub-app; its own help wins when it carries an example."""
    try:
        sub = importlib.import_module(module)
    except ImportError:
        return
    own = sub.app.info.help
    app.add_typer(sub.app, name=name, help=own if isinstance(own, str) and "Example" in own else help_text)


_mount("certa.cli.models", "models", "Find, assemble and verify model files.\n\nExample: certa models list")
_mount("certa.cli.sim", "sim", "Serving simulator: simulate workloads, fit the cost model.")
try:  # certa calibrate, certa bench tokens, certa traces collect
    from certa.cli import eval as _eval
    app.command("calibrate")(_eval.calibrate)
    app.add_typer(_eval.bench_app, name="bench", help=_eval.BENCH_HELP)
    app.add_typer(_eval.traces_app, name="traces", help=_eval.TRACES_HELP)
except ImportError:  # pragma: no cover
    pass
try:  # certa serve
    from certa.cli.serve import serve as _serve
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
                error_line(exc.format_message(), f"see '{ctx.command_path} --help'" if ctx is not None else None)
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Abort":
            console.print("[yellow]aborted[/yellow]")
            sys.exit(1)
        if "--debug" in args:
            raise
        error_line(f"{type(exc).__name__}: {exc}", "rerun with --debug for the full traceback")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
