"""Key sources, conduit's secrets file and ``conduit key`` (field cases C06, C07, C08, C14).

Real parts only: key files under the temporary HOME, the process environment, real ``/bin/sh`` commands,
the secrets file on disk, and the ``conduit`` console script run as a subprocess (through a pipe and through a
pseudo-terminal, to show the hidden prompt does not echo).
"""

from __future__ import annotations

import os
import pty
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

from conduit.daemon.config import paths
from conduit.daemon.config.normalize import clean_key
from conduit.daemon.config.secrets import SecretsStore, key_list, key_rm, key_set
from conduit.daemon.config.sources import KeySource, key_source_from, read_key
from conduit.errors import KeyError_, ProfileError

CONDUIT = Path(sys.executable).parent / "conduit"
KEY = "sk-test-0123456789abcdef"  # fingerprint sk-...cdef


def env_for_subprocess(home: Path) -> dict[str, str]:
    """os.environ as the fixtures left it, with HOME the temporary home (as conftest's helper does)."""
    return dict(os.environ, HOME=str(home))


def write(path: Path, data: bytes | str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)
    return path


# ------------------------------------------------------------------------------------------ field cases


def test_c06_key_file_with_trailing_newline(temp_home: Path) -> None:
    write(temp_home / ".config/conduit/keys/taotoken", "sk-test-abc\n")
    clean = read_key(KeySource(file="~/.config/conduit/keys/taotoken"))
    assert clean.key == "sk-test-abc"
    assert clean.notices == ()  # an ordinary trailing newline is not worth a word


def test_c07_wrapped_key_refused_naming_the_line_break_nothing_written(temp_home: Path) -> None:
    wrapped = "sk-test-ab\ncd"
    with pytest.raises(KeyError_) as info:
        key_set("taotoken", wrapped)
    text = str(info.value)
    assert "line break (U+000A) at position 10 is not allowed in an HTTP header" in text
    assert "wrapped" in (info.value.hint or "")
    assert "sk-test-ab" not in text and "cd" not in text.split("hint:")[0].split("position")[1]
    assert not paths.secrets_path().exists()

    write(temp_home / "k", wrapped + "\n")
    with pytest.raises(KeyError_) as info:
        read_key(KeySource(file="~/k"))
    assert info.value.message == "key file ~/k: line break (U+000A) at position 10 is not allowed in an HTTP header"


def test_c08_non_ascii_character_refused_with_code_point_and_position(temp_home: Path) -> None:
    bad = "sk-test-abcd\u2211efgh"
    assert bad.index("\u2211") == 12
    with pytest.raises(KeyError_) as info:
        key_set("taotoken", bad)
    text = str(info.value)
    assert "character U+2211 at position 12 is not allowed in an HTTP header" in text
    assert "sk-test" not in text and "\u2211" not in text and "efgh" not in text
    assert not paths.secrets_path().exists()

    write(temp_home / ".config/conduit/keys/t", bad.encode())
    with pytest.raises(KeyError_) as info:
        read_key(KeySource(file="~/.config/conduit/keys/t"))
    assert info.value.message == (
        "key file ~/.config/conduit/keys/t: character U+2211 at position 12 is not allowed in an HTTP header"
    )


def test_c14_pasted_bearer_prefix_removed(temp_home: Path) -> None:
    clean = clean_key("Bearer sk-test-abc", source="test")
    assert clean.key == "sk-test-abc"
    assert clean.notices == ("removed a pasted `Bearer ` prefix (the tools add it themselves)",)
    assert clean_key("bearer  sk-test-abc", source="test").key == "sk-test-abc"
    write(temp_home / "k", "Bearer sk-test-abc\n")
    assert read_key(KeySource(file="~/k")).key == "sk-test-abc"


# ------------------------------------------------------------------------------------------ KeySource


def test_key_source_needs_exactly_one() -> None:
    for value in ({}, {"file": "~/k", "env": "X"}, {"env": "X", "command": "c", "secret": "s"}):
        with pytest.raises(ValidationError) as info:
            KeySource.model_validate(value)
        assert "a key source needs exactly one of file, env, command, secret, keyring" in str(info.value)
    with pytest.raises(ValidationError):
        KeySource.model_validate({"file": "~/k", "path": "x"})  # extra="forbid"
    with pytest.raises(ValidationError):
        KeySource(secret="bad name")
    with pytest.raises(ValidationError):
        KeySource(keyring="bad name")
    with pytest.raises(ValidationError):
        KeySource(secret="a", keyring="a")


