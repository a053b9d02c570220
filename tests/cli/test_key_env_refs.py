"""References to an environment variable (docs/keys.md "Where each tool's key rests"): Codex ``key_method =
"env"``, Qwen Code, Droid and Crush ``key_source = "env"``, Zed (always). `conduit sync` writes the reference and
no key; switching from the copy removes the copy conduit left in the tool's ``.env``; `conduit env TOOL` prints
the variable (masked, or the key with ``--show-key``); `conduit run TOOL` gives it to the tool (a stand-in binary
that records its environment). Real files under a temporary HOME, the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.toolfiles import write_profile

KEY = "sk-envref-0123456789abcdefQQ"
TOOLS = {"codex": ('key_method = "env"', ".codex/config.toml", 'env_key = "CONDUIT_API_KEY"'),
         "qwen": ('key_source = "env"', ".qwen/settings.json", '"envKey": "CONDUIT_API_KEY"'),
         "droid": ('key_source = "env"', ".factory/settings.json", '"apiKey": "${CONDUIT_API_KEY}"'),
         "crush": ('key_source = "env"', ".config/crush/crush.json", '"api_key": "$CONDUIT_API_KEY"'),
         "zed": ("", ".config/zed/settings.json", '"openai_compatible"'),
         "opencode": ('key_source = "env"', ".config/opencode/opencode.json", '"apiKey": "{env:CONDUIT_API_KEY}"'),
         "kilo": ('key_source = "env"', ".config/kilo/kilo.jsonc", '"apiKey": "{env:CONDUIT_API_KEY}"')}
COPY = {"codex": ".codex/.env", "qwen": ".qwen/.env"}
"""The file holding the copy of the key by default, where the tool has one apart from its settings file.
OpenCode's and Kilo's default file reference (conduit's ``tool-keys/CHANNEL.key``, shared by tools) starts in
``env`` here: a sync does not remove that shared file when one tool leaves it."""
FRESH = ("opencode", "kilo")


def conduit(home: Path, *args: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1", PATH=path)
    env.pop("CONDUIT_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "conduit.daemon.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60, cwd=home)


def setup(home: Path, tool: str, option: str) -> Path:
    profile = write_profile(home, "http://127.0.0.1:9/api", key_text=KEY + "\n", tools=(),
                            extra=f"[tools.{tool}]\ncreate = true\n{option}\n")
    return profile


def holding(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes())


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_reference_holds_no_key_and_conduit_env_gives_it(tool: str, temp_home: Path) -> None:
    option, settings, reference = TOOLS[tool]
    profile = setup(temp_home, tool, option if tool in FRESH else "")
    assert conduit(temp_home, "sync").returncode == 0
    if tool in COPY:
        assert COPY[tool] in holding(temp_home)  # the default: a copy
    if tool not in FRESH:
        profile.write_text(profile.read_text().replace("create = true\n", f"create = true\n{option}\n"))
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stdout + r.stderr
    assert holding(temp_home) == [".config/conduit/keys/gw"]  # the copy is gone, the reference holds none
    assert reference in (temp_home / settings).read_text()
    r = conduit(temp_home, "env", tool)
    assert r.returncode == 0 and KEY not in r.stdout, r.stderr
    assert "# export CONDUIT_API_KEY=sk-...efQQ" in r.stdout.replace("'", "")
    r = conduit(temp_home, "env", tool, "--show-key")
    assert f"export CONDUIT_API_KEY={KEY}" in r.stdout


def test_conduit_run_starts_codex_with_the_key_in_its_environment(temp_home: Path, tmp_path: Path) -> None:
    setup(temp_home, "codex", 'key_method = "env"')
    assert conduit(temp_home, "sync").returncode == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = tmp_path / "seen.json"
    (bin_dir / "codex").write_text(f"#!{sys.executable}\nimport json, os\n"
                                   f"open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))\n")
    (bin_dir / "codex").chmod(0o755)
    r = conduit(temp_home, "run", "codex", "--", "exec", "hi", path=f"{bin_dir}:/usr/bin:/bin")
    assert r.returncode == 0, r.stderr
    seen = json.loads(out.read_text())
    assert seen["CONDUIT_API_KEY"] == KEY
    assert KEY not in r.stdout + r.stderr
    assert holding(temp_home) == [".config/conduit/keys/gw"]


def test_default_codex_keeps_refusing_conduit_env(temp_home: Path) -> None:
    setup(temp_home, "codex", "")
    r = conduit(temp_home, "env", "codex")
    assert r.returncode == 3 and "takes its settings from its files" in r.stderr
