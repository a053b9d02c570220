"""Nothing a person names can hang conduit, exhaust its memory, outlive it or leak
through it.

Real parts only: the ``conduit`` CLI run as a subprocess under the temporary HOME (with an address-space limit,
so a regression fails with MemoryError instead of eating the machine), real FIFOs, a real ``/dev/zero`` link,
real ``/bin/sh`` key commands whose children are looked for afterwards with psutil, and the state file on disk.
Each case checks: a clear error naming the file or command, exit 1 within the bound the issue names, no tool
file written, no process left, and a canary key nowhere in stdout, stderr, ``--json`` or the state file.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers.toolfiles import claude_settings, cline_gen_c, write_profile

from conduit.daemon.cli.main import main
from conduit.daemon.config.keycommand import EXIT_GRACE_S, run_key_command
from conduit.daemon.config.profile import parse_profile
from conduit.daemon.config.redaction import REDACTOR, flag_values, redact_data
from conduit.daemon.config.sources import KeySource, read_key
from conduit.errors import KeyError_, ProfileError

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]
CANARY = "sk-canary-7f3e9a1b5c2d4e6f8a0b"
KEY_LINE = 'key = { file = "~/.config/conduit/keys/gw" }'
COMMAND_TIMEOUT_S = 15  # read_key's default: what the CLI gives a key command
AS_LIMIT = 3 << 30  # bytes of address space for a CLI run: far above its need, far below the machine's


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def conduit(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the CLI under ``home``; its session is killed if it outlives ``timeout`` (then the test fails)."""
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1", CANARY_KEY=CANARY)
    proc = subprocess.Popen([*CONDUIT, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            preexec_fn=_limit_memory)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"`conduit {' '.join(args)}` hung for {timeout:g} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def tool_files(home: Path) -> dict[Path, bytes]:
    """Every file of the two tools (Claude Code, Cline) under ``home``."""
    return {p: p.read_bytes() for d in (".claude", ".cline") for p in (home / d).rglob("*") if p.is_file()}


@pytest.fixture
def setup(temp_home: Path) -> Path:
    """Claude Code and Cline configured, a profile syncing both from channel ``gw``; returns the profile."""
    claude_settings(temp_home, {"permissions": {"allow": ["Bash"]}})
    cline_gen_c(temp_home)
    return write_profile(temp_home, tools=("claude_code", "cline"), key_delivery="copy")  # the key read, in the file


def use_source(profile: Path, source: str) -> None:
    text = profile.read_text()
    assert KEY_LINE in text
    profile.write_text(text.replace(KEY_LINE, f"key = {source}"))


def state_text(home: Path) -> str:
    path = home / ".local/state/conduit/sync.json"
    return path.read_text() if path.exists() else ""


def sleepers(seconds: int, settle_s: float = 5.0) -> set[int]:
    """Live (not zombie) ``sleep <seconds>`` processes: what a key command left behind. One just sent SIGKILL may
    still be on its way out on a loaded machine, so each found is given ``settle_s`` to die; a survivor (never
    killed) sleeps for days and stays."""
    found = set()
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["cmdline"] == ["sleep", str(seconds)] and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.add(p)
    _, alive = psutil.wait_procs(list(found), timeout=settle_s) if found else ([], [])
    left = set()
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.status() != psutil.STATUS_ZOMBIE:
                left.add(p.pid)
    return left


@pytest.fixture
def sleep_s() -> object:
    """A sleep length no other test uses (tests of other files may run `sleep 1000` too); its leftovers are
    killed afterwards, whatever the test found."""
    seconds = random.randint(100_000, 999_999)
    yield seconds
    for pid in sleepers(seconds):
        os.kill(pid, signal.SIGKILL)


def assert_refused(home: Path, before: dict[Path, bytes], expect: str, *, bound_s: float = 60) -> None:
    """``sync``, ``sync --json`` and ``doctor --json`` each fail within ``bound_s`` with ``expect`` said, no
    tool file written, no traceback, and the canary nowhere."""
    start = time.monotonic()
    r = conduit(home, "sync", timeout=bound_s)
    assert time.monotonic() - start < bound_s
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert expect in r.stdout + r.stderr, (r.stdout, r.stderr)
    seen = r.stdout + r.stderr
    j = conduit(home, "sync", "--json", timeout=bound_s)
    d = conduit(home, "doctor", "--json", timeout=bound_s)
    for run in (r, j, d):
        assert "Traceback" not in run.stdout + run.stderr and "internal error" not in run.stderr, run.stderr
        seen += run.stdout + run.stderr
    if j.stdout.strip():
        json.loads(j.stdout)
    json.loads(d.stdout)
    assert CANARY not in seen + state_text(home)
    assert tool_files(home) == before


# ------------------------------------------------------------------------------ files that are not files


def test_fifo_as_key_file(setup: Path, temp_home: Path) -> None:
    key = temp_home / ".config/conduit/keys/gw"
    key.unlink()
    os.mkfifo(key, 0o600)
    assert_refused(temp_home, tool_files(temp_home), f"{key}: the key file is not a regular file (named pipe)")


def test_fifo_as_secrets_file(setup: Path, temp_home: Path) -> None:
    use_source(setup, '{ secret = "gw" }')
    secrets = temp_home / ".config/conduit/secrets.toml"
    os.mkfifo(secrets, 0o600)
    assert_refused(temp_home, tool_files(temp_home), f"{secrets}: the secrets file is not a regular file")


def test_fifo_as_profile(setup: Path, temp_home: Path) -> None:
    setup.unlink()
    os.mkfifo(setup, 0o600)
    before = tool_files(temp_home)
    r = conduit(temp_home, "sync")
    assert r.returncode == 1 and f"{setup}: the profile is not a regular file (named pipe)" in r.stderr, r.stderr
    d = conduit(temp_home, "doctor", "--json")
    assert "not a regular file" in d.stdout
    assert tool_files(temp_home) == before


def test_dev_zero_linked_as_profile(setup: Path, temp_home: Path) -> None:
    setup.unlink()
    setup.symlink_to("/dev/zero")
    before = tool_files(temp_home)
    for args in (("sync",), ("use", "other-model"), ("init", "--force", "--no-discover")):
        r = conduit(temp_home, *args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert f"{setup}: the profile is not a regular file (character device)" in r.stderr, (args, r.stderr)
        assert "MemoryError" not in r.stderr
    assert tool_files(temp_home) == before and setup.is_symlink()


def test_oversized_profile_is_refused_by_size(temp_home: Path, setup: Path) -> None:
    with setup.open("a") as fh:
        fh.write("# padding\n" * 120_000)
    r = conduit(temp_home, "sync")
    assert r.returncode == 1 and "over the 1048576-byte limit" in r.stderr, r.stderr


# ------------------------------------------------------------------------------ key commands


def test_hanging_command_is_killed_at_the_timeout(setup: Path, temp_home: Path, sleep_s: int) -> None:
    use_source(setup, f'{{ command = "sleep {sleep_s}" }}')
    assert_refused(temp_home, tool_files(temp_home), f"did not finish within {COMMAND_TIMEOUT_S} s",
                   bound_s=COMMAND_TIMEOUT_S + 30)
    assert not sleepers(sleep_s), "the key command outlived conduit"


def test_daemonized_child_holding_stdout_does_not_hold_the_sync(setup: Path, temp_home: Path, sleep_s: int) -> None:
    """The command prints the key and exits; the child it left keeps stdout open. The sync goes on with the
    key after a short grace, and the child is killed with the command's process group."""
    use_source(setup, f'{{ command = "(sleep {sleep_s} &) ; echo sk-test-held-0123456789" }}')
    r = conduit(temp_home, "sync", timeout=COMMAND_TIMEOUT_S)  # not until the child exits
    assert r.returncode == 0, (r.stdout, r.stderr)
    settings = json.loads((temp_home / ".claude/settings.json").read_text())
    assert settings["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-test-held-0123456789"
    assert not sleepers(sleep_s), "the command's daemonized child survived"


def test_daemonized_child_of_a_failing_command(setup: Path, temp_home: Path, sleep_s: int) -> None:
    use_source(setup, f'{{ command = "(sleep {sleep_s} &) ; echo \\"$CANARY_KEY\\" >&2; exit 1" }}')
    assert_refused(temp_home, tool_files(temp_home), "exited with status 1", bound_s=COMMAND_TIMEOUT_S)
    assert not sleepers(sleep_s)


def test_endless_output_is_cut_at_the_cap(setup: Path, temp_home: Path) -> None:
    use_source(setup, '{ command = "yes" }')
    assert_refused(temp_home, tool_files(temp_home), "printed more than 65536 bytes; a key is one line")
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["yes"]
                and p.status() != psutil.STATUS_ZOMBIE and os.getsid(p.pid) != os.getsid(0)]


def test_command_printing_the_key_on_stderr_shows_only_its_status(setup: Path, temp_home: Path) -> None:
    """`pass`-like failure: the key on stdout and on stderr, exit 1. Only the status and a hint are shown."""
    use_source(setup, '{ command = "printf \'%s\\\\n\' \\"$CANARY_KEY\\"; echo \\"bad: $CANARY_KEY\\" >&2; exit 1" }')
    before = tool_files(temp_home)
    assert_refused(temp_home, before, "exited with status 1")
    r = conduit(temp_home, "sync")
    assert "run it yourself to see why" in r.stdout + r.stderr
    d = conduit(temp_home, "doctor")
    assert CANARY not in d.stdout + d.stderr


# ------------------------------------------------------------------------------ the runner, in process


def test_runner_returns_promptly_when_a_child_holds_stdout(sleep_s: int) -> None:
    start = time.monotonic()
    out = run_key_command(f"(sleep {sleep_s} &); echo key", described="c", environ=os.environ, timeout_s=30)
    assert out == b"key\n"
    assert time.monotonic() - start < 30, "waited for the child instead of the command"
    assert not sleepers(sleep_s)
    assert EXIT_GRACE_S < 30


def test_runner_kills_a_command_that_closes_stdout_and_keeps_running(sleep_s: int) -> None:
    with pytest.raises(KeyError_, match="did not finish within 2 s"):
        run_key_command(f"echo key; exec >&-; sleep {sleep_s}", described="c", environ=os.environ, timeout_s=2)
    assert not sleepers(sleep_s)


# ------------------------------------------------------------------------------ smaller (item 11)


BASE = 'version = 1\nchannel = "c"\nmodel = "m"\n[channels.c]\nbase_url = "https://x"\n'


@pytest.mark.parametrize("text,expect", [
    (BASE + "timeout = inf\n", "`channels.c.timeout`: Input should be a finite number"),
    (BASE + "timeout = nan\n", "`channels.c.timeout`: Input should be a finite number"),
    (BASE + "timeout = 1e300\n", "`channels.c.timeout`: Input should be less than or equal to 3600"),
    (BASE + "timeout = true\n", "`channels.c.timeout`: expected a number, not `true`"),
    (BASE.replace("version = 1", "version = true"), "`version`: expected an integer, not `true`"),
    (BASE + '[vllm]\nmodel = "/m"\nport = true\n', "`vllm.port`: expected an integer, not `true`"),
    (BASE + '[vllm]\nmodel = "/m"\nmax_num_seqs = false\n', "`vllm.max_num_seqs`: expected an integer"),
    (BASE + '[vllm]\nmodel = "/m"\nstartup_timeout_s = inf\n', "`vllm.startup_timeout_s`: Input should be a finite"),
    (BASE + '[vllm]\nmodel = "/m"\nenforce_eager = 1\n', "`vllm.enforce_eager`: Input should be a valid boolean"),
    (BASE + '[vllm]\nmodel = "/m"\n[vllm.restart]\nmax_restarts = true\n', "`vllm.restart.max_restarts`: expected"),
    (BASE + "[tools.cline]\nenabled = 1\n", "`tools.cline.enabled`: must be true or false, without quotes"),
])
def test_numbers_and_switches_are_taken_at_their_word(tmp_path: Path, text: str, expect: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(text, tmp_path / "p.toml")
    assert expect in str(info.value)


def test_timeout_inf_is_a_profile_error_in_the_cli(setup: Path, temp_home: Path) -> None:
    setup.write_text(setup.read_text().replace('auth = "bearer"', 'auth = "bearer"\ntimeout = inf'))
    r = conduit(temp_home, "sync")
    assert r.returncode == 1 and "channels.gw.timeout" in r.stderr and "finite" in r.stderr, r.stderr
    assert "internal error" not in r.stderr


# ------------------------------------------------------------------------------ one redaction


def test_read_keys_are_masked_in_the_process_redactor(temp_home: Path) -> None:
    key = temp_home / "k"
    key.write_text("sk-test-learned-0123456789\n")
    read_key(KeySource(file=str(key)))
    assert REDACTOR("x sk-test-learned-0123456789 y") == "x sk-...6789 y"
    assert redact_data({"a": ["sk-test-learned-0123456789"]}) == {"a": ["sk-...6789"]}


def test_key_like_flag_values() -> None:
    argv = ["--api-key", "sk-a-1234", "--hf-token=hf_5678", "--max-num-batched-tokens", "8", "--model", "m"]
    assert flag_values(argv) == ["sk-a-1234", "hf_5678"]


def test_cli_errors_pass_through_the_redactor(temp_home: Path, setup: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """main() masks what it prints with the keys this process read (an error that quotes one)."""
    secret = "sk-test-quoted-0123456789"
    REDACTOR.add([secret])
    assert main(["use", "x", "--channel", secret]) == 3
    err = capsys.readouterr().err
    assert "is not defined" in err and secret not in err and "sk-...6789" in err


def test_every_output_masks_a_key_the_profile_resolved(setup: Path, temp_home: Path) -> None:
    """Channel `gw` resolves the canary; channel `bad` fails with a message quoting it (its command holds it
    literally). sync, sync --json, doctor --json and the state file show the fingerprint only."""
    (temp_home / ".config/conduit/keys/gw").write_text(CANARY + "\n")
    text = setup.read_text().replace("[tools.cline]", '[tools.cline]\nchannel = "bad"')
    text += f'\n[channels.bad]\nbase_url = "https://bad.example.com"\nkey = {{ command = "false {CANARY}" }}\n'
    setup.write_text(text)
    seen = ""
    for args in (("sync",), ("sync", "--json"), ("doctor", "--json")):
        r = conduit(temp_home, *args)
        assert "exited with status 1" in r.stdout + r.stderr, (args, r.stdout, r.stderr)
        seen += r.stdout + r.stderr
    assert "false sk-...8a0b" in seen
    assert json.loads((temp_home / ".claude/settings.json").read_text())["env"]["ANTHROPIC_AUTH_TOKEN"] == CANARY
    assert CANARY not in seen + state_text(temp_home)


def test_runner_in_a_child_subreaper_leaves_no_zombie(sleep_s: int) -> None:
    """In the agent (a child subreaper) the command's orphans are re-parented to it: they are reaped too."""
    code = f"""
import ctypes, os, psutil
from conduit.daemon.config.keycommand import run_key_command
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
out = run_key_command("(sleep {sleep_s} &); echo key", described="c", environ=os.environ, timeout_s=30)
assert out == b"key\\n", out
print(len(psutil.Process().children(recursive=True)))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0", "a killed orphan of the key command stayed a zombie of the subreaper"
    assert not sleepers(sleep_s)
