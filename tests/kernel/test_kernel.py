"""The kernel: one size grammar, one byte formatter, one redaction function, bounded reads of named files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from conduit.errors import BadArguments, ConduitError, KeyError_
from conduit.fileio import atomic_write, locked, read_regular_file
from conduit.redact import Redactor, fingerprint, redact, redact_bytes
from conduit.sdnotify import watchdog_interval_s
from conduit.units import GiB, format_bytes, parse_duration, parse_size, percentile

KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(("text", "expected"), [
    ("8G", 8 * GiB), ("8g", 8 * GiB), ("8GiB", 8 * GiB), ("8gi", 8 * GiB), ("512MiB", 512 << 20),
    ("1.5T", int(1.5 * (1 << 40))), ("80GB", 80 * 10**9), ("500mb", 500 * 10**6), ("1500000000B", 1500000000),
    (" 2 KiB ", 2048), (".5G", GiB // 2),
])
def test_size_grammar(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_a_bare_number_is_refused_with_the_gib_hint() -> None:
    with pytest.raises(BadArguments) as e:
        parse_size("80", option="--gpu-memory")
    assert e.value.exit_code == 3
    assert str(e.value).startswith("--gpu-memory: '80' has no unit; did you mean 80GiB?")


def test_a_bare_number_is_bytes_only_where_the_option_says_so() -> None:
    assert parse_size("4563402752", option="--kv-cache-memory-bytes", bare_bytes=True) == 4563402752


@pytest.mark.parametrize("text", ["", "G", "8X", "8 GiBs", "-1G", "0G", "1e9", "eight"])
def test_not_sizes(text: str) -> None:
    with pytest.raises(BadArguments):
        parse_size(text)


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("12") == 12.0
    with pytest.raises(BadArguments):
        parse_duration("soon")


def test_one_byte_formatter() -> None:
    assert format_bytes(None) == "?"
    assert format_bytes(1000) == "1000 B"
    assert format_bytes(512 << 20) == "512.0 MiB"
    assert format_bytes(20 * GiB) == "20.00 GiB"
    assert format_bytes(2 << 40) == "2.00 TiB"


def test_percentile_is_linear_interpolation() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


def test_redact_masks_every_secret_longest_first() -> None:
    inner = KEY[:12]
    text = f"a {KEY} b {inner} c"
    out = redact(text, [inner, KEY, None, "", "ab"])
    assert KEY not in out and inner not in out
    assert fingerprint(KEY) in out and fingerprint(inner) in out
    assert redact_bytes(text.encode(), [KEY]).count(fingerprint(KEY).encode()) == 1


def test_redactor_is_shared_across_threads() -> None:
    r = Redactor()
    threads = [threading.Thread(target=r.add, args=([f"{KEY}{i}"],)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(f"{KEY}{i}" not in r(f"x {KEY}{i} y") for i in range(20))


def test_read_regular_file_refuses_what_would_hang_or_exhaust(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(KeyError_, match="not a regular file \\(named pipe\\)"):
        read_regular_file(fifo, max_bytes=100, what="key file", error=KeyError_)
    with pytest.raises(ConduitError, match="character device"):
        read_regular_file(Path("/dev/zero"), max_bytes=100, what="profile")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(ConduitError, match="over the 100-byte limit"):
        read_regular_file(big, max_bytes=100, what="key file")
    ok = tmp_path / "ok"
    ok.write_bytes(b"x" * 100)
    assert read_regular_file(ok, max_bytes=100, what="key file") == b"x" * 100
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing", max_bytes=100, what="key file")


def test_atomic_write_and_bounded_lock(tmp_path: Path) -> None:
    target = tmp_path / "f"
    atomic_write(target, b"one", 0o600)
    assert target.read_bytes() == b"one" and (target.stat().st_mode & 0o777) == 0o600
    lock = tmp_path / "lock"
    with locked(lock):
        got: list[BaseException] = []

        def other() -> None:
            try:
                with locked(lock, timeout_s=0.2):
                    pass
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
                got.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join()
    # flock locks belong to the open file description, so a second open in the same process conflicts too
    assert len(got) == 1 and isinstance(got[0], TimeoutError)


def test_watchdog_interval() -> None:
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "10000000"}) == 5.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": str(os.getpid())}) == 5.0


def test_release_free_memory_gives_pages_back() -> None:
    """Freed small blocks held in place by a few live ones stay in the process's RSS until the allocator is asked
    to trim; ``release_free_memory`` asks it (glibc ``malloc_trim(0)``), so the RSS drops."""
    import psutil

    from conduit.memory import release_free_memory

    proc = psutil.Process()
    blocks = [bytearray(2048) for _ in range(40_000)]  # ~80 MB through malloc (over pymalloc's 512-byte limit)
    pinned = blocks[::64]  # a live block every 128 KiB keeps the heap from shrinking from its top
    del blocks
    before = proc.memory_info().rss
    assert release_free_memory()
    after = proc.memory_info().rss
    assert before - after > 20 * 2**20, (before, after)
    assert pinned


ARENAS = """import ctypes, sys, threading
from conduit.memory import limit_arenas
if sys.argv[1] == "limit":
    assert limit_arenas(2)
go = threading.Barrier(8)
keep = []
def work():
    go.wait()  # all at once: each thread that finds the arenas busy gets one of its own
    keep.append([bytearray(4096) for _ in range(3000)])
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ctypes.CDLL("libc.so.6").malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def test_limit_arenas_keeps_threads_to_two_arenas() -> None:
    """Eight threads allocating at once get arenas of their own (glibc); after ``limit_arenas(2)`` there are two.
    Real processes, counted by glibc's own ``malloc_stats``."""
    import subprocess
    import sys

    def arenas(mode: str) -> int:
        r = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        return sum(1 for line in r.stderr.splitlines() if line.startswith("Arena "))

    assert arenas("limit") == 2
    assert arenas("free") > 2
