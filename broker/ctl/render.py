"""Human output: rich tables on stdout, progress on stderr (never mixed into --json)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

# Piped output keeps whole rows (rich would fold them at 80 columns when there is no terminal).
_PIPE_WIDTH = 200


def console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, width=None if stream.isatty() else _PIPE_WIDTH,
                   highlight=False, soft_wrap=False)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          *, empty: str = "(none)") -> None:
    out = console()
    if not rows:
        if title:
            out.print(f"{title}: {empty}")
        else:
            out.print(empty)
        return
    grid = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for name in columns:
        grid.add_column(name, no_wrap=True, overflow="fold")
    for row in rows:
        grid.add_row(*(cell(v) for v in row))
    out.print(grid)


def pairs(title: str | None, items: Sequence[tuple[str, Any]]) -> None:
    """A two-column key/value block."""
    grid = Table(title=title, title_justify="left", show_header=False, show_edge=False,
                 pad_edge=False, box=None)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(no_wrap=True)
    for key, value in items:
        grid.add_row(key, cell(value))
    console().print(grid)


def line(text: str) -> None:
    console().print(text)


@contextlib.contextmanager
def progress(description: str, total: int | None, *, quiet: bool) -> Iterator[Progress]:
    """A progress bar on stderr for long operations; silent with --json or without a
    terminal (nothing for a script to strip)."""
    err = console(stderr=True)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err, transient=True,
                   disable=quiet or not err.is_terminal)
    with bar:
        bar.add_task(description, total=total)
        yield bar
