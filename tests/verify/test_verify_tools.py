"""daemon/verify/tools.py: the one-shot specs, finding a binary, and a bounded ``--version`` (real scripts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conduit.adapters.registry import ADAPTERS
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary, parse_semver, tool_version


def script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_every_cli_tool_has_a_spec_and_the_others_none() -> None:
    """A spec for every tool that declares a command line; none for the apps without one (CC Switch, Zed's
    editor, the Roo Code extension), which declare ``one_shot = None`` outright."""
    without = {name for name, adapter in ADAPTERS.items() if adapter.one_shot is None}
    assert without == {"cc_switch", "roo", "zed"}
    assert set(ONE_SHOTS) == set(ADAPTERS) - without
    for name, spec in ONE_SHOTS.items():
        assert spec.tool == name and spec.binaries and spec.timeout_s > 0
        argv = spec.argv("/x/bin/" + spec.binaries[0], "Say ok")
        assert argv[0] == "/x/bin/" + spec.binaries[0] and "Say ok" in argv


@pytest.mark.parametrize(("text", "want"), [
    ("2.1.197 (Claude Code)", "2.1.197"), ("codex-cli 0.171.0", "0.171.0"), ("aider 0.86.2\n", "0.86.2"),
    ("v1.18.33", "1.18.33"), ("Cline CLI\nversion 3.0.65-beta.1", "3.0.65-beta.1"), ("no version", None),
    ("10.0.0.1:8080 1.2", None),
])
def test_parse_semver(text: str, want: str | None) -> None:
    assert parse_semver(text) == want


def test_find_binary_on_a_given_path_and_not_elsewhere(tmp_path: Path) -> None:
    script(tmp_path / "cn", "exit 0")
    assert find_binary(ONE_SHOTS["continue"], str(tmp_path)) == tmp_path / "cn"
    assert find_binary(ONE_SHOTS["claude_code"], str(tmp_path)) is None
    assert find_binary(ONE_SHOTS["continue"], os.pathsep.join([str(tmp_path / "none"), str(tmp_path)])) is not None


def test_tool_version_parses_stdout_or_stderr_and_is_bounded(tmp_path: Path) -> None:
    spec = ONE_SHOTS["codex"]
    assert tool_version(script(tmp_path / "a", 'echo "codex-cli 0.171.0"'), spec) == "0.171.0"
    assert tool_version(script(tmp_path / "b", 'echo "aider 0.86.2" >&2; exit 1'), spec) == "0.86.2"
    assert tool_version(script(tmp_path / "c", "echo nothing"), spec) is None
    assert tool_version(script(tmp_path / "d", "exec sleep 30"), spec, timeout_s=0.5) is None
    assert tool_version(tmp_path / "missing", spec) is None
