"""Everyday friction: what a new user sees when a command refuses, fails or prints, asserted as shown.

Each test runs the real CLI (a subprocess, HOME from the suite's fixture) or the shared function it calls, and
checks the message, the exit code and what is on disk.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.toolfiles import (
    CLAUDE_SETTINGS,
    DEEPSEEK_ID,
    cc_switch_db,
    claude_settings,
    cline_gen_c,
    write_profile,
)
from hypothesis import given
from hypothesis import strategies as st

from conduit.adapters.base import Env
from conduit.adapters.cc_switch import selected_provider
from conduit.daemon.cli.agent import render_status
from conduit.daemon.cli.daemon import systemctl_failure
from conduit.daemon.config.normalize import clean_key
from conduit.redact import fingerprint

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]


def conduit(home: Path, *args: str, stdin: str | None = None, columns: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a person runs it with its output piped (no COLUMNS unless ``columns``); ``env`` added."""
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", **(env or {}))
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = "200"
    return subprocess.run([*CONDUIT, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def profile_path(home: Path) -> Path:
    return home / ".config" / "conduit" / "profile.toml"


# ------------------------------------------------------------------------------------------------ keys

_KEY = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", min_size=1, max_size=40)
_WRAP = st.sampled_from(["space", "tab", "newline", "crlf", '"', "'", "`", "curly", "bearer", "Bearer", "BEARER",
                         "authorization"])


def _wrap(key: str, layers: list[str]) -> str:
    for layer in layers:
        key = {"space": f"  {key} ", "tab": f"\t{key}\t", "newline": f"{key}\n", "crlf": f"\r\n{key}\r\n",
               '"': f'"{key}"', "'": f"'{key}'", "`": f"`{key}`", "curly": f"\u201c{key}\u201d",
               "bearer": f"bearer {key}", "Bearer": f"Bearer  {key}", "BEARER": f"BEARER\t{key}",
               "authorization": f"Authorization: Bearer {key}"}[layer]
    return key


@given(_KEY.filter(lambda k: k.lower() != "bearer"), st.lists(_WRAP, max_size=6))
def test_any_wrapping_of_bearer_quotes_and_whitespace_cleans_to_the_same_key(key: str, layers: list[str]) -> None:
    clean = clean_key(_wrap(key, layers), source="test")
    assert clean.key == key
    assert clean_key(clean.key, source="test").key == key  # cleaning a clean key changes nothing
    assert all(key not in n for n in clean.notices if len(key) > 3)


def test_key_set_takes_a_wrapped_key_and_says_what_it_removed(temp_home: Path) -> None:
    r = conduit(temp_home, "key", "set", "gw", stdin="  Bearer 'sk-test-0123456789abcdef'  \n")
    assert r.returncode == 0, r.stderr
    assert "removed a pasted `Bearer ` prefix" in r.stdout and "removed the quotes" in r.stdout
    assert "clean_key" not in r.stdout + r.stderr and "sk-test-0123456789abcdef" not in r.stdout
    secrets = (temp_home / ".config" / "conduit" / "secrets.toml").read_text()
    assert 'gw = "sk-test-0123456789abcdef"' in secrets


def test_key_set_with_the_key_as_an_argument_exits_3_and_never_echoes_it(temp_home: Path) -> None:
    r = conduit(temp_home, "key", "set", "gw", "sk-live-secret-value-123")
    assert r.returncode == 3
    assert r.stderr.startswith("error: `conduit key set` takes no key on the command line")
    assert "sk-live-secret-value-123" not in r.stdout + r.stderr
    assert not (temp_home / ".config" / "conduit" / "secrets.toml").exists()
    usage = conduit(temp_home, "key", "set", "--help").stdout
    assert "Usage: conduit key set [OPTIONS] {name}" in usage or "Usage: conduit key set [OPTIONS] NAME" in usage
    assert "extra" not in usage.lower()


def test_a_space_inside_a_key_is_named_as_a_space(temp_home: Path) -> None:
    r = conduit(temp_home, "key", "set", "gw", stdin="sk-abc def\n")
    assert r.returncode == 1
    assert "space (U+0020) at position 6" in r.stderr and "sk-abc" not in r.stderr


# --------------------------------------------------------------------------------------------- messages


def test_unknown_key_source_gets_did_you_mean(temp_home: Path) -> None:
    p = write_profile(temp_home)
    p.write_text(p.read_text().replace('key = { file = "~/.config/conduit/keys/gw" }', 'key = { scret = "gw" }'))
    r = conduit(temp_home, "sync")
    assert r.returncode == 1
    assert "unknown key source `scret`" in r.stderr and "did you mean `secret`?" in r.stderr
    assert "Extra inputs" not in r.stderr


@pytest.mark.parametrize(("old", "new", "where", "words"), [
    ('model = "claude-sonnet-4-20250514"', "model = claude-sonnet-4-20250514", ":3:9:",
     'the value of `model` is text without quotes: write model = "..."'),
    ("[tools.cline]", "[tools.cline", ":13:13:", "a table header is not closed"),
    ('channel = "gw"', 'channel = "gw', ":2:", "a quoted value is not closed"),
    ('protocols = ["openai", "anthropic"]', 'protocols = ["openai",', ":8:", "never closed: add the `]` or `}`"),
    ("small_model =", "small model =", ":4:", "a key name holds a space"),
    ("version = 1", "version = 1\nversion = 1", ":2:", "the key `version` is written twice"),
])
def test_toml_syntax_errors_in_plain_words(temp_home: Path, old: str, new: str, where: str, words: str) -> None:
    p = write_profile(temp_home, tools=("claude_code", "cline"))
    assert old in p.read_text()
    p.write_text(p.read_text().replace(old, new, 1))
    claude_settings(temp_home, CLAUDE_SETTINGS)
    before = (temp_home / ".claude" / "settings.json").read_bytes()
    r = conduit(temp_home, "sync")
    assert r.returncode == 1
    assert f"profile.toml{where}" in r.stderr and words in r.stderr, r.stderr
    assert "Unexpected character" not in r.stderr and "Control characters" not in r.stderr
    assert (temp_home / ".claude" / "settings.json").read_bytes() == before


def test_a_key_error_is_printed_once_not_once_per_tool(temp_home: Path) -> None:
    p = write_profile(temp_home)
    p.write_text(p.read_text().replace('key = { file = "~/.config/conduit/keys/gw" }', 'key = { secret = "none" }'))
    claude_settings(temp_home, CLAUDE_SETTINGS)
    cline_gen_c(temp_home)
    cc_switch_db(temp_home)
    r = conduit(temp_home, "sync")
    assert r.returncode == 1
    assert r.stdout.count("secret `none`") == 1, r.stdout
    assert "Cline: error (the same problem as Claude Code, above)" in r.stdout


@pytest.mark.parametrize("args", [("use", "m", "--channel", "gww", "--no-sync"), ("key", "rotate", "gww"),
                                  ("bench", "--channel", "gww", "--concurrency", "1")])
def test_an_unknown_channel_exits_3_in_every_command(temp_home: Path, args: tuple[str, ...]) -> None:
    write_profile(temp_home)
    r = conduit(temp_home, *args, stdin="sk-test-0123456789abcdef\n")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "channel `gww` is not defined" in r.stderr and "did you mean `gw`?" in r.stderr


def test_systemctl_without_a_user_manager_says_what_to_do() -> None:
    line = systemctl_failure(["systemctl", "--user", "daemon-reload"], 1,
                             "Failed to connect to bus: No such file or directory\n")
    assert line.startswith("`systemctl --user daemon-reload` failed (exit 1): Failed to connect to bus")
    assert "No systemd user manager is running" in line and "loginctl enable-linger" in line
    assert "conduit daemon" in line and "[" not in line.split(":", 1)[0]
    other = systemctl_failure(["systemctl", "--user", "enable"], 5, "Unit x.service not found.\n")
    assert other == "`systemctl --user enable` failed (exit 5): Unit x.service not found."


def test_wait_errors_have_the_error_prefix(temp_home: Path) -> None:
    r = conduit(temp_home, "wait", "--vllm-ready", "--timeout", "0", "--socket", str(temp_home / "none.sock"))
    assert r.returncode == 2
    assert r.stderr.startswith("error: the conduit agent does not answer"), r.stderr


# ------------------------------------------------------------------------------------------- status, use


def test_status_shows_the_tools_as_a_table() -> None:
    status = {"agent": {"state": "ready", "pid": 1, "uptime_s": 3, "socket": "/s"}, "channels": {}, "gpus": {},
              "host": {}, "vllm": {"state": "not_configured"},
              "tools": {"tools": {"claude_code": {"status": "changed", "last_sync_at": "2026-01-01T12:00:00.000Z",
                                                  "restart_needed": True, "drift": None, "message": None},
                                  "cline": {"status": "error", "message": "cannot parse", "drift": None}}}}
    buf = io.StringIO()
    render_status(status, file=buf)
    text = buf.getvalue()
    assert "{'" not in text and "status" in text and "last sync (UTC)" in text
    row = next(line for line in text.splitlines() if "claude_code" in line)
    assert "changed" in row and "2026-01-01 12:00:00" in row and "needed" in row
    assert "cannot parse" in next(line for line in text.splitlines() if "cline" in line)


def test_use_records_its_sync_in_the_state_file(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    claude_settings(temp_home, CLAUDE_SETTINGS)
    r = conduit(temp_home, "use", "deepseek-chat")
    assert r.returncode == 0, r.stderr
    doc = json.loads((temp_home / ".local" / "state" / "conduit" / "sync.json").read_text())
    assert doc["last_sync"]["trigger"] == "conduit use" and doc["last_sync"]["ok"] is True
    assert doc["tools"]["claude_code"]["status"] == "changed"


# ---------------------------------------------------------------------------------------- per-tool problems


def test_a_channel_that_does_not_speak_a_tools_protocol_stops_that_tool_only(temp_home: Path) -> None:
    p = write_profile(temp_home, tools=())
    p.write_text(p.read_text() + '[channels.oa]\nbase_url = "https://oa.example.com"\nprotocols = ["openai"]\n'
                 '\n[tools.claude_code]\nchannel = "oa"\n\n[tools.cline]\n')
    claude_settings(temp_home, CLAUDE_SETTINGS)
    cline_gen_c(temp_home)
    before = (temp_home / ".claude" / "settings.json").read_bytes()
    r = conduit(temp_home, "sync")
    assert r.returncode == 1
    assert "Claude Code: error" in r.stdout and "Claude Code speaks the anthropic protocol" in r.stdout
    assert 'add "anthropic" to channels.oa.protocols' in r.stdout
    assert "Cline: updated" in r.stdout
    assert (temp_home / ".claude" / "settings.json").read_bytes() == before
    providers = json.loads((temp_home / ".cline" / "data" / "settings" / "providers.json").read_text())
    assert "openai-compatible" in providers["providers"]


def test_piped_dry_run_is_a_valid_patch(temp_home: Path, tmp_path: Path) -> None:
    long_url = "https://gateway." + "very-long-subdomain." * 6 + "example.com/api"
    write_profile(temp_home, long_url, tools=("claude_code",))
    settings = json.loads(json.dumps(CLAUDE_SETTINGS))
    settings["env"].pop("ANTHROPIC_AUTH_TOKEN", None)  # an old key is masked in the diff: not patchable by design
    claude_settings(temp_home, settings)
    original = (temp_home / ".claude" / "settings.json").read_text()
    r = conduit(temp_home, "sync", "--dry-run", columns=False)
    assert r.returncode == 0, r.stderr
    assert any(len(line) > 100 for line in r.stdout.splitlines())  # nothing wrapped at 80 columns
    work = tmp_path / "apply"
    work.mkdir()
    target = work / "settings.json"
    target.write_text(original)
    patched = subprocess.run(["patch", str(target)], input=r.stdout, capture_output=True, text=True, cwd=work)
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert conduit(temp_home, "sync").returncode == 0
    written = (temp_home / ".claude" / "settings.json").read_text()
    assert target.read_text() == written.replace("sk-test-abc", fingerprint("sk-test-abc"))  # the key is masked


# ---------------------------------------------------------------------------------------------- CC Switch


def _choose_in_cc_switch(db: Path, pid: str) -> None:
    """What CC Switch's window does when the user picks a provider: both layers."""
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE providers SET is_current = (id = ?) WHERE app_type = 'claude'", (pid,))
    conn.close()
    settings = db.parent / "settings.json"
    doc = json.loads(settings.read_text())
    doc["currentProviderClaude"] = pid
    settings.write_text(json.dumps(doc))


def _current(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = [r[0] for r in conn.execute("SELECT id FROM providers WHERE app_type = 'claude' AND is_current")]
    conn.close()
    return rows


def test_a_provider_chosen_in_cc_switch_is_kept_until_the_profile_changes_or_force(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    write_profile(temp_home, tools=("cc_switch",))
    assert conduit(temp_home, "sync").returncode == 0
    assert _current(db) == ["conduit-gw"]  # the first sync takes it
    _choose_in_cc_switch(db, DEEPSEEK_ID)
    assert selected_provider(Env()) == {"id": DEEPSEEK_ID, "name": "DeepSeek", "by_conduit": False,
                                        "layer": "settings.json"}
    p = profile_path(temp_home)
    p.write_text(p.read_text().replace('model = "claude-sonnet-4-20250514"', 'model = "claude-opus-4-1"'))
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stderr
    assert _current(db) == [DEEPSEEK_ID]  # the user's choice stays
    assert json.loads((db.parent / "settings.json").read_text())["currentProviderClaude"] == DEEPSEEK_ID
    with sqlite3.connect(db) as conn:
        cfg = json.loads(conn.execute("SELECT settings_config FROM providers WHERE id = 'conduit-gw'").fetchone()[0])
    conn.close()
    assert cfg["env"]["ANTHROPIC_MODEL"] == "claude-opus-4-1"  # conduit's row is still kept current
    assert conduit(temp_home, "sync", "--force").returncode == 0
    assert _current(db) == ["conduit-gw"]
    assert selected_provider(Env())["by_conduit"] is True


def test_doctor_names_the_provider_chosen_in_cc_switch_and_stays_in_sync(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    write_profile(temp_home, tools=("cc_switch",))
    assert conduit(temp_home, "sync").returncode == 0
    _choose_in_cc_switch(db, DEEPSEEK_ID)
    r = conduit(temp_home, "doctor", "--json")
    tool = json.loads(r.stdout)["tools"]["cc_switch"]
    assert tool["state"] == "in_sync", tool  # the user's choice is not drift
    assert tool["facts"]["selected"] == {"id": DEEPSEEK_ID, "name": "DeepSeek", "by_conduit": False,
                                           "layer": "settings.json"}
    table = conduit(temp_home, "doctor")
    assert "selected in CC Switch: DeepSeek" in " ".join(table.stdout.split())


def test_an_unreadable_choices_record_never_takes_the_users_pick_back(temp_home: Path) -> None:
    """A corrupt choices.json read as "nothing remembered" took back the provider the user picked (a review
    finding): unreadable now means unknown, and the user's choice stays."""
    db = cc_switch_db(temp_home)
    write_profile(temp_home, tools=("cc_switch",))
    assert conduit(temp_home, "sync").returncode == 0
    _choose_in_cc_switch(db, DEEPSEEK_ID)
    record = temp_home / ".local" / "state" / "conduit" / "choices.json"
    assert record.is_file()
    record.write_text("{half a save")
    assert conduit(temp_home, "sync").returncode == 0
    assert _current(db) == [DEEPSEEK_ID]
    assert json.loads(record.read_text()) == {"cc_switch": "gw"}  # rewritten whole


def test_a_changed_channel_takes_the_cc_switch_choice_back(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    p = write_profile(temp_home, tools=("cc_switch",))
    p.write_text(p.read_text() + '[channels.other]\nbase_url = "https://other.example.com"\n'
                 'protocols = ["anthropic"]\nkey = { file = "~/.config/conduit/keys/gw" }\n')
    assert conduit(temp_home, "sync").returncode == 0
    _choose_in_cc_switch(db, DEEPSEEK_ID)
    r = conduit(temp_home, "use", "claude-sonnet-4-20250514", "--channel", "other")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _current(db) == ["conduit-other"]
    assert json.loads((db.parent / "settings.json").read_text())["currentProviderClaude"] == "conduit-other"


def test_a_placeholder_model_is_refused_every_time_and_nothing_is_written(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",), model="MODEL-NAME")  # what `conduit init` proposes
    claude_settings(temp_home, CLAUDE_SETTINGS)
    settings = temp_home / ".claude" / "settings.json"
    before = settings.read_bytes()
    for _ in range(2):  # every sync says it, and none writes the placeholder into a tool that worked
        r = conduit(temp_home, "sync")
        assert r.returncode == 1, r.stderr
        assert 'warning model = "MODEL-NAME" looks like a placeholder, not a model id' in r.stdout
        assert "model `MODEL-NAME` is a placeholder, not a model id: nothing written for Claude Code" in r.stdout
        assert settings.read_bytes() == before
    write_profile(temp_home, tools=("claude_code",), model="deepseek-chat")
    r = conduit(temp_home, "sync")
    assert r.returncode == 0 and "is a placeholder" not in r.stdout and b"deepseek-chat" in settings.read_bytes()


def test_plan_errors_name_the_flag_not_the_setting(temp_home: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "num_attention_heads": 16,
        "num_key_value_heads": 8, "num_hidden_layers": 4, "intermediate_size": 2048, "vocab_size": 32000,
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}))
    for flags, want in ((("--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization: must be in (0, 1]"),
                        (("--max-model-len", "0"), "--max-model-len: must be a positive integer"),
                        (("--max-num-seqs", "-2"), "--max-num-seqs: must be a positive integer")):
        r = conduit(temp_home, "plan", str(tmp_path), "--gpu-memory", "80GiB", *flags)
        assert r.returncode == 3 and want in r.stderr, r.stderr
        assert "gpu_memory_utilization" not in r.stderr and "Traceback" not in r.stderr


def test_an_agent_that_is_not_running_is_said_in_words(temp_home: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env_sock = {"CONDUIT_AGENT_SOCKET": str(run / "agent.sock")}
    r = conduit(temp_home, "status", env=env_sock)
    assert r.returncode == 2 and "(no socket there: the agent is not running)" in r.stderr, r.stderr
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(run / "agent.sock"))  # bound, never listening: what an agent killed hard leaves
    try:
        for args in (("status",), ("wait", "--timeout", "1s", "--vram-free", "1GiB")):
            r = conduit(temp_home, *args, env=env_sock)
            assert r.returncode == 2 and "left over from an agent that stopped" in r.stderr, r.stderr
            assert "Errno" not in r.stderr and "ConnectError" not in r.stderr
    finally:
        stale.close()


def test_a_value_of_the_wrong_kind_is_said_in_plain_words(temp_home: Path) -> None:
    """pydantic's "Input should be a valid number, unable to parse string as a number" was shown as it is."""
    p = write_profile(temp_home, tools=("claude_code",))
    good = p.read_text()
    p.write_text(good.replace('auth = "bearer"\n', 'auth = "bearer"\ntimeout = "10m"\n'))
    r = conduit(temp_home, "sync")
    assert r.returncode == 1 and "`channels.gw.timeout`: must be a number, without quotes or a unit" in r.stderr
    assert "hint: seconds, as a number: timeout = 600" in r.stderr and "Input should" not in r.stderr
    p.write_text(good.replace('protocols = ["openai", "anthropic"]', 'protocols = ["openai", "antropic"]'))
    r = conduit(temp_home, "sync")
    assert r.returncode == 1 and "`antropic` is not one of openai, anthropic, gemini; did you mean `anthropic`?" \
        in r.stderr, r.stderr


def test_doctor_with_a_broken_profile_says_unknown_not_not_managed(temp_home: Path) -> None:
    p = write_profile(temp_home, tools=("claude_code",))
    p.write_text(p.read_text().replace('auth = "bearer"\n', 'auth = "bearer"\ntimeout = "10m"\n'))
    r = conduit(temp_home, "doctor", "--json")
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and rep["profile"]["ok"] is False
    assert {t["state"] for t in rep["tools"].values()} == {"unknown"}
    assert "fix the profile error above" in rep["tools"]["claude_code"]["fix"]


def test_verify_suggests_the_tool_name(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    r = conduit(temp_home, "verify", "claude")
    assert r.returncode == 3 and "did you mean `claude_code`?" in r.stderr, r.stderr


def test_key_set_warns_when_no_channel_reads_that_secret(temp_home: Path) -> None:
    p = write_profile(temp_home, tools=("claude_code",), key_text=None)
    p.write_text(p.read_text().replace('auth = "bearer"\n', 'auth = "bearer"\nkey = { secret = "taotoken" }\n'))
    r = conduit(temp_home, "key", "set", "taotokn", stdin="sk-1234567890abcdef\n")
    assert r.returncode == 0 and "reads secret `taotokn` yet: did you mean `taotoken`?" in r.stderr, r.stderr
    assert "a channel you are about to add: give it `key = { secret = \"taotokn\" }`" in " ".join(r.stderr.split())
    r = conduit(temp_home, "key", "set", "taotoken", stdin="sk-1234567890abcdef\n")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_profile_after_the_command_points_to_its_place(temp_home: Path) -> None:
    r = conduit(temp_home, "sync", "--profile", "/tmp/elsewhere.toml")
    assert r.returncode == 3 and "--profile goes before the command: conduit --profile PATH COMMAND" in r.stderr


def test_doctor_table_says_an_exported_base_url_is_ignored(temp_home: Path) -> None:
    """Field case C12: the reason was in --json only."""
    write_profile(temp_home, tools=("claude_code",))
    claude_settings(temp_home, CLAUDE_SETTINGS)
    assert conduit(temp_home, "sync").returncode == 0
    r = conduit(temp_home, "doctor", "--json", env={"ANTHROPIC_BASE_URL": "https://other.example.com"})
    summary = json.loads(r.stdout)["tools"]["claude_code"]["summary"]  # the table's details cell
    assert "the exported shell value https://other.example.com is ignored (settings env beats the shell)" \
        in summary, summary


def test_init_refuses_an_unknown_template_even_with_tools_present(temp_home: Path) -> None:
    claude_settings(temp_home, CLAUDE_SETTINGS)
    r = conduit(temp_home, "init", "--template", "nope")
    assert r.returncode == 3 and "no starter profile `nope`" in r.stderr, r.stdout + r.stderr
    assert not (temp_home / ".config" / "conduit" / "profile.toml").exists()


def test_a_profile_saved_with_a_bom_is_read_and_a_repeated_key_names_its_line(temp_home: Path) -> None:
    profile = write_profile(temp_home, tools=("claude_code",))
    text = profile.read_text()
    profile.write_bytes(b"\xef\xbb\xbf" + text.encode())  # Notepad's "UTF-8 with BOM"
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stderr
    assert "byte order mark" in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]["ANTHROPIC_MODEL"]
    twice = text.rstrip("\n") + '\nmodel = "a"\nmodel = "b"\n'  # repeated inside [tools.claude_code]
    profile.write_text(twice)
    r = conduit(temp_home, "sync")
    assert r.returncode == 1 and f"profile.toml:{len(twice.splitlines())}: not valid TOML" in r.stderr, r.stderr
    assert 'Key "model" already exists' in r.stderr and "remove one of the two lines" in r.stderr


def test_restore_while_the_daemon_manages_the_tool_says_how_to_keep_it(temp_home: Path, tmp_path: Path) -> None:
    from helpers.daemonproc import Daemon, wait_for

    write_profile(temp_home, tools=("claude_code",))
    claude_settings(temp_home, CLAUDE_SETTINGS)
    text = profile_path(temp_home).read_text()
    profile_path(temp_home).write_text('on_drift = "reapply"\n' + text)
    assert conduit(temp_home, "sync").returncode == 0  # a backup of the person's file exists now
    daemon = Daemon(temp_home, tmp_path).start()
    try:
        r = conduit(temp_home, "restore", "claude_code")
        assert r.returncode == 0 and "restored" in r.stdout, r.stderr
        assert f"the sync daemon (pid {daemon.proc.pid if daemon.proc else '?'}) still manages claude_code and " \
               "writes the profile back over it" in r.stderr, r.stderr
        assert "`enabled = false` in [tools.claude_code]" in r.stderr
        wait_for(lambda: "ANTHROPIC_BASE_URL" in (temp_home / ".claude" / "settings.json").read_text(),
                 what="the daemon wrote the profile back, as the warning said")
    finally:
        daemon.stop()
    r = conduit(temp_home, "restore", "claude_code")
    assert r.returncode == 0 and "still manages" not in r.stderr  # no daemon: nothing to warn about
