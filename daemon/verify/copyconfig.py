"""The temporary HOME of ``conduit verify``: the user's tool files copied in, then conduit's config written there.

A user's path maps into the temporary HOME ``T`` by the longest matching root: each tool-directory variable the
user exported (the XDG ones here, and every adapter's ``tool_dirs``: ``CODEX_HOME``, ``CLAUDE_CONFIG_DIR``...) maps
to its default place under ``T`` and is exported with that value for the run; ``$HOME`` maps to ``T``. A path under no root (a system
file such as ``/etc/claude-code/managed-settings.json``) is not copied: the tool reads it where it is, as it
would. Only regular files are copied (symlinks followed, contents only), each at most ``MAX_FILE_BYTES``, the
whole copy at most ``MAX_TOTAL_BYTES``; directories skip caches, logs and session histories.

Which files a tool reads comes from its adapter: the targets ``Adapter.plan`` returns for the user's HOME, and
``Adapter.verify_files`` (the tool's other files that decide what it sends: credentials, trust lists, the files an
adapter only reads).

Errors: ``OSError`` from copying becomes ``ToolFileError`` naming the file.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from conduit.adapters.base import Env, SqliteTarget, Target, TextTarget
from conduit.adapters.registry import ADAPTERS, missing_declarations
from conduit.errors import ToolFileError

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TOTAL_BYTES = 64 * 1024 * 1024
SKIP_DIRS = frozenset({"node_modules", ".git", "cache", "caches", "log", "logs", "tmp", "projects", "sessions",
                       "history", "todos", "shell-snapshots", "statsig", "file-history", "backups", "snapshot"})

XDG_REMAP: dict[str, str] = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
    "XDG_CACHE_HOME": ".cache",
}
"""Where each XDG variable points inside T (relative to T); the tools' own variables are their adapters'
``tool_dirs``."""


def remap() -> dict[str, str]:
    """Every remapped variable -> where it points inside T (relative; ``"."`` is T): ``XDG_REMAP``, then each
    registered adapter's ``tool_dirs`` in registry order. Only variables the user exported are remapped."""
    out = dict(XDG_REMAP)
    for adapter in ADAPTERS.values():
        if "tool_dirs" not in missing_declarations(adapter):
            out.update(adapter.tool_dirs)
    return out


def tool_files(tool: str, env: Env) -> list[Path]:
    """``tool``'s ``verify_files`` for ``env`` (files, or directories copied with the bounds above); ``[]`` for a
    tool that lacks the declaration."""
    adapter = ADAPTERS[tool]
    return [] if "verify_files" in missing_declarations(adapter) else adapter.verify_files(env)


class TempHome:
    """The mapping from the user's environment into a temporary HOME, and the copy itself.

    Args:
        root: the temporary HOME (an existing, empty, 0700 directory the caller removes afterwards).
        user: the user's environment (``Env``: HOME, the tool-directory variables, the working directory).

    Attributes:
        env: the environment for the temporary HOME: ``HOME`` = root, each exported ``remap()`` variable moved
            under root, same working directory. ``env.environ`` is what the tool runs with (before opt-outs).
        copied: the user paths copied so far (for reports), in order.
    """

    def __init__(self, root: Path, user: Env) -> None:
        self.root = root
        self.user = user
        environ = dict(user.environ, HOME=str(root))
        self._roots: list[tuple[Path, Path]] = []
        for var, rel in remap().items():
            value = user.get(var)
            if value:
                target = root if rel == "." else root / rel
                environ[var] = str(target)
                self._roots.append((Path(value).expanduser(), target))
        self._roots.append((user.home, root))
        self._roots.sort(key=lambda pair: len(pair[0].parts), reverse=True)
        self.env = Env(environ, cwd=user.cwd)
        self.copied: list[Path] = []
        self._total = 0

    def map(self, path: Path) -> Path | None:
        """Where the user's ``path`` lives in the temporary HOME, or None when it is under no mapped root."""
        for src, dst in self._roots:
            try:
                rel = path.relative_to(src)
            except ValueError:
                continue
            return dst / rel
        return None

    def copy_tool(self, tool: str, targets: list[Target]) -> None:
        """Copy ``tool``'s files (its adapter's ``targets`` for the user's HOME and ``verify_files``) into root.

        Raises:
            ToolFileError: a file exists but cannot be read, or the copy passes ``MAX_TOTAL_BYTES``.
        """
        paths = [t.path for t in targets if isinstance(t, TextTarget | SqliteTarget)]
        paths += tool_files(tool, self.user)
        for path in dict.fromkeys(paths):
            self.copy(path)

    def copy(self, path: Path) -> None:
        """Copy one user file, or a directory tree with the bounds above; a missing path is skipped."""
        dst = self.map(path)
        if dst is None or dst.exists():
            return
        try:
            st = path.stat()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ToolFileError(f"{path}: cannot read it to copy it ({exc.strerror})",
                                "fix its permissions, or leave the tool out: conduit verify TOOL...") from exc
        if stat.S_ISDIR(st.st_mode):
            self._copy_dir(path, dst)
        elif stat.S_ISREG(st.st_mode):
            self._copy_file(path, dst, st.st_size)

    def _copy_dir(self, src: Path, dst: Path) -> None:
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            here = Path(dirpath)
            for name in sorted(filenames):
                p = here / name
                try:
                    st = p.stat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
                    self._copy_file(p, dst / p.relative_to(src), st.st_size)

    def _copy_file(self, src: Path, dst: Path, size: int) -> None:
        if size > MAX_FILE_BYTES:
            return
        self._total += size
        if self._total > MAX_TOTAL_BYTES:
            raise ToolFileError(f"{src}: the tool's files pass {MAX_TOTAL_BYTES >> 20} MiB",
                                "conduit verify copies at most that much; leave the tool out: conduit verify TOOL...")
        try:
            dst.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.copyfile(src, dst)  # contents only (follows symlinks); the mode is set below
            os.chmod(dst, stat.S_IMODE(src.stat().st_mode) & 0o700 | 0o600)
        except OSError as exc:
            raise ToolFileError(f"{src}: cannot copy it into the temporary HOME ({exc.strerror})",
                                "fix its permissions, or leave the tool out: conduit verify TOOL...") from exc
        self.copied.append(src)


def run_environ(home: TempHome, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment a tool runs with: the user's, HOME and the remapped variables in T, then ``extra``."""
    return {**home.env.environ, **extra}


__all__ = ["MAX_FILE_BYTES", "MAX_TOTAL_BYTES", "XDG_REMAP", "TempHome", "remap", "run_environ", "tool_files"]