def test_describe(temp_home: Path) -> None:
    assert KeySource(file="~/.config/conduit/keys/t").describe() == "key file ~/.config/conduit/keys/t"
    assert KeySource(env="TAO_KEY").describe() == "environment variable TAO_KEY"
    assert KeySource(command="pass show x").describe() == "command `pass show x`"
    assert KeySource(secret="tao").describe() == "secret `tao` in ~/.config/conduit/secrets.toml"
    assert KeySource(keyring="tao").describe() == "keyring entry `tao`"


def test_key_source_from_profile_value_never_echoes_a_pasted_key() -> None:
    assert key_source_from({"env": "X"}, where="p: channels.a.key") == KeySource(env="X")
    with pytest.raises(ProfileError) as info:
        key_source_from(KEY, where="p: channels.a.key")
    assert KEY not in str(info.value) and "must not be written in the profile" in str(info.value)
    with pytest.raises(ProfileError) as info:
        key_source_from({"file": KEY, "env": "X"}, where="p: channels.a.key")
    assert KEY not in str(info.value)
    assert info.value.message == ("p: channels.a.key: a key source needs exactly one of file, env, command, secret, "
                                  "keyring")


# ------------------------------------------------------------------------------------------ key files


def test_missing_key_file_names_the_path_and_what_to_do() -> None:
    with pytest.raises(KeyError_) as info:
        read_key(KeySource(file="~/.config/conduit/keys/nope"))
    assert info.value.message == "key file ~/.config/conduit/keys/nope does not exist"
    assert "create it or run `conduit key set NAME`" in (info.value.hint or "")


def test_key_file_tilde_follows_the_given_home(tmp_path: Path) -> None:
    other = tmp_path / "other-home"
    write(other / "k", KEY)
    assert read_key(KeySource(file="~/k"), environ={"HOME": str(other)}).key == KEY


def test_relative_key_file_is_under_the_config_dir() -> None:
    write(paths.config_dir() / "keys/rel", KEY)
    assert read_key(KeySource(file="keys/rel")).key == KEY


def test_key_file_readable_by_others_gives_a_notice(temp_home: Path) -> None:
    write(temp_home / "k", KEY, mode=0o644)
    clean = read_key(KeySource(file="~/k"))
    assert clean.key == KEY
    assert clean.notices == ("key file ~/k can be read by other users (mode 0644); run `chmod 600 ~/k`",)


def test_key_file_utf16_with_bom(temp_home: Path) -> None:
    write(temp_home / "k", (KEY + "\r\n").encode("utf-16"))
    assert read_key(KeySource(file="~/k")).key == KEY


def test_key_file_that_is_a_directory_or_huge(temp_home: Path) -> None:
    (temp_home / "d").mkdir()
    with pytest.raises(KeyError_, match=r"d: the key file is not a regular file \(directory\)"):
        read_key(KeySource(file="~/d"))
    write(temp_home / "big", b"x" * 70000)
    with pytest.raises(KeyError_, match="is 70000 bytes, over the 65536-byte limit"):
        read_key(KeySource(file="~/big"))


def test_empty_key_file(temp_home: Path) -> None:
    write(temp_home / "k", "\n\n")
    with pytest.raises(KeyError_) as info:
        read_key(KeySource(file="~/k"))
    assert info.value.message == "the key from key file ~/k is empty"


# ------------------------------------------------------------------------------------------ environment


def test_env_source_reads_the_real_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUIT_TEST_KEY", f" {KEY}\n")
    assert read_key(KeySource(env="CONDUIT_TEST_KEY")).key == KEY


def test_env_source_unset_or_empty_mentions_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONDUIT_TEST_KEY", raising=False)
    with pytest.raises(KeyError_) as info:
        read_key(KeySource(env="CONDUIT_TEST_KEY"))
    assert info.value.message == "environment variable CONDUIT_TEST_KEY is not set"
    assert "systemd" in (info.value.hint or "")
    monkeypatch.setenv("CONDUIT_TEST_KEY", "  ")
    with pytest.raises(KeyError_, match="is empty"):
        read_key(KeySource(env="CONDUIT_TEST_KEY"))


