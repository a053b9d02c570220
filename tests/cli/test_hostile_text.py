"""Nothing from outside reaches the terminal raw, and no hostile input is an internal error (conduit.text).

A hostile gateway (tests/helpers/hostile.py: model ids, an error message and a header holding OSC 52, BEL, a
clear-screen and a forged log line; 200,000 nested brackets) and hostile state files (a routing file whose
``why`` holds escapes and whose ``since`` is 1e20 / 1e300 / -1e300; a ``limits.json`` whose records hold a float,
a list and a string for a figure) are run through `conduit models`, `use`, `sync`, `doctor`, `doctor --live`
and `doctor --deep`: every output is checked for a raw ESC, BEL or C1 byte and for "internal error".
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.hostile import ESC_ID, HostileGateway
from helpers.toolfiles import write_profile

from conduit.text import clean, log_safe, one_line, safe_number

RAW = ("\x1b", "\x07", "\x9b", "\x9d", "\u202e")
KEY = "sk-hostile-text-0123456789abcdef"


def conduit(home: Path, *args: str, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1",
               CONDUIT_AGENT_SOCKET=str(home / "no-agent.sock"))
    return subprocess.run([sys.executable, "-m", "conduit.daemon.cli", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=timeout)


def clean_output(r: subprocess.CompletedProcess[str]) -> None:
    both = r.stdout + r.stderr
    assert not [c for c in RAW if c in both], both[-3000:]
    assert "internal error" not in both.lower() and "Traceback" not in both, both[-3000:]
    assert KEY not in both


def test_the_sanitizer() -> None:
    assert one_line(ESC_ID) == "evil\\x1b]52;c;aGVsbG8=\\x07\\x1b[2J\\x1b[31mred\\u202e\\nINFO forged line"
    assert clean("a\nb\tc\r\x9b") == "a\nb\tc\\r\\x9b"  # newlines and tabs kept in multi-line text
    assert one_line(one_line(ESC_ID)) == one_line(ESC_ID)  # cleaning twice changes nothing
    assert one_line("x" * 50, 10) == "xxxxxxx..." and one_line("日本語 é") == "日本語 é"
    assert log_safe("why\n2025-01-01 00:00:00 INFO forged") == "why\n  2025-01-01 00:00:00 INFO forged"
    assert safe_number(1e20, low=0, high=4102444800) is None and safe_number(True, low=0, high=9) is None
    assert safe_number(7.0, low=0, high=9, integer=True) == 7 and safe_number(float("nan"), low=0, high=9) is None


def test_log_records_never_hold_raw_escapes_or_forged_lines() -> None:
    from conduit.daemon.sync.logs import RedactFilter

    record = logging.LogRecord("conduit.daemon", logging.INFO, __file__, 1, "switch: %s", (ESC_ID,), None)
    RedactFilter().filter(record)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s").format(record)
    assert not [c for c in RAW if c in text] and "\nINFO forged" not in text and "\n  INFO forged" in text


def _profile(home: Path, url: str, tools: tuple[str, ...] = ("claude_code",), extra: str = "") -> Path:
    (home / ".claude").mkdir(exist_ok=True)
    return write_profile(home, url, key_text=KEY + "\n", tools=tools, model="ok-model", small_model=None,
                         extra=extra)


def test_a_hostile_gateway_reaches_no_terminal_raw(temp_home: Path) -> None:
    with HostileGateway("escape") as gw:
        _profile(temp_home, gw.url)
        for args in (["models", "gw"], ["models", "gw", "--json"], ["use", "ok-model"], ["use", "evil"], ["use", "gpt-x"],
                     ["sync"], ["sync", "--json"], ["doctor"], ["doctor", "--live"], ["doctor", "--live", "--json"],
                     ["doctor", "--deep"]):
            clean_output(conduit(temp_home, *args))
        gw.mode = "nested"
        for args in (["doctor", "--deep"], ["doctor", "--deep", "--json"], ["models", "gw"]):
            clean_output(conduit(temp_home, *args))


@pytest.mark.parametrize("since", ["1e20", "1e300", "-1e300", "1.5e9"])
def test_a_hostile_routing_file_is_no_internal_error(temp_home: Path, since: str) -> None:
    path = _profile(temp_home, "http://127.0.0.1:9", extra='[channels.fb]\nbase_url = "http://127.0.0.1:9"\n'
                    'protocols = ["openai", "anthropic"]\n\n[fallback]\nchannel = "fb"\nmodel = "fb"\n')
    state = temp_home / ".local" / "state" / "conduit"
    state.mkdir(parents=True, exist_ok=True)
    why = "primary down\x1b]52;c;aGk=\x07\n2025-01-01 00:00:00 INFO forged"
    doc = {"version": 1, "active": "fallback", "since": 0, "why": why, "profile": str(path), "primary": "gw",
           "fallback": {"channel": "fb", "model": "fb\u001b[2J"}, "after_s": 20}
    text = json.dumps(doc).replace('"since": 0', f'"since": {since}')  # 1e300 as written, not as Python prints it
    (state / "routing.json").write_text(text)
    for args in (["sync"], ["sync", "--json"], ["doctor"], ["doctor", "--json"]):
        r = conduit(temp_home, *args)
        clean_output(r)
        assert "\n2025-01-01 00:00:00 INFO forged" not in r.stdout + r.stderr


def test_hostile_limit_records_are_not_written_back(temp_home: Path) -> None:
    from conduit.daemon.catalog import context

    state = temp_home / ".local" / "state" / "conduit"
    state.mkdir(parents=True, exist_ok=True)
    f = "/x/config.toml"
    (state / "limits.json").write_text(json.dumps({"codex": {f: {
        "a": {"wrote": 128000, "had": 1e300}, "b": {"wrote": 128000, "had": [1, 2]},
        "c": {"wrote": 128000, "had": "128k"}, "d": {"wrote": 1.5}, "e": {"wrote": 9e99},
        "f": {"wrote": 128000, "had": 64000}, "g": {"wrote": "openai", "had": "chat"},
        "h": {"wrote": "x\u001b[2J"}, "i": {"wrote": 128000}}}}))
    got = context._read_limits()["codex"][f]
    assert sorted(got) == ["f", "g", "i"], got
