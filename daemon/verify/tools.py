"""Each tool's one-shot, non-interactive command: how to find it, ask its version, and run it once.

The real-tool test tier (``tests/realtools/``) and ``conduit verify`` run a tool through these specs against a
loopback gateway. Facts from ``shared/formats/real-tools.md`` (observed with the versions named there), each
checked again against the installed package:

=========== ============ ============================================== ==========================================
tool        binary       one-shot command                               ``--version`` prints
=========== ============ ============================================== ==========================================
claude_code ``claude``   ``claude -p PROMPT``                           ``2.1.197 (Claude Code)``
codex       ``codex``    ``codex exec --skip-git-repo-check PROMPT``    ``codex-cli 0.171.0``
gemini      ``gemini``   ``gemini -p PROMPT`` (trusted folder only)     ``0.61.0``
opencode    ``opencode`` ``opencode run PROMPT``                        ``1.18.33``
continue    ``cn``       ``cn -p PROMPT``                               ``1.5.47``
cline       ``cline``    ``cline PROMPT`` (act mode, auto-approve)      ``3.0.65`` (a line holding it)
aider       ``aider``    ``aider --message PROMPT --yes-always --no-git`` ``aider 0.86.2``
=========== ============ ============================================== ==========================================

CC Switch is a desktop application with no command line: it has no entry here.

``extra_env`` holds the tool's own documented opt-outs of update checks and telemetry (sources in comments);
the opt-outs every tool gets (``DO_NOT_TRACK`` ...) are the runner's ``OPT_OUT_ENV``. None of them changes
which gateway, key or model a tool uses.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = ["ONE_SHOTS", "OneShot", "find_binary", "parse_semver", "tool_version"]

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
    """

    tool: str
    binaries: tuple[str, ...]
    build_argv: Callable[[str, str], list[str]]
    version_argv: tuple[str, ...] = ("--version",)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    parse: Callable[[str], str | None] = parse_semver

    def argv(self, binary: str | Path, prompt: str) -> list[str]:
        """The one-shot command line for ``binary`` (a path or a name on PATH) and ``prompt``."""
        return self.build_argv(str(binary), prompt)

    def parse_version(self, text: str) -> str | None:
        """The version in the output of ``binary *version_argv``, or None when it holds none."""
        return self.parse(text)


ONE_SHOTS: Mapping[str, OneShot] = MappingProxyType({
    # CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: Claude Code docs "Environment variables" (update checks,
    # telemetry, error reports, bug command); DISABLE_AUTOUPDATER likewise.
    "claude_code": OneShot("claude_code", ("claude",), _argv("-p"), extra_env={
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}),
    "codex": OneShot("codex", ("codex",), _argv("exec", "--skip-git-repo-check")),
    "gemini": OneShot("gemini", ("gemini",), _argv("-p")),
    # OPENCODE_DISABLE_AUTOUPDATE: opencode packages/opencode/src/flag/flag.ts.
    "opencode": OneShot("opencode", ("opencode",), _argv("run"), extra_env={"OPENCODE_DISABLE_AUTOUPDATE": "1"}),
    "continue": OneShot("continue", ("cn",), _argv("-p")),
    "cline": OneShot("cline", ("cline",), _argv()),
    # AIDER_<OPTION> sets any option (aider/args.py, configargparse auto_env_var_prefix "AIDER_").
    "aider": OneShot("aider", ("aider",), _argv("--message", after=("--yes-always", "--no-git")), extra_env={
        "AIDER_CHECK_UPDATE": "false", "AIDER_ANALYTICS": "false", "AIDER_SHOW_RELEASE_NOTES": "false"},
        timeout_s=90.0),
})
"""The one-shot spec of every tool that has a command line, by registry name (sorted as the registry)."""


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
