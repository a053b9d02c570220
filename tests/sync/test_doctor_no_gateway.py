"""doctor names each installed tool that cannot take a custom gateway (``NO_CUSTOM_GATEWAY``: Amp, Cursor's
CLI) in one line, from a stand-in binary on PATH, and says nothing of one that is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.toolfiles import write_profile

from conduit.adapters.base import Env
from conduit.adapters.declarations import NO_CUSTOM_GATEWAY
from conduit.daemon.sync.doctor import doctor


def _stand_in(bin_dir: Path, name: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / name
    exe.write_text("#!/bin/sh\necho 'stand-in 0.0.1'\n")
    exe.chmod(0o755)
    return exe


def test_installed_tool_without_gateway_support_gets_one_line(temp_home: Path) -> None:
    profile = write_profile(temp_home, tools=())
    amp = _stand_in(temp_home / "bin", "amp")
    env = Env({**os.environ, "HOME": str(temp_home), "PATH": str(temp_home / "bin")}, cwd=temp_home)
    report = doctor(profile, env)
    assert set(report["cannot_use_gateway"]) == {"amp"}
    assert report["cannot_use_gateway"]["amp"]["binary"] == str(amp)
    lines = [w for w in report["warnings"] if "cannot use a custom gateway" in w]
    assert len(lines) == 1 and lines[0].startswith(f"Amp ({amp})") and "ampcode.com" in lines[0]
    assert report["ok"] is True  # a note, not a failure


def test_nothing_said_when_not_installed(temp_home: Path) -> None:
    profile = write_profile(temp_home, tools=())
    env = Env({**os.environ, "HOME": str(temp_home), "PATH": str(temp_home / "empty")}, cwd=temp_home)
    report = doctor(profile, env)
    assert report["cannot_use_gateway"] == {}
    assert not [w for w in report["warnings"] if "cannot use a custom gateway" in w]


def test_doctor_json_names_cursor_agent(temp_home: Path) -> None:
    """The real command: ``conduit doctor --json`` with a stand-in ``cursor-agent`` first on PATH."""
    write_profile(temp_home, tools=())
    _stand_in(temp_home / "bin", "cursor-agent")
    env = {"HOME": str(temp_home), "PATH": f"{temp_home / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "doctor", "--json"], env=env, cwd=temp_home,
                       capture_output=True, text=True, timeout=120)
    report = json.loads(r.stdout)
    assert "cursor-agent" in report["cannot_use_gateway"]
    assert any(w.startswith("Cursor CLI (") for w in report["warnings"])


def test_declared_tools_have_no_adapter() -> None:
    from conduit.adapters.registry import ADAPTERS

    assert [t.name for t in NO_CUSTOM_GATEWAY] == ["amp", "cursor-agent"]
    assert not {t.name for t in NO_CUSTOM_GATEWAY} & set(ADAPTERS)
