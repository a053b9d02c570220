"""The first ten minutes of a new user: the README's quick start run verbatim from an empty HOME against a
loopback gateway; no request before the gateway is named, none in a dry run; the starter's placeholder gateway
refused; only present tools enabled; an absent tool said in one short line; the small frictions of a first day.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.gateways import Gateway
from helpers.toolfiles import cline_gen_c, write_profile

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]
ROOT = Path(__file__).resolve().parents[2]
README_URL = "https://your-gateway.example/api"
"""The gateway URL of the README's quick start: the only text the test substitutes."""
MODELS = ("claude-sonnet-4-20250514", "claude-3-5-haiku-20241022", "deepseek-chat")


def run(home: Path, *args: str, stdin: str | None = None, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1")
    if path is not None:
        env["PATH"] = path
    return subprocess.run([*CONDUIT, *args], input=stdin if stdin is not None else "", capture_output=True,
                          text=True, env=env, timeout=120)


def quick_start_lines() -> list[str]:
    """The commands of README.md's quick-start code block, comments removed."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start\n.*?```sh\n(.*?)```", text, re.S)
    assert block is not None, "README.md has no quick-start code block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def fake_systemctl(home: Path) -> str:
    """A PATH whose first folder holds a `systemctl` that records its arguments (no user bus in a test)."""
    bin_dir = home.parent / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "systemctl"
    tool.write_text(f'#!/bin/sh\necho "$@" >> {home.parent / "systemctl.log"}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def test_readme_quick_start_verbatim_sends_nothing_before_the_gateway_is_named(temp_home: Path) -> None:
    (temp_home / ".claude").mkdir()  # Claude Code and Cline are "installed": their folders exist
    cline_gen_c(temp_home)
    lines = quick_start_lines()
    assert lines[0].startswith("conduit init") and README_URL in lines[0], "the quick start names the gateway first"
    path = fake_systemctl(temp_home)
    stderr = ""
    gw = Gateway(protocols=True, models=MODELS)
    try:
        for line in lines:
            argv = shlex.split(line.replace(README_URL, gw.url + "/api"))
            assert argv[0] == "conduit", line
            key = "sk-quick-0123456789abcdef\n" if argv[1:3] == ["key", "set"] else None
            before = len(gw.recorded())
            r = run(temp_home, *argv[1:], stdin=key, path=path)
            stderr += r.stderr
            assert r.returncode == 0 or argv[1] == "verify", (line, r.stdout, r.stderr)
            assert "Traceback" not in r.stdout + r.stderr
            if argv[1] in ("init", "key") or "--dry-run" in argv:
                assert len(gw.recorded()) == before, f"`{line}` sent a request: {gw.calls()[before:]}"
            if argv[1] == "init":
                text = (temp_home / ".config/conduit/profile.toml").read_text()
                assert "[tools.claude_code]" in text and "[tools.cline]" in text and "[tools.codex]" not in text
        assert gw.recorded(), "the sync after the dry run refreshes the model list at the named gateway"
    finally:
        gw.close()
    host = gw.url.removeprefix("http://")
    assert stderr.count(f"sending the key of channel mygw to host {host} for the first time") == 1, stderr
    assert "sk-quick-0123456789abcdef" not in stderr


def test_init_without_a_gateway_writes_a_placeholder_that_nothing_is_sent_to(temp_home: Path) -> None:
    (temp_home / ".claude").mkdir()
    r = run(temp_home, "init")  # stdin is not a terminal, no flags
    assert r.returncode == 0, r.stderr
    assert "https://your-gateway.example/api" in r.stdout and "conduit init --force --base-url" in r.stdout
    assert "conduit key set gateway" in r.stdout  # the next: line names the channel
    assert run(temp_home, "key", "set", "gateway", stdin="sk-test-0123456789ab\n").returncode == 0
    for args in (("sync", "--dry-run"), ("sync",), ("doctor", "--live")):
        r = run(temp_home, *args)
        assert r.returncode == 1 and "placeholder base_url" in r.stdout + r.stderr, (args, r.stdout, r.stderr)
    assert not (temp_home / ".claude" / "settings.json").exists()
    assert not (temp_home / ".local/state/conduit/contacts.json").exists()  # no key went anywhere


def test_init_enables_only_the_tools_present(temp_home: Path) -> None:
    r = run(temp_home, "init", "--base-url", "https://gw.example.com/api", "--channel", "gw")
    assert r.returncode == 0, r.stderr
    text = (temp_home / ".config/conduit/profile.toml").read_text()
    assert not re.search(r"^\[tools\.", text, re.M) and "no coding tool found" in r.stdout
    assert 'base_url = "https://gw.example.com/api"' in text and 'secret = "gw"' in text
    cline_gen_c(temp_home)
    r = run(temp_home, "init", "--force", "--base-url", "https://gw.example.com/api/v1")
    text = (temp_home / ".config/conduit/profile.toml").read_text()
    assert re.findall(r"^\[tools\.(\w+)\]", text, re.M) == ["cline"], text


def test_a_configured_tool_that_is_absent_is_one_short_line(temp_home: Path) -> None:
    write_profile(temp_home, tools=("cline",))
    for args in (("sync",), ("sync", "--dry-run"), ("doctor",)):
        r = run(temp_home, *args)
        said = [line for line in (r.stdout + r.stderr).splitlines() if "remove `[tools.cline]`" in line]
        assert len(said) == 1 and len(said[0]) <= 140, (args, r.stdout)


def test_the_daemon_logs_an_absent_tool_once(caplog: pytest.LogCaptureFixture) -> None:
    from conduit.daemon.sync.engine import ToolReport
    from conduit.daemon.sync.logs import log_tool

    tr = ToolReport(tool="cline", display="Cline", status="not_found", message="Cline not installed (no x)")
    with caplog.at_level(logging.INFO, logger="conduit.daemon"):
        for _ in range(3):
            log_tool(tr, "profile")
    assert len([r for r in caplog.records if r.levelno >= logging.INFO and "not found" in r.getMessage()]) == 1


def test_next_step_names_the_channel_and_asks_no_key_for_the_local_template(temp_home: Path) -> None:
    r = run(temp_home, "init", "--base-url", "https://gw.example.com/api", "--channel", "work")
    assert "conduit key set work" in r.stdout and "NAME" not in r.stdout
    r = run(temp_home, "init", "--force", "--template", "local-vllm")
    assert r.returncode == 0 and "key set" not in r.stdout and "needs none" in r.stdout, r.stdout


def test_first_contact_is_said_once_per_host(temp_home: Path) -> None:
    from conduit.daemon.config.firstuse import first_contact, is_placeholder_url

    line = first_contact("gw", "https://gw.example.com/api/v1/models")
    assert line == "sending the key of channel gw to host gw.example.com for the first time"
    assert first_contact("other", "https://gw.example.com/v1") is None
    assert first_contact("gw", "http://127.0.0.1:8000/v1") is not None
    assert is_placeholder_url("https://your-gateway.example/api") and not is_placeholder_url("https://old.example.com")


def test_version_bench_help_and_a_missing_model_path(temp_home: Path) -> None:
    r = run(temp_home, "--version")
    assert r.returncode == 0 and re.fullmatch(r"conduit-sync \S+\n", r.stdout), r.stdout
    r = run(temp_home, "bench", "--help")
    assert r.returncode == 0 and "[vllm]" in r.stdout and "\\[" not in r.stdout
    r = run(temp_home, "plan", str(temp_home / "models" / "nope"))
    assert r.returncode == 1 and "does not exist" in r.stderr and "models--" not in r.stderr, r.stderr


def test_service_docs_say_what_enable_enables() -> None:
    """`--enable` enables the sync unit only; the agent's needs `--agent` (daemon/cli/daemon.py)."""
    from conduit.daemon.cli.daemon import install_units

    assert "conduit-agent" not in " ".join(install_units.__doc__ or "").split("(the sync unit")[0]
    for doc in ("README.md", "docs/daemon.md"):
        line = next(x for x in (ROOT / doc).read_text().splitlines() if x.startswith("conduit service install"))
        assert "--agent" in line, (doc, line)


def test_tool_installs_never_write_the_real_home(tmp_path: Path) -> None:
    """tests/realtools/ensure_tools.sh runs npm (whose install scripts run OpenCode and Kilo once, which create
    their folders under HOME) with HOME in a scratch folder: every `npm` there is the sandboxing function."""
    script = (ROOT / "tests/realtools/ensure_tools.sh").read_text()
    fn = re.search(r"^npm\(\) \{\n.*?^\}\n", script, re.M | re.S)
    assert fn is not None, "ensure_tools.sh defines no npm() wrapper"
    assert not re.search(r"(command|/)npm install", script)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "npm").write_text('#!/bin/sh\necho "HOME=$HOME XDG=${XDG_CONFIG_HOME:-}"\n')
    (fake / "npm").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", HOME="/real/home", XDG_CONFIG_HOME="/real/cfg")
    r = subprocess.run(["bash", "-c", f"CACHE={tmp_path}/cache\n{fn.group(0)}npm install x"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == f"HOME={tmp_path}/cache.home XDG=", r.stdout + r.stderr
