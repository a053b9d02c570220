"""Each tool's one-shot, non-interactive command: how to find it, ask its version, and run it once.

The real-tool test tier (``tests/realtools/``) and ``conduit verify`` run a tool through these specs against a
loopback gateway. Each comes from the adapter's ``one_shot`` declaration (``conduit.adapters.declarations.OneShot``:
binaries, the arguments around the prompt, ``--version`` arguments, the tool's own opt-outs, a timeout and the exit
codes meaning "folder not trusted"); facts observed with the versions in docs/formats/real-tools.md. A tool without a
command line (CC Switch) declares ``one_shot = None`` and has no entry here.

``extra_env`` holds the tool's own documented opt-outs of update checks and telemetry (sources cited where the
adapter declares them); the opt-outs every tool gets (``DO_NOT_TRACK`` ...) are the runner's ``OPT_OUT_ENV``. None
of them changes which gateway, key or model a tool uses.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conduit.adapters import declarations
from conduit.adapters.registry import ADAPTERS, missing_declarations

__all__ = ["ONE_SHOTS", "OneShot", "find_binary", "one_shot", "parse_semver", "tool_version"]

_SEMVER_RE = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+(?![\d.]\d)(?:[-+][0-9A-Za-z.-]+)?)")
VERSION_TIMEOUT_S = 10.0
"""Bound on one ``--version`` call, seconds (a tool that hangs there is reported as version unknown)."""


def parse_semver(text: str) -> str | None:
    """The first ``MAJOR.MINOR.PATCH[-pre]`` in ``text`` (a leading ``v`` dropped; not part of a longer dotted
    number such as an IP address), or None.

    >>> parse_semver("codex-cli 0.171.0"), parse_semver("2.1.197 (Claude Code)"), parse_semver("none")
    ('0.171.0', '2.1.197', None)
    """
    m = _SEMVER_RE.search(text)
    return m.group(1) if m else None


def _argv(*before: str, after: tuple[str, ...] = ()) -> Callable[[str, str], list[str]]:
    """An ``argv(binary, prompt)`` function: ``[binary, *before, prompt, *after]``."""

    def build(binary: str, prompt: str) -> list[str]:
        return [binary, *before, prompt, *after]

    return build


@dataclass(frozen=True)
class OneShot:
    """How to run one tool once, non-interactively.

    Attributes:
        tool: the registry name (``conduit.adapters.registry``), e.g. ``"claude_code"``.
        binaries: command names to look for on PATH, first found wins, e.g. ``("cn",)``.
        build_argv: ``(binary path, prompt) -> argv``; use ``argv()``.
        version_argv: arguments that make the binary print its version.
        extra_env: the tool's own opt-outs (update checks, telemetry), added to the run's environment.
        timeout_s: bound on one one-shot run, seconds (start-up plus one model round trip to loopback).
        parse: ``--version`` output -> version string or None; ``parse_semver`` unless a tool needs more.
        untrusted_exits: exit codes meaning the tool refused the folder (Gemini CLI: 41, 55).
    """

    tool: str
    binaries: tuple[str, ...]
    build_argv: Callable[[str, str], list[str]]
    version_argv: tuple[str, ...] = ("--version",)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    parse: Callable[[str], str | None] = parse_semver
    untrusted_exits: tuple[int, ...] = ()

    def argv(self, binary: str | Path, prompt: str) -> list[str]:
        """The one-shot command line for ``binary`` (a path or a name on PATH) and ``prompt``."""
        return self.build_argv(str(binary), prompt)

    def parse_version(self, text: str) -> str | None:
        """The version in the output of ``binary *version_argv``, or None when it holds none."""
        return self.parse(text)


def one_shot(tool: str, decl: declarations.OneShot) -> OneShot:
    """The spec of ``tool`` from its adapter's ``one_shot`` declaration."""
    return OneShot(tool, decl.binaries, _argv(*decl.before, after=decl.after), decl.version_args,
                   dict(decl.opt_outs), decl.timeout_s, untrusted_exits=decl.untrusted_exits)


class _OneShots(Mapping[str, OneShot]):
    """``tool -> OneShot`` for every registered adapter whose ``one_shot`` is declared and not None, in registry
    order; read from ``ADAPTERS`` at each access, so an adapter registered by a test counts. A tool that lacks the
    declaration (``registry.missing_declarations``) has no entry."""

    def __getitem__(self, tool: str) -> OneShot:
        adapter = ADAPTERS[tool]
        decl = None if "one_shot" in missing_declarations(adapter) else adapter.one_shot
        if decl is None:
            raise KeyError(tool)
        return one_shot(tool, decl)

    def __iter__(self) -> Iterator[str]:
        return iter([t for t, a in ADAPTERS.items()
                     if "one_shot" not in missing_declarations(a) and a.one_shot is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)


ONE_SHOTS: Mapping[str, OneShot] = _OneShots()
"""The one-shot spec of every tool that has a command line, by registry name (in registry order)."""


def find_binary(spec: OneShot, path: str | None = None) -> Path | None:
    """The first of ``spec.binaries`` found on ``path`` (``os.pathsep``-separated; default ``$PATH``), or None."""
    for name in spec.binaries:
        found = shutil.which(name, path=path)
        if found:
            return Path(found)
    return None


def tool_version(binary: str | Path, spec: OneShot | None = None, *, env: Mapping[str, str] | None = None,
                 timeout_s: float = VERSION_TIMEOUT_S) -> str | None:
    """The version ``binary`` reports (``spec.version_argv``, parsed by ``spec.parse_version``), or None.

    Bounded by ``timeout_s`` (10 s); stdin is /dev/null; never raises (a binary that is missing, fails, hangs
    or prints no version gives None). ``env`` is the environment to run it in (default: this process's).
    """
    args = spec.version_argv if spec else ("--version",)
    parse = spec.parse_version if spec else parse_semver
    try:
        out = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL, env=dict(env) if env is not None else None,
                             errors="replace", check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse(out.stdout) or parse(out.stderr)