# ------------------------------------------------------------------------------------------ commands


def test_command_stdout_is_the_key() -> None:
    assert read_key(KeySource(command="printf 'sk-test-abc\\n'")).key == "sk-test-abc"


def test_command_sees_the_given_environment(temp_home: Path) -> None:
    env = env_for_subprocess(temp_home) | {"PASS_VALUE": KEY}
    assert read_key(KeySource(command='printf "%s\\n" "$PASS_VALUE"'), environ=env).key == KEY


def test_failing_command_shows_its_exit_status_never_its_output(temp_home: Path) -> None:
    """stderr may hold the key (a `set -x`, a debug line): neither it nor stdout is ever shown."""
    script = write(temp_home / "pw.sh", f"printf '{KEY}'\necho 'store is locked' >&2\necho 'token {KEY}' >&2\nexit 3\n")
    src = KeySource(command=f"sh {script}")
    with pytest.raises(KeyError_) as info:
        read_key(src)
    assert info.value.message == f"{src.describe()} exited with status 3"
    assert "run it yourself to see why" in (info.value.hint or "")
    assert "0123456789" not in str(info.value) and "store is locked" not in str(info.value)


def test_command_killed_by_a_signal() -> None:
    with pytest.raises(KeyError_, match="was killed by SIGTERM"):
        read_key(KeySource(command="kill -TERM $$"))


def test_command_timeout_kills_the_whole_process_group(temp_home: Path) -> None:
    """The shell's child holds the output pipe: killing only /bin/sh would leave read_key waiting on it."""
    pidfile = temp_home / "child.pid"
    cmd = f"sleep 600 & echo $! > {pidfile}; wait"
    errors: list[KeyError_] = []

    def run() -> None:
        try:
            read_key(KeySource(command=cmd), timeout_s=5)  # room for a loaded machine to start the child
        except KeyError_ as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)  # an upper bound for waiting, not a timing assertion
    assert pidfile.exists() and pidfile.read_text().strip(), "the command never started its child"
    pid = int(pidfile.read_text())
    try:
        alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        alive = False
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not worker.is_alive() and not alive, "the command's child outlived the timeout"
    assert errors and "did not finish within 5 s" in errors[0].message


def test_command_printing_several_lines_gets_a_head_hint() -> None:
    with pytest.raises(KeyError_) as info:
        read_key(KeySource(command="printf 'sk-test-abc\\nuser: me\\n'"))
    assert "line break (U+000A) at position 11" in info.value.message
    assert "head -n 1" in (info.value.hint or "")


# ------------------------------------------------------------------------------------------ secrets file


def test_secrets_file_created_0600_in_a_0700_dir_whatever_the_umask() -> None:
    old = os.umask(0)
    try:
        message = key_set("tao", KEY)
    finally:
        os.umask(old)
    assert message == "stored key `tao` (sk-...cdef) in ~/.config/conduit/secrets.toml"
    path = paths.secrets_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text() == f'[secrets]\ntao = "{KEY}"\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["secrets.toml", "secrets.toml.lock"]  # no temp left


def test_secret_source_round_trip_and_replace() -> None:
    key_set("tao", KEY)
    assert read_key(KeySource(secret="tao")).key == KEY
    assert key_set("tao", "Bearer sk-test-new-key-9999").startswith("replaced key `tao` (sk-...9999)")
    assert read_key(KeySource(secret="tao")).key == "sk-test-new-key-9999"


def test_missing_secret_says_how_to_set_it() -> None:
    with pytest.raises(KeyError_) as info:
        read_key(KeySource(secret="nope"))
    assert info.value.message == "secret `nope` in ~/.config/conduit/secrets.toml does not exist"
    assert "conduit key set nope" in (info.value.hint or "")


def test_secrets_file_keeps_comments_and_other_entries() -> None:
    path = write(paths.secrets_path(), '# my keys\n[secrets]\nold = "sk-test-old-1"  # work\n')
    store = SecretsStore()
    store.set("new", "sk-test-new-2")
    assert path.read_text() == '# my keys\n[secrets]\nold = "sk-test-old-1"  # work\nnew = "sk-test-new-2"\n'
    assert store.names() == ["new", "old"]
    assert store.delete("old") is True and store.delete("old") is False
    assert store.names() == ["new"]


