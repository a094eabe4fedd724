"""A rich progress bar for batch runs: programs done, tokens, accuracy so far, tokens saved."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class BatchProgress:
    """Context manager; call ``update(row)`` for each finished program."""

    def __init__(self, total: int, console: Console | None = None) -> None:
        self.progress = Progress(TextColumn("[bold]programs"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.total = total
        self.correct = 0
        self.graded = 0
        self.tokens = 0
        self.saved = 0
        self.task = None

    def __enter__(self) -> "BatchProgress":
        self.progress.__enter__()
        self.task = self.progress.add_task("run", total=self.total, stats="")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, row: dict[str, Any]) -> None:
        self.tokens += row["tokens"]["total"]
        self.saved += row.get("tokens_saved", 0)
        if row.get("correct") is not None:
            self.graded += 1
            self.correct += bool(row["correct"])
        acc = f"{self.correct / self.graded:.2f}" if self.graded else "-"
        self.progress.update(self.task, advance=1,
                             stats=f"acc {acc}  tokens {self.tokens}  saved≈{self.saved}")
