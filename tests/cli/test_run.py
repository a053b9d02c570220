"""``conduit run`` and ``conduit env`` with stand-in binaries (small Python scripts on PATH): the session gets the
profile's settings (its ``run_env``, or a re-rendered temporary copy of the tool's files), the exit code is the
tool's, and no file of the user's changes (byte-compared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.toolfiles import claude_settings, write_profile

from conduit.daemon.verify.gateway import RecordingGateway

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]
KEY = "sk-run-0123456789abcdef"
LOCAL_KEY = "sk-local-9876543210fedcba"
SECOND = """
[channels.second]
base_url = "http://127.0.0.1:{port}/second"
protocols = ["openai", "anthropic"]
key = {{ env = "SECOND_KEY" }}
"""

# Prints its environment as JSON to $STANDIN_OUT, and for Claude Code the settings it finds; POSTs one chat request
# to Copilot's base URL when asked; exits with $STANDIN_EXIT.
STANDIN = """#!{python}
import json, os, sys, urllib.request
e = dict(os.environ)
cfg = os.path.join(e.get("CLAUDE_CONFIG_DIR", ""), "settings.json")
out = {{"env": e, "argv": sys.argv[1:], "settings": open(cfg).read() if os.path.isfile(cfg) else None,
       "state": os.path.isfile(os.path.join(e.get("CLAUDE_CONFIG_DIR", "/nonexistent"), ".claude.json"))}}
if e.get("COPILOT_PROVIDER_BASE_URL") and "--post" in sys.argv:
    body = json.dumps({{"model": e["COPILOT_MODEL"], "messages": [{{"role": "user", "content": "hi"}}]}}).encode()
    req = urllib.request.Request(e["COPILOT_PROVIDER_BASE_URL"] + "/chat/completions", body,
                                 {{"Authorization": "Bearer " + e["COPILOT_PROVIDER_API_KEY"],
                                   "Content-Type": "application/json"}})
    urllib.request.urlopen(req, timeout=10).read()
open(e["STANDIN_OUT"], "w").write(json.dumps(out))
sys.exit(int(e.get("STANDIN_EXIT", "0")))
"""


def standin(bin_dir: Path, name: str) -> Path:
    """A stand-in ``name`` in ``bin_dir`` (see ``STANDIN``)."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(STANDIN.format(python=sys.executable))
    path.chmod(0o755)
    return path


