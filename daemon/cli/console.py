"""The rich consoles every command prints through: wrapped to the terminal's width on a terminal, never wrapped
when piped or redirected.

rich wraps at 80 columns when stdout is not a terminal (and ``COLUMNS`` is unset), which breaks what a script
reads: a long path split over two lines, a piped ``conduit sync --dry-run`` that is no longer a valid patch.
rich also takes the width of a terminal on stdin when stdout is piped. Piped, a console here has no width limit
worth the name (``PIPE_WIDTH`` columns), and a unified diff is written as plain text (``print_diff``), byte for byte what ``patch`` and ``git apply`` read.
"""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from conduit.text import one_line

PIPE_WIDTH = 10_000
"""Columns given to a console whose output is not a terminal: no line conduit prints is that long."""


class PipeAwareConsole(Console):
    """A ``Console`` whose width is the terminal's on a terminal and ``PIPE_WIDTH`` when its file is not one
    (decided at each print, so a module-level console follows the stream it writes to now). An explicit
    ``width=`` or ``COLUMNS`` in the environment wins, as in rich."""

    @property
    def size(self) -> ConsoleDimensions:
        """rich's size, with ``PIPE_WIDTH`` columns when the output is not a terminal."""
        dims = super().size
        if self._width is None and "COLUMNS" not in self._environ and not self.is_terminal:
            return ConsoleDimensions(PIPE_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        width, height = new_size
        self._width, self._height = width, height


def make_console(*, stderr: bool = False, file: IO[str] | None = None, **options: Any) -> Console:
    """A ``PipeAwareConsole`` for stdout (or stderr, or ``file``); ``options`` go to ``Console``
    (``highlight`` defaults to False: conduit's output is not source code)."""
    options.setdefault("highlight", False)
    return PipeAwareConsole(stderr=stderr, file=file, **options)


def print_diff(console: Console, diff: str) -> None:
    """Print a unified diff: coloured on a terminal (rich's Syntax, imported here: pygments costs a no-op sync
    ~10 ms), as plain text otherwise (a valid patch: every line as the differ wrote it)."""
    if not console.is_terminal:
        console.file.write(diff if diff.endswith("\n") else diff + "\n")
        console.file.flush()
        return
    from rich.syntax import Syntax

    console.print(Syntax(diff, "diff", theme="ansi_dark", word_wrap=True))


def shown(text: str) -> str:
    """``text`` from another program (a gateway's model id, a server's message) as rich markup that prints it
    verbatim: its ``[`` escaped (``[bold]x[/bold]`` stays as written) and every control or format character
    (ESC, OSC, a zero-width space, a newline) written as ``\\x1b`` / ``\\u200b`` / ``\\n`` by the one sanitizer,
    ``conduit.text.one_line``, so nothing reaches the terminal raw."""
    return escape(one_line(text))


__all__ = ["PIPE_WIDTH", "PipeAwareConsole", "make_console", "print_diff", "shown"]