def test_loose_secrets_file_is_tightened_with_a_notice() -> None:
    path = write(paths.secrets_path(), f'[secrets]\ntao = "{KEY}"\n', mode=0o644)
    clean = read_key(KeySource(secret="tao"))
    assert clean.key == KEY
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert clean.notices == (
        "secrets file ~/.config/conduit/secrets.toml could be read by other users (mode 0644); it is now 0600",
    )


def test_broken_secrets_file_reports_line_not_content() -> None:
    write(paths.secrets_path(), f'[secrets]\ntao = "{KEY}"\nbroken = {KEY}\n')
    with pytest.raises(KeyError_) as info:
        SecretsStore().get("tao")
    assert "cannot be parsed (line 3" in info.value.message
    assert "0123456789" not in str(info.value)


def test_bad_names_refused() -> None:
    for name in ("", "a b", "x/../y", "k\u00e9y"):
        with pytest.raises(KeyError_, match="a secret name may hold only"):
            key_set(name, KEY)
    assert not paths.secrets_path().exists()


def test_key_list_and_rm() -> None:
    key_set("b", KEY)
    key_set("a", "sk-test-aaaa-bbbb-1111")
    assert key_list() == [("a", "sk-...1111"), ("b", "sk-...cdef")]
    assert key_rm("a") == "removed key `a` from ~/.config/conduit/secrets.toml"
    with pytest.raises(KeyError_, match="there is no key `a`"):
        key_rm("a")


# ------------------------------------------------------------------------------------------ the CLI


def conduit(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONDUIT), *args], input=stdin, capture_output=True, text=True,
        env=env_for_subprocess(home), timeout=60,
    )


def test_cli_key_set_from_stdin_never_echoes_the_key(temp_home: Path) -> None:
    result = conduit(temp_home, "key", "set", "tao", stdin=f"Bearer {KEY}\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("stored key `tao` (sk-...cdef) in ~/.config/conduit/secrets.toml")
    assert "0123456789" not in result.stdout + result.stderr
    path = temp_home / ".config/conduit/secrets.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert SecretsStore(path).get("tao") == KEY

    listed = conduit(temp_home, "key", "list")
    assert listed.returncode == 0 and listed.stdout == "tao  sk-...cdef\n"
    removed = conduit(temp_home, "key", "rm", "tao")
    assert removed.returncode == 0 and SecretsStore(path).names() == []


def test_cli_refuses_a_key_on_the_command_line_without_echoing_it(temp_home: Path) -> None:
    result = conduit(temp_home, "key", "set", "tao", KEY)
    assert result.returncode == 3  # bad arguments (docs/design.md "Exit codes")
    assert "takes no key on the command line" in result.stderr
    assert "0123456789" not in result.stdout + result.stderr
    assert not (temp_home / ".config/conduit/secrets.toml").exists()


def test_cli_c08_bad_key_refused_nothing_written(temp_home: Path) -> None:
    result = conduit(temp_home, "key", "set", "tao", stdin="sk-test-abcd\u2211efgh\n")
    assert result.returncode == 1
    assert "character U+2211 at position 12 is not allowed in an HTTP header" in result.stderr
    assert "sk-test" not in result.stdout + result.stderr
    assert not (temp_home / ".config/conduit/secrets.toml").exists()


def test_cli_prompt_on_a_terminal_does_not_echo(temp_home: Path) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is its controlling terminal, as in an interactive shell
        os.execve(str(CONDUIT), [str(CONDUIT), "key", "set", "tao"], env_for_subprocess(temp_home))
    seen = b""

    def read_until(marker: bytes, limit_s: float = 30) -> None:
        nonlocal seen
        deadline = time.monotonic() + limit_s
        while marker not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    return
                if not chunk:
                    return
                seen += chunk

    try:
        read_until(b"(input hidden): ")
        assert b"(input hidden): " in seen, seen
        os.write(fd, KEY.encode() + b"\n")
        read_until(b"secrets.toml")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert b"stored key `tao` (sk-...cdef)" in seen
    assert b"0123456789" not in seen  # the terminal never showed the key
    assert SecretsStore(temp_home / ".config/conduit/secrets.toml").get("tao") == KEY
