"""Where each tool's key rests, for ``conduit doctor`` and ``conduit status``.

For a managed tool, the files its sync writes (the dry-run sync's results) are searched for the channel's key
(bytes, no parsing: a SQLite database is searched too). The answer, ``key_at_rest(...)["where"]``:

- ``reference (apiKeyHelper)``: Claude Code runs conduit's ``key print`` command; no file of the tool holds the
  key (the adapter's ``key_reference``);
- ``reference (conduit's key file 0600)``: the only file holding it is conduit's own key file for a tool's
  ``{file:...}`` / ``!cat`` / SecretRef reference (``<config>/conduit/tool-keys/``);
- ``reference``: no file holds it (an ``{env:...}``/``${VAR}`` reference the person exports);
- ``file 0600`` / ``database 0600`` (the file's real mode): a copy of the key in the tool's own file;
- ``none``: the channel needs no key.

Warnings: a file holding the key that group or others may read, and one that sits inside a git work tree (a
dotfiles repository would commit the key).

After each real sync (``rest_after_sync``, the daemon and ``conduit sync``): the answer per tool goes into the sync
state file (``conduit status`` shows it), and a tool whose sync changed its files so that none holds the key any
more (``key_delivery`` switched to a reference) has the key replaced by its fingerprint in its backups;
conduit's key files that no tool reads any more are removed (``conduit.daemon.sync.toolkeys``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env, ToolSettings
from conduit.adapters.keyref import DELIVERY_OPTIONS, RUNS_CONDUIT, unstable_reason
from conduit.adapters.registry import ADAPTERS
from conduit.adapters.writer.backups import BackupStore
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.sync.engine import SyncReport
from conduit.daemon.sync.scrub import scrub_backups
from conduit.daemon.sync.toolkeys import remove_stale_tool_keys
from conduit.errors import ConduitError

__all__ = ["git_work_tree", "key_at_rest", "rest_after_sync", "unstable_reference"]

_SQLITE_MAGIC = b"SQLite format 3\0"
_MAX_BYTES = 64 << 20  # a tool file longer than this is not searched (settings files are a few KiB)


def git_work_tree(path: Path, stop: Path | None = None) -> Path | None:
    """The work tree ``path`` sits in (the nearest parent holding ``.git``, a directory or a file), or None;
    the search stops above ``stop`` (default: the file system root). Never raises."""
    for parent in path.parents:
        try:
            if (parent / ".git").exists():
                return parent
        except OSError:
            return None
        if stop is not None and parent == stop:
            return None
    return None


def _holds(path: Path, key: str) -> tuple[bool, int, bool]:
    """(holds the key, permission bits, is a SQLite database) of a regular file; (False, 0, False) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False, 0, False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES:
            return False, 0, False
        chunks, got = [], 0
        while got <= st.st_size:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
    except OSError:
        return False, 0, False
    finally:
        os.close(fd)
    return key.encode("utf-8") in data, stat.S_IMODE(st.st_mode), data.startswith(_SQLITE_MAGIC)


def key_at_rest(tool: str, paths: list[Path], key: str | None, *, config_home: Path,
                home: Path, reference: str | None = None) -> dict[str, Any]:
    """Where ``tool``'s key rests (see the module docstring).

    Args:
        tool: the tool's name for people (in warnings); paths: the files its sync writes; key: the channel's key (None: none needed);
        config_home: ``$XDG_CONFIG_HOME`` or ``~/.config`` (conduit's tool-keys live under it); home: ``$HOME``
            (the git search stops there); reference: the reference running conduit that the tool's files hold
            (``Adapter.key_reference``: ``apiKeyHelper``), or None.

    Returns:
        ``{"where": str, "files": [{"path", "mode" ("0600"), "kind" ("file" | "database")}], "warnings": [str]}``.
    """
    if key is None:
        return {"where": "none", "files": [], "warnings": []}
    files, warnings = [], []
    own = config_home / "conduit" / "tool-keys"
    for path in dict.fromkeys(paths):
        holds, mode, sqlite = _holds(path, key)
        if not holds:
            continue
        files.append({"path": str(path), "mode": f"{mode:04o}", "kind": "database" if sqlite else "file"})
        if mode & 0o077:
            warnings.append(f"{tool}: {path} holds the key and is readable by "
                            f"{'others' if mode & 0o007 else 'its group'} (mode {mode:04o}); run `chmod 600 {path}`")
        tree = git_work_tree(path, stop=home.parent)
        if tree is not None:
            warnings.append(f"{tool}: {path} holds the key and sits inside the git work tree {tree}: a commit "
                            "would publish it; add it to .gitignore, or use a key reference where the tool has one")
    return {"where": _where(files, own, reference), "files": files, "warnings": warnings}


def _where(files: list[dict[str, str]], own: Path, reference: str | None) -> str:
    if not files:
        return f"reference ({reference})" if reference else "reference"
    if all(Path(f["path"]).parent == own for f in files):
        return f"reference (conduit's key file {files[0]['mode']})"
    return ", ".join(dict.fromkeys(f"{f['kind']} {f['mode']}" for f in files))


def unstable_reference(tool: str, display: str, settings: ToolSettings) -> list[str]:
    """A warning when ``tool``'s options ask for a reference that runs conduit (``RUNS_CONDUIT``) but conduit's
    executable is in a temporary place (``conduit.adapters.keyref.unstable_reason``), so the sync wrote a copy;
    else ``[]``."""
    if tool not in RUNS_CONDUIT or settings.key is None:
        return []
    option, values = DELIVERY_OPTIONS[tool]
    reason = unstable_reason()
    if getattr(settings.options, option, None) != values["reference"] or reason is None:
        return []
    return [f"{display}: {option} = \"reference\", but {reason}: a command there would vanish, so its file "
            "holds a copy of the key; install conduit where it stays (`pipx install`, `uv tool install`) and run "
            "`conduit sync`"]


def rest_after_sync(report: SyncReport, resolver: Resolver, env: Env,
                    backups: BackupStore | None = None) -> dict[str, str]:
    """Where each tool's key rests after a real sync (``key_at_rest(...)["where"]``), for the tools whose files
    are in sync (``changed``/``unchanged``) and whose key can be read; and, for a tool whose sync changed its
    files so that no file of it holds the key any more, the key replaced by its fingerprint in that tool's
    backups (``scrub_backups(tool=)``; ``backups`` None: conduit's backups directory). Never raises for a key
    that cannot be read (the tool is left out)."""
    out: dict[str, str] = {}
    for tr in report.tools:
        if tr.status not in ("changed", "unchanged"):
            continue
        try:
            key = resolver.tool_settings(tr.tool).key
        except ConduitError:
            continue
        rest = key_at_rest(tr.display, [r.path for r in tr.results], key, config_home=env.config_home(),
                           home=env.home, reference=ADAPTERS[tr.tool].key_reference(env))
        out[tr.tool] = rest["where"]
        if tr.status == "changed" and key is not None and not rest["files"]:
            scrub_backups([key], backups, tool=tr.tool)
    remove_stale_tool_keys(report, env)  # a key file no tool reads any more is a copy of the key: gone
    return out
