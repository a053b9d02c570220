"""What stops a tool from using conduit's settings although its files match: ``Blocker`` and shared look-ups.

``conduit doctor`` asks each adapter's ``outranks(settings, env)`` (``AdapterDefaults`` answers ``[]``); a
non-empty answer turns the tool's state from ``in_sync`` into the first blocker's state:
- ``overridden``: a source ranks above the file conduit writes, or bypasses the gateway (an exported variable,
  a project file, a cloud-provider switch, a selected Codex profile...);
- ``untrusted``: Gemini CLI will not read its ``.env`` in the working folder (folder trust);
- ``refused``: the installed version refuses a setting in the tool's file (Codex ``wire_api = "chat"``).
Every blocker names its source and the fix a person can apply. Values in ``why``/``fix`` never hold a key.

Also the data an adapter declares about its tool beyond its files (``base.Adapter``): how to run it once
(``OneShot``), the package that installs it (``Package``), its competing sources (``Competing``), and the shared
values adapters point at (the OpenAI variables and base URL forms). ``conduit verify`` and the real-tool test tier
build their tables from these through ``conduit.adapters.registry.ADAPTERS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

BlockerState = Literal["overridden", "untrusted", "refused"]
ConfiguredBy = Literal["files", "environment"]
"""How a tool takes its gateway, key and model: from its own ``files`` (conduit sync rewrites them), or only from
the ``environment`` it is started with (GitHub Copilot CLI: ``conduit run`` / ``conduit env`` give it the
adapter's ``run_env``; ``conduit sync`` writes nothing for it)."""

__all__ = ["OPENAI_BASE", "OPENAI_FORMS", "OPENAI_KEY", "OPENAI_MODEL", "OPENAI_ROUTES", "Blocker", "BlockerState",
           "Competing", "ConfiguredBy", "NO_CUSTOM_GATEWAY", "NoGateway", "OneShot", "Package", "git_root",
           "read_env_quietly"]

OPENAI_MODEL = ("OPENAI_MODEL",)
"""Exported variables that can set an OpenAI-SDK client's model."""
OPENAI_KEY = ("OPENAI_API_KEY",)
"""... its key."""
OPENAI_BASE = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
"""... its base URL."""
OPENAI_FORMS = ("/api", "/api/v1", "/api/v1/chat/completions")
"""Base URL forms the real-tool tier tries for an OpenAI-protocol tool (paths under the gateway root; conduit
normalizes each to the root ``/api``): the root, with the version segment, and a pasted endpoint."""
OPENAI_ROUTES = ("/api/v1/chat/completions",)
"""The model route a chat-completions tool must hit under the normalized root ``/api``."""


@dataclass(frozen=True)
class Blocker:
    """One reason a tool will not use conduit's settings.

    Attributes:
        state: ``overridden`` / ``untrusted`` / ``refused`` (see the module docstring).
        source: what wins instead: a file path, ``shell environment``, or ``<file> [profiles.x]``.
        why: the reason in words (``"CLAUDE_CODE_USE_BEDROCK=1 sends every request to Amazon Bedrock"``).
        fix: what to do, as a person would type it (``"unset CLAUDE_CODE_USE_BEDROCK ..."``).
    """

    state: BlockerState
    source: str
    why: str
    fix: str

    def as_dict(self) -> dict[str, Any]:
        """``{"state", "source", "why", "fix"}`` as ``conduit doctor --json`` shows each blocker."""
        return {"state": self.state, "source": self.source, "why": self.why, "fix": self.fix}


def read_env_quietly(path: Path) -> dict[str, str]:
    """A ``.env`` file's variables; ``{}`` when missing or unreadable."""
    # lazy (python-dotenv imports logging; most runs read no .env file); python-dotenv itself, not
    # conduit.adapters.formats.dotenvfile: that module imports base, which imports this one
    from dotenv import dotenv_values

    try:
        values = dotenv_values(path, interpolate=False)
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return {name: value for name, value in values.items() if value is not None}


def git_root(cwd: Path) -> Path | None:
    """The nearest folder at or above ``cwd`` holding ``.git`` (a directory or a worktree's file), or None."""
    d = cwd
    while True:
        if (d / ".git").exists():
            return d
        if d.parent == d:
            return None
        d = d.parent


@dataclass(frozen=True)
class OneShot:
    """How to run a tool once, non-interactively: ``[binary, *before, PROMPT, *after]``.

    Attributes:
        binaries: command names to look for on PATH, first found wins, e.g. ``("cn",)``.
        before / after: arguments before and after the prompt, e.g. ``("exec", "--skip-git-repo-check")``.
        version_args: arguments that make the binary print its version.
        opt_outs: the tool's own opt-outs of update checks and telemetry (``{"VAR": "value"}``, each source cited
            where declared); none changes which gateway, key or model the tool uses.
        timeout_s: bound on one run, seconds (start-up plus one model round trip to loopback).
        untrusted_exits: exit codes meaning "this folder is not trusted, so the tool read none of its files there"
            (Gemini CLI: 41, 55); ``()`` for a tool without folder trust.
    """

    binaries: tuple[str, ...]
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    version_args: tuple[str, ...] = ("--version",)
    opt_outs: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    untrusted_exits: tuple[int, ...] = ()


@dataclass(frozen=True)
class Package:
    """The package that installs a tool's command line, pinned (the real-tool test tier installs it).

    Attributes:
        registry: ``npm`` or ``pypi``.
        name / version: e.g. ``"@openai/codex"`` / ``"0.171.0"``.
        commands: the command names it provides, e.g. ``("codex",)``.
        recipe: None for the default install (npm: the shared ``npm install --prefix``, on the system Node;
            PyPI: a venv of its own with the default Python); else the name of a shell function
            ``recipe_<name>`` in ``tests/realtools/ensure_tools.sh`` that installs this package into
            ``CACHE/<tool>`` with its commands in ``CACHE/<tool>/bin`` (a package that needs another runtime,
            such as Node 24 or Python 3.12+, or install steps of its own).
    """

    registry: Literal["npm", "pypi"]
    name: str
    version: str
    commands: tuple[str, ...]
    recipe: str | None = None

    @property
    def pin(self) -> str:
        """``name@version`` (npm) or ``name==version`` (pypi), as the installers take it."""
        return f"{self.name}=={self.version}" if self.registry == "pypi" else f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Competing:
    """A tool's sources that may outrank the user file conduit writes, read statically (no tool runs for this).

    Attributes:
        model / key / base: exported variables that can set the model, carry the key, set the base URL.
        files: project files (relative to the working directory) that rank above the user file conduit writes.
        walks_up: the files (relative) the tool also looks for in every folder above the working directory
            (Gemini CLI's ``findEnvFile``: ``.gemini/.env``, ``.env``); ``()`` when it reads the working
            directory's only.
    """

    model: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    base: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    walks_up: tuple[str, ...] = ()

    def blockers(self, environ: Mapping[str, str], cwd: Path) -> list[Blocker]:
        """``overridden`` blockers for each competing variable exported in ``environ`` (named, value never shown)
        and each of ``files`` present in ``cwd``; for an adapter's ``outranks``."""
        names = dict.fromkeys((*self.model, *self.key, *self.base))
        out = [Blocker("overridden", "shell environment", f"{n} is exported and outranks the file conduit writes",
                       f"unset {n}") for n in names if environ.get(n, "").strip()]
        return out + [Blocker("overridden", str(cwd / rel), "a project file ranks above the file conduit writes",
                              f"remove the gateway settings from {cwd / rel}") for rel in self.files
                      if (cwd / rel).is_file()]


@dataclass(frozen=True)
class NoGateway:
    """A tool that cannot send its model requests to a custom gateway, so conduit has no adapter for it: it is
    declared here and reported, never faked (docs/design.md "A tool is its adapter").

    Attributes:
        name / display_name: the tool's name (as ``conduit doctor --json`` keys it) and its name for people.
        binaries: command names that mean the tool is installed (looked for on ``PATH``).
        why: one sentence, with the tool's own documentation it comes from.
    """

    name: str
    display_name: str
    binaries: tuple[str, ...]
    why: str


NO_CUSTOM_GATEWAY: tuple[NoGateway, ...] = (
    NoGateway("amp", "Amp", ("amp",),
              "Amp sends every model request through Amp's own service (the amp.url setting names that service, "
              "not a model gateway) and picks its models itself; it takes no base URL, key or model of another "
              "gateway (ampcode.com, Owner's Manual)"),
    NoGateway("cursor-agent", "Cursor CLI", ("cursor-agent",),
              "Cursor's CLI signs in to a Cursor account (agent login or CURSOR_API_KEY, a Cursor key) and sends "
              "every request to Cursor's backend; the editor's Override OpenAI Base URL does not apply to it "
              "(cursor.com/docs/cli, Authentication)"),
)
"""The tools ``conduit doctor`` names, when one of their ``binaries`` is on ``PATH``, as unable to use the
profile's gateway."""