def conduit(home: Path, *args: str, bin_dir: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1", SECOND_KEY=LOCAL_KEY, **extra)
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([*CONDUIT, *args], capture_output=True, text=True, env=env, timeout=60, cwd=home)


def snapshot(home: Path) -> dict[Path, bytes]:
    """Every file under HOME."""
    return {p: p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def profile(home: Path, tools: tuple[str, ...], port: int = 9) -> None:
    write_profile(home, tools=tools, key_text=KEY + "\n", model="main-model", small_model=None,
                  extra=SECOND.format(port=port))


def test_env_prints_exports_with_the_key_masked(temp_home: Path) -> None:
    profile(temp_home, ("copilot",))
    r = conduit(temp_home, "env", "copilot")
    assert r.returncode == 0, r.stderr
    assert "export COPILOT_PROVIDER_BASE_URL=https://gw.example.com/api/v1\n" in r.stdout
    assert "export COPILOT_PROVIDER_TYPE=openai\n" in r.stdout
    assert "export COPILOT_MODEL=main-model\n" in r.stdout
    assert "unset COPILOT_PROVIDER_BEARER_TOKEN\n" in r.stdout
    assert KEY not in r.stdout + r.stderr
    assert "# export COPILOT_PROVIDER_API_KEY=sk-...cdef" in r.stdout and "--show-key" in r.stderr


def test_env_show_key_is_eval_ready_and_channel_model_apply(temp_home: Path) -> None:
    profile(temp_home, ("copilot",))
    r = conduit(temp_home, "env", "copilot", "--show-key", "--channel", "second", "--model", "other model")
    assert r.returncode == 0, r.stderr
    shell = subprocess.run(["sh", "-c", r.stdout + '\nenv'], capture_output=True, text=True, timeout=10,
                           env={"PATH": "/usr/bin:/bin", "COPILOT_PROVIDER_BEARER_TOKEN": "x"})
    seen = dict(line.split("=", 1) for line in shell.stdout.splitlines() if "=" in line)
    assert seen["COPILOT_PROVIDER_BASE_URL"] == "http://127.0.0.1:9/second/v1"
    assert seen["COPILOT_PROVIDER_API_KEY"] == LOCAL_KEY
    assert seen["COPILOT_MODEL"] == "other model"  # shell-quoted
    assert "COPILOT_PROVIDER_BEARER_TOKEN" not in seen


@pytest.mark.parametrize(("args", "code", "words"), [
    (("env", "codex"), 3, "takes its settings from its files"),
    (("env", "gemini"), 3, "not enabled"),
    (("env", "claude_cod"), 3, "did you mean `claude_code`"),
    (("env", "copilot", "--channel", "nope"), 3, "nope"),
    (("run", "copilot", "--", "-p", "hi"), 127, "none of copilot is on PATH"),
])
def test_bad_arguments_and_missing_binary(temp_home: Path, args: tuple[str, ...], code: int, words: str) -> None:
    profile(temp_home, ("copilot", "codex"))  # Codex: enabled, but configured by its files (no variables)
    r = conduit(temp_home, *args, PATH="/usr/bin:/bin")
    assert r.returncode == code, r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr


def test_run_copilot_reaches_the_gateway_with_the_profile(temp_home: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    standin(bin_dir, "copilot")
    out = tmp_path / "out.json"
    with RecordingGateway() as gw:
        profile(temp_home, ("copilot",), port=gw.port)
        before = snapshot(temp_home)
        r = conduit(temp_home, "run", "copilot", "--channel", "second", "--", "-p", "say ok", "--post",
                    bin_dir=bin_dir, STANDIN_OUT=str(out), STANDIN_EXIT="7", COPILOT_PROVIDER_WIRE_MODEL="wrong",
                    COPILOT_PROVIDER_API_KEY="sk-shell-key-000000")
        reqs = gw.recorded()
    assert r.returncode == 7, r.stderr  # the tool's exit code
    assert "unset for this session: COPILOT_PROVIDER_WIRE_MODEL" in r.stderr
    seen = json.loads(out.read_text())
    assert seen["argv"] == ["-p", "say ok", "--post"]
    assert "COPILOT_PROVIDER_WIRE_MODEL" not in seen["env"]
    [req] = reqs
    assert (req.path, req.auth_value, req.model) == ("/second/v1/chat/completions", LOCAL_KEY, "main-model")
    assert snapshot(temp_home) == before


def test_run_claude_code_gets_a_rerendered_copy_and_the_users_file_is_untouched(temp_home: Path,
                                                                              tmp_path: Path) -> None:
    profile(temp_home, ("claude_code",), port=4321)
    claude_settings(temp_home, {"permissions": {"allow": ["Bash"]},
                                "env": {"ANTHROPIC_BASE_URL": "https://elsewhere.example.com", "KEEP": "1"}})
    (temp_home / ".claude.json").write_text('{"hasCompletedOnboarding": true}\n')
    bin_dir = tmp_path / "bin"
    standin(bin_dir, "claude")
    out = tmp_path / "out.json"
    before = snapshot(temp_home)
    r = conduit(temp_home, "run", "claude_code", "--channel", "second", "--", "-p", "say ok", bin_dir=bin_dir,
                STANDIN_OUT=str(out), ANTHROPIC_API_KEY="sk-shell-key-000000")
    assert r.returncode == 0, r.stderr
    seen = json.loads(out.read_text())
    cfg_dir = Path(seen["env"]["CLAUDE_CONFIG_DIR"])
    assert seen["env"]["HOME"] == str(temp_home)  # only the tool's directory moved
    assert seen["state"]  # ~/.claude.json copied where Claude Code looks with CLAUDE_CONFIG_DIR set
    written = json.loads(seen["settings"])
    assert written["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4321/second"
    assert written["env"]["KEEP"] == "1" and written["permissions"] == {"allow": ["Bash"]}
    # the key by reference (the default): the copy's apiKeyHelper prints the channel's key, no variable holds it
    assert "ANTHROPIC_AUTH_TOKEN" not in written["env"] and written["apiKeyHelper"].endswith(" key print second")
    assert not {"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"} & set(seen["env"])
    helper = subprocess.run(["/bin/sh", "-c", written["apiKeyHelper"]], capture_output=True, text=True, timeout=60,
                            env={"HOME": str(temp_home), "PATH": "/usr/bin:/bin", "SECOND_KEY": seen["env"]["SECOND_KEY"]})
    assert helper.stdout == LOCAL_KEY + "\n", helper.stderr
    assert not cfg_dir.exists()  # the temporary copy is gone
    assert snapshot(temp_home) == before
