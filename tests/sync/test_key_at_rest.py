"""Where keys rest: Claude Code's ``key_delivery = "reference"`` (``apiKeyHelper`` = ``conduit key print``, no key
in settings.json), `conduit key print`, and doctor's ``key_at_rest`` with its warnings (a key file readable by
others, a key inside a git work tree). Real files under a temporary HOME, the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.daemonproc import cc_switch_env, cline_settings
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

KEY = "sk-at-rest-0123456789abcdefXYZ"
NEW = "sk-at-rest-rotated-9876543210zyx"


def cli(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200", PATH="/usr/bin:/bin")
    env.pop("NOTIFY_SOCKET", None)
    return subprocess.run([sys.executable, "-m", "conduit.daemon.cli", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120)


def setup(home: Path, claude_options: str = "") -> Path:
    claude_settings(home)
    cline_gen_c(home)
    cc_switch_db(home)
    profile = write_profile(home, key_text=KEY + "\n")
    profile.write_text(profile.read_text().replace("[tools.claude_code]\n", f"[tools.claude_code]\n{claude_options}"))
    return profile


def doctor(home: Path) -> dict[str, Any]:
    r = cli(home, "doctor", "--json")
    return dict(json.loads(r.stdout))


def test_reference_writes_a_helper_and_no_key_and_survives_rotation(temp_home: Path) -> None:
    setup(temp_home, 'key_delivery = "reference"\n')
    r = cli(temp_home, "sync")
    assert r.returncode == 0, r.stdout + r.stderr
    path = temp_home / ".claude" / "settings.json"
    written = path.read_text()
    doc = json.loads(written)
    assert KEY not in written and KEY[:-4] not in written
    assert not {"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"} & set(doc["env"])
    assert doc["permissions"]  # the person's own keys stay
    helper = doc["apiKeyHelper"]
    assert helper.endswith(" key print gw")
    # the helper, run as Claude Code runs it (a shell, stdout a pipe), prints the channel's key
    run = subprocess.run(["/bin/sh", "-c", helper], capture_output=True, text=True, timeout=60,
                         env={"HOME": str(temp_home), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and run.stdout == KEY + "\n", run.stderr
    (temp_home / ".config" / "conduit" / "keys" / "gw").write_text(NEW + "\n")  # a rotation, as a file
    assert cli(temp_home, "sync").returncode == 0
    assert path.read_text() == written  # nothing to rewrite
    run = subprocess.run(["/bin/sh", "-c", helper], capture_output=True, text=True, timeout=60,
                         env={"HOME": str(temp_home), "PATH": "/usr/bin:/bin"})
    assert run.stdout == NEW + "\n"
    rest = doctor(temp_home)["tools"]
    assert rest["claude_code"]["key_at_rest"]["where"] == "reference (apiKeyHelper)"
    assert rest["claude_code"]["state"] == "in_sync"
    assert rest["cline"]["key_at_rest"]["where"] == "file 0600"
    assert rest["cc_switch"]["key_at_rest"]["where"] == "database 0600"
    assert cline_settings(temp_home)  # the copy tools still hold the key: doctor lists exactly those
    assert cc_switch_env(temp_home).get("ANTHROPIC_AUTH_TOKEN") == NEW


def test_back_to_copy_removes_conduits_helper_but_keeps_a_persons_own(temp_home: Path) -> None:
    profile = setup(temp_home, 'key_delivery = "reference"\n')
    assert cli(temp_home, "sync").returncode == 0
    profile.write_text(profile.read_text().replace('key_delivery = "reference"', 'key_delivery = "copy"'))
    assert cli(temp_home, "sync").returncode == 0
    doc = json.loads((temp_home / ".claude" / "settings.json").read_text())
    assert "apiKeyHelper" not in doc and doc["env"]["ANTHROPIC_AUTH_TOKEN"] == KEY
    doc["apiKeyHelper"] = "/usr/local/bin/my-own-helper"
    (temp_home / ".claude" / "settings.json").write_text(json.dumps(doc))
    assert cli(temp_home, "sync").returncode == 0
    assert json.loads((temp_home / ".claude" / "settings.json").read_text())["apiKeyHelper"] == \
        "/usr/local/bin/my-own-helper"


def test_a_persons_own_helper_replaced_by_reference_comes_back_with_copy(temp_home: Path) -> None:
    profile = setup(temp_home, 'key_delivery = "reference"\n')
    path = temp_home / ".claude" / "settings.json"
    doc = json.loads(path.read_text())
    doc["apiKeyHelper"] = "/usr/local/bin/my-vault-helper anthropic"
    path.write_text(json.dumps(doc))
    assert cli(temp_home, "sync").returncode == 0
    assert json.loads(path.read_text())["apiKeyHelper"].endswith(" key print gw")
    profile.write_text(profile.read_text().replace('key_delivery = "reference"', 'key_delivery = "copy"'))
    assert cli(temp_home, "sync").returncode == 0
    assert json.loads(path.read_text())["apiKeyHelper"] == "/usr/local/bin/my-vault-helper anthropic"


def test_key_print_refuses_an_unknown_channel_and_prints_nothing_else(temp_home: Path) -> None:
    setup(temp_home)
    r = cli(temp_home, "key", "print", "nope")
    assert r.returncode == 3 and r.stdout == "" and "channel `nope` is not defined" in r.stderr
    r = cli(temp_home, "key", "print", "gw")
    assert r.returncode == 0 and r.stdout == KEY + "\n" and r.stderr == ""


def test_doctor_warns_about_a_readable_key_file_and_one_inside_a_git_work_tree(temp_home: Path) -> None:
    setup(temp_home, 'key_delivery = "copy"\n')
    assert cli(temp_home, "sync").returncode == 0
    assert "holds the key" not in " ".join(doctor(temp_home)["warnings"])
    subprocess.run(["git", "init", "-q", str(temp_home / ".claude")], check=True, timeout=60)
    (temp_home / ".cline" / "data" / "settings" / "providers.json").chmod(0o644)
    report = doctor(temp_home)
    warnings = " ".join(report["warnings"])
    assert "settings.json holds the key and sits inside the git work tree" in warnings
    assert "providers.json holds the key and is readable by others (mode 0644)" in warnings
    assert report["tools"]["claude_code"]["key_at_rest"]["where"] == "file 0600"
    assert KEY not in json.dumps(report)


def test_doctor_says_an_exported_auth_variable_outranks_the_helper(temp_home: Path) -> None:
    setup(temp_home, 'key_delivery = "reference"\n')
    assert cli(temp_home, "sync").returncode == 0
    env = dict(os.environ, HOME=str(temp_home), NO_COLOR="1", PATH="/usr/bin:/bin", ANTHROPIC_AUTH_TOKEN="sk-shell")
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "doctor", "--json"], capture_output=True,
                       text=True, env=env, timeout=120)
    claude = json.loads(r.stdout)["tools"]["claude_code"]
    assert claude["state"] == "overridden"
    assert "instead of the key conduit's apiKeyHelper prints" in json.dumps(claude["blockers"])
