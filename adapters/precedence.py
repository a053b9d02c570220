"""Which of a tool's own sources really wins, as data: the scope rules of its project files and the order of its
key and model sources, each citing where the tool implements it.

A tool applies a project file only under its own rules: which folders it searches from the working folder, what
gates the file (Codex's project trust, OpenCode's ``OPENCODE_DISABLE_PROJECT_CONFIG``). ``ProjectScope.applied``
lists the files the tool really applies; the adapters' ``outranks`` (``conduit doctor``) read only those, so a file
the tool ignores is never reported "overridden" and one it applies from a parent folder never passes as "in sync".
``Order`` lists a tool's sources for one value, highest first (Claude Code: ``ANTHROPIC_MODEL`` above the top-level
``model`` setting); ``Order.winner`` picks the source that decides. The real-tool tier
(tests/realtools/test_realtools_precedence.py) checks each rule against the binary; docs/formats/<tool>.md and
docs/tools.md ("Who really wins") describe them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from conduit.adapters.declarations import git_root

Search = Literal["cwd", "root_to_cwd", "root_and_cwd", "cwd_up"]
"""The folders a tool searches for a project file: ``cwd`` the working folder only; ``root_to_cwd`` every folder
from the project root down to the working folder (the nearer file wins); ``root_and_cwd`` the project root and the
working folder only (the working folder's wins); ``cwd_up`` the working folder and every folder above it, git or
not, up to (not into) the home folder, or to ``/`` outside it, where only the nearest file found applies (Qwen
Code's project ``.env``, Mistral Vibe's ``.vibe/config.toml``)."""
TrustAt = Literal["cwd", "file"]
"""Which folder a ``trusted`` scope's trust is asked about: the working folder (Codex, Qwen Code), or the folder
holding the file found (Mistral Vibe: a file found above a trusted working folder needs its own folder trusted)."""
OutsideGit = Literal["cwd", "filesystem_root"]
"""The project root of a working folder outside any git repository: the folder itself, or ``/`` (the tool then
searches every folder above)."""

__all__ = ["Cite", "Order", "OutsideGit", "ProjectScope", "Rule", "Search", "TrustAt", "project_root"]


@dataclass(frozen=True)
class Cite:
    """Where the tool implements a rule: ``repo`` (``owner/name``), ``path`` in it, ``symbol`` (function or
    constant), and ``checked`` (the installed version the real-tool tier checked it with, ``""`` if none)."""

    repo: str
    path: str
    symbol: str
    checked: str = ""

    def __str__(self) -> str:
        return f"{self.repo} {self.path} ({self.symbol})"


def project_root(cwd: Path, outside_git: OutsideGit = "cwd") -> Path:
    """The folder a tool treats as the project root for ``cwd``: the nearest one holding ``.git``, else ``cwd``
    itself or ``/`` (``outside_git``)."""
    root = git_root(cwd)
    if root is not None:
        return root
    return cwd if outside_git == "cwd" else Path(cwd.anchor or "/")


@dataclass(frozen=True)
class ProjectScope:
    """The project files a tool reads beside its user file, with the rules that decide whether it applies them.

    Attributes:
        files: paths relative to each searched folder (``.codex/config.toml``), lowest precedence first within
            one folder.
        search: which folders (``Search``).
        cite: where the tool implements the rule.
        outside_git: the project root outside a git repository (``OutsideGit``).
        trusted: gated by folder trust (Codex): the files apply only where ``applied``'s ``trust`` callback says
            the project is trusted.
        disabled_by: exported variables that turn every project file off when set (OpenCode's
            ``OPENCODE_DISABLE_PROJECT_CONFIG``).
        trust_at: the folder the ``trust`` callback is asked about (``TrustAt``).
    """

    files: tuple[str, ...]
    search: Search
    cite: Cite
    outside_git: OutsideGit = "cwd"
    trusted: bool = False
    disabled_by: tuple[str, ...] = ()
    trust_at: TrustAt = "cwd"

    def folders(self, cwd: Path, home: Path | None = None) -> list[Path]:
        """The folders searched from ``cwd``, lowest precedence first (the project root first, ``cwd`` last);
        ``home`` ends a ``cwd_up`` search (None: it goes up to ``/``)."""
        if self.search == "cwd":
            return [cwd]
        if self.search == "cwd_up":
            chain = [cwd, *cwd.parents]
            return list(reversed(chain[:chain.index(home)] if home in chain else chain))
        root = project_root(cwd, self.outside_git)
        if self.search == "root_and_cwd":
            return list(dict.fromkeys([root, cwd]))
        chain = [cwd, *cwd.parents]
        return list(reversed(chain[:chain.index(root) + 1])) if root in chain else [cwd]

    def candidates(self, cwd: Path, home: Path | None = None) -> list[Path]:
        """Every path the tool looks at from ``cwd``, lowest precedence first, present or not."""
        return [folder / rel for folder in self.folders(cwd, home) for rel in self.files]

    def applied(self, cwd: Path, environ: Mapping[str, str], trust: Callable[[Path], bool] | None = None,
                skip: Path | None = None, home: Path | None = None) -> list[Path]:
        """The project files the tool applies from ``cwd``, lowest precedence first: present, not turned off by
        ``disabled_by`` in ``environ``, and (``trusted`` scopes) in a project ``trust`` accepts (asked about
        ``cwd``, or the folder searched where the file was found: ``trust_at``); ``skip`` (the user file itself,
        when ``cwd`` is HOME) is left out; a ``cwd_up`` search keeps the nearest file only and stops at
        ``home``."""
        if any((environ.get(v) or "").strip() for v in self.disabled_by):
            return []
        if self.trusted and self.trust_at == "cwd" and (trust is None or not trust(cwd)):
            return []
        found = [(folder, folder / rel) for folder in self.folders(cwd, home) for rel in self.files
                 if (folder / rel).is_file() and (skip is None or not _same(folder / rel, skip))]
        if self.search == "cwd_up":
            found = found[-1:]
        if self.trusted and self.trust_at == "file":
            found = [(f, p) for f, p in found if trust is not None and trust(f)]
        return [p for _, p in found]


@dataclass(frozen=True)
class Order:
    """A tool's sources for one value, highest first, and where the tool implements the order.

    Attributes:
        what: the value (``model``, ``key``).
        sources: source names as a person sees them (``ANTHROPIC_MODEL``, ``"model" setting``), highest first.
        cite: where the tool implements it.
        note: what a source's value means beyond itself (aliases, an empty value that does not count).
    """

    what: str
    sources: tuple[str, ...]
    cite: Cite
    note: str = ""

    def winner(self, values: Mapping[str, object]) -> str | None:
        """The first of ``sources`` whose value in ``values`` is set (not None, not ``""``); None when none is."""
        return next((s for s in self.sources if values.get(s) not in (None, "")), None)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


Rule: TypeAlias = ProjectScope | Order
"""One precedence rule an adapter declares (its ``precedence`` tuple)."""
