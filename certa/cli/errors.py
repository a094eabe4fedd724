"""How every certa command reports an error: one line, an optional hint, exit code 2."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from certa.runtime.errors import CertaError

console = Console(stderr=True)


def error_line(message: str, hint: str | None = None) -> None:
    """Print ``error ...`` on one line (never wrapped) and an optional ``hint:`` line, to stderr."""
    console.print("[red]error[/red] " + escape(" ".join(message.split())), soft_wrap=True)
    if hint:
        console.print("  hint: " + escape(" ".join(hint.split())), soft_wrap=True)


def fail(exc: BaseException, debug: bool = False) -> None:
    """Report ``exc`` as one line (a certa error with its code and location) and exit 2.

    ``debug=True`` re-raises instead, for the full traceback.
    """
    if debug:
        raise exc
    if isinstance(exc, CertaError):  # escape: "[program=sc step=x]" is not rich markup
        error_line(f"{exc.code} {exc.name}{exc.where()}: {exc.message}", exc.hint)
    else:
        error_line(f"{type(exc).__name__}: {exc}", "rerun with --debug for the full traceback")
    raise typer.Exit(2)
