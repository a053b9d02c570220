"""Writing backups back: each chosen ``Backup`` goes through the one writer, as any other change does.

A text backup becomes a ``TextTarget`` whose render returns the backed-up text; a SQLite backup becomes a
``SqliteTarget`` that makes each table hold the backup's rows again, inside the writer's transaction. The
writer therefore takes a backup of the current state first, so a restore can be undone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import quote

from conduit.adapters.base import SqliteTarget, TextTarget
from conduit.adapters.writer.apply import Writer
from conduit.adapters.writer.results import Backup, BackupSink
from conduit.adapters.writer.snapshot import whole_text_problem
from conduit.errors import ToolFileError


def write_back(store: BackupSink, tool: str, chosen: Sequence[Backup]) -> list[Path]:
    """Write each of ``chosen`` back to its original path through a ``Writer`` over ``store``.

    Returns:
        The original paths written back (unchanged ones included).

    Raises:
        ToolFileError: a file could not be written (the message names it; that file is unchanged), or a text
            backup is no restore point (blank, or not a whole file of its format: taken while another program
            was half-way through saving); then nothing is written.
    """
    writer = Writer(store)
    restored: list[Path] = []
    texts = {b.id: _whole_text(b) for b in chosen if b.kind != "sqlite"}
    for b in chosen:
        target: TextTarget | SqliteTarget
        if b.kind == "sqlite":
            target = SqliteTarget(path=b.path, apply=_sqlite_restorer(b), label=f"restore {b.id}")
        else:
            target = TextTarget(path=b.path, render=_constant(texts[b.id]), mode=b.mode, create=True,
                                label=f"restore {b.id}", merge=False)
        result = writer.apply(tool, target)
        if result.error:
            raise ToolFileError(result.error)
        restored.append(b.path)
    return restored


def _whole_text(backup: Backup) -> str:
    """The text of a text backup. Raises ToolFileError when it is no restore point: blank, not UTF-8, or not a
    whole file of its format (``conduit.adapters.writer.snapshot.whole_text_problem``)."""
    data = backup.file.read_bytes()
    problem = whole_text_problem(backup.path, data)
    if problem is not None:
        raise ToolFileError(
            f"backup {backup.id} of {backup.path} is no restore point: {problem}",
            hint=f"it was taken while another program was saving the file; pick another with "
            f"`conduit restore {backup.tool} --list`. Nothing was restored",
        )
    return data.decode("utf-8")


def _constant(text: str) -> Callable[[str | None], str]:
    """A ``TextTarget.render`` that ignores the current content and returns ``text``."""

    def render(_current: str | None) -> str:
        return text

    return render


def _sqlite_restorer(backup: Backup) -> Callable[[sqlite3.Connection, bool], list[str]]:
    """An ``SqliteTarget.apply`` that makes each table of ``backup`` hold the backup's rows again.

    Works row by row inside the writer's transaction (a ``Connection.backup`` into a connection in a
    transaction is refused), so the live database keeps its file, journal mode and tables the backup lacks.
    """

    def apply(conn: sqlite3.Connection, dry_run: bool) -> list[str]:
        src = sqlite3.connect(f"file:{quote(str(backup.file))}?mode=ro", uri=True)
        lines: list[str] = []
        try:
            tables = [
                r[0]
                for r in src.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            ]
            for table in tables:
                q = '"' + table.replace('"', '""') + '"'
                cols = [r[1] for r in src.execute(f"PRAGMA table_info({q})")]
                col_list = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
                old = src.execute(f"SELECT {col_list} FROM {q}").fetchall()
                try:
                    cur = conn.execute(f"SELECT {col_list} FROM main.{q}").fetchall()
                except sqlite3.OperationalError as err:
                    raise ToolFileError(
                        f"{backup.path}: table {table} no longer matches the backup ({err})",
                        hint="the tool changed its schema since the backup; restore by hand from "
                        + str(backup.file),
                    ) from None
                if sorted(map(repr, cur)) == sorted(map(repr, old)):
                    continue
                conn.execute(f"DELETE FROM main.{q}")
                marks = ", ".join("?" for _ in cols)
                conn.executemany(f"INSERT INTO main.{q} ({col_list}) VALUES ({marks})", old)
                lines.append(f"table {table}: {len(cur)} rows -> {len(old)} rows from backup {backup.id}")
        finally:
            src.close()
        return lines

    return apply
