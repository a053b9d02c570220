"""The isolated one-shot run with real subprocesses: a ``python -c`` tool that calls the gateway with urllib,
looks up a vendor host (must fail, and be recorded by the DNS responder), connects to an outside address
(must fail), and leaves a daemonized grandchild (must be reported in ``leftovers`` and be dead afterwards).
Also the timeout path, stdin, a missing program, the sandbox's own command line, and the non-isolated
fallback (``isolation="none"``), which must reap its leftovers too."""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from conduit.daemon.verify import dns as dnsmod
from conduit.daemon.verify.runner import OPT_OUT_ENV, RunResult, Sandbox, ToolRun
from conduit.errors import ConduitError

KEY = "sk-sandbox-0123456789abcd"

TOOL = r"""
import json, os, socket, subprocess, sys, urllib.request
root, tag = sys.argv[1], sys.argv[2]
req = urllib.request.Request(root + "/api/v1/chat/completions",
                             data=json.dumps({"model": "tool-model", "messages": []}).encode(),
                             headers={"Authorization": "Bearer " + os.environ["TOOL_KEY"],
                                      "Content-Type": "application/json"})
print("reply:", json.load(urllib.request.urlopen(req, timeout=10))["choices"][0]["message"]["content"])
try:
    socket.getaddrinfo("api.anthropic.com", 443)
    print("dns: resolved")
except OSError:
    print("dns: failed")
try:
    socket.create_connection(("10.0.0.1", 80), timeout=3).close()
    print("connect: ok")
except OSError:
    print("connect: failed")
subprocess.Popen([sys.executable, "-c", "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                  "    time.sleep(120)", tag], start_new_session=True).wait()
"""


def tagged(tag: str) -> list[psutil.Process]:
    """Processes on this machine whose command line carries ``tag`` (the grandchild's)."""
    out = []
    for p in psutil.process_iter():
        try:
            if tag in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return out


def run_tool(box: Sandbox, tmp_path: Path) -> tuple[RunResult, str]:
    tag = f"leftover-{uuid.uuid4().hex}"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TOOL_KEY": KEY, **OPT_OUT_ENV}
    res = box.run(ToolRun(argv=[sys.executable, "-c", TOOL, box.root, tag], env=env, cwd=tmp_path,
                          timeout_s=30))
    return res, tag


@pytest.fixture(scope="module")
def isolated() -> Sandbox:
    box = Sandbox.create()
    if not box.isolated:
        pytest.skip(f"SKIPPED: no namespaces here ({box.isolation})")
    return box


def test_isolated_run_records_cuts_and_reaps(isolated: Sandbox, tmp_path: Path) -> None:
    res, tag = run_tool(isolated, tmp_path)
    assert res.exit_code == 0, res.stderr_tail
    assert res.isolated and "namespaces" in res.isolation and not res.setup_errors
    assert "reply: ok" in res.stdout_tail
    [rec] = res.requests
    assert (rec.path, rec.model, rec.auth_header, rec.auth_value) == (
        "/api/v1/chat/completions", "tool-model", "authorization", KEY)
    assert "dns: failed" in res.stdout_tail and "api.anthropic.com" in res.dns_names
    assert "connect: failed" in res.stdout_tail
    assert any(tag in line for line in res.leftovers), res.leftovers
    assert tagged(tag) == []


def test_isolated_timeout_kills_a_tool_that_ignores_sigterm(isolated: Sandbox, tmp_path: Path) -> None:
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n" \
           "time.sleep(60)"
    res = isolated.run(ToolRun(argv=[sys.executable, "-c", code], env={"PATH": os.environ["PATH"]},
                               cwd=tmp_path, timeout_s=1))
    assert res.timed_out and res.exit_code is None
    assert res.stdout_tail == "up\n" and res.requests == []


def test_isolated_stdin_and_exit_code(isolated: Sandbox, tmp_path: Path) -> None:
    code = "import sys\nprint(sys.stdin.read().upper())\nsys.exit(7)"
    res = isolated.run(ToolRun(argv=[sys.executable, "-c", code], env={}, cwd=tmp_path, stdin="hello"))
    assert (res.exit_code, res.timed_out, res.stdout_tail) == (7, False, "HELLO\n")


def test_missing_program_is_reported(isolated: Sandbox, tmp_path: Path) -> None:
    res = isolated.run(ToolRun(argv=[str(tmp_path / "no-such-tool")], env={}, cwd=tmp_path))
    assert res.exit_code is None and any("no-such-tool" in e for e in res.setup_errors)


def test_non_isolated_fallback_records_and_reaps(tmp_path: Path) -> None:
    box = Sandbox.create(isolation="none")
    assert not box.isolated and box.isolation.startswith("none") and box.port != 0
    res, tag = run_tool(box, tmp_path)
    assert res.exit_code == 0, res.stderr_tail
    assert [(r.path, r.auth_value, r.model) for r in res.requests] == [
        ("/api/v1/chat/completions", KEY, "tool-model")]
    assert res.dns_names == [] and not res.isolated
    assert any(tag in line for line in res.leftovers), res.leftovers
    assert tagged(tag) == []


def test_non_isolated_timeout(tmp_path: Path) -> None:
    box = Sandbox.create(isolation="none")
    res = box.run(ToolRun(argv=[sys.executable, "-c", "import time; time.sleep(60)"], env={}, cwd=tmp_path,
                          timeout_s=0.5))
    assert res.timed_out and res.exit_code is None


def test_unknown_isolation_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUIT_VERIFY_ISOLATION", "chroot")
    with pytest.raises(ConduitError, match="CONDUIT_VERIFY_ISOLATION"):
        Sandbox.create()


def test_sandbox_command_line_outside_namespaces(tmp_path: Path) -> None:
    """Run outside a pid namespace it skips the network setup (never the host's resolv.conf) but still runs
    the tool, and writes its result 0600; a bad spec exits 2."""
    spec, result = tmp_path / "spec.json", tmp_path / "result.json"
    spec.write_text(json.dumps({"argv": [sys.executable, "-c", "print('hi')"], "env": {}, "cwd": str(tmp_path),
                                "timeout_s": 10, "port": 0}))
    cmd = [sys.executable, "-m", "conduit.daemon.verify.sandbox"]
    subprocess.run([*cmd, str(spec), str(result)], check=True, timeout=30)
    data = json.loads(result.read_text())
    assert stat.S_IMODE(result.stat().st_mode) == 0o600
    assert data["exit_code"] == 0 and data["stdout_tail"] == "hi\n" and data["leftovers"] == []
    assert "skipped" in data["setup_errors"][0]
    spec.write_text("{}")
    bad = subprocess.run([*cmd, str(spec), str(result)], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "spec.json" in bad.stderr


def query(name: str, qtype: int = 1, qid: int = 0x1234) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\x00" + struct.pack("!HH", qtype, 1)


def test_dns_responder_answers_nxdomain_over_udp_and_tcp() -> None:
    with dnsmod.NxDomainResponder(port=0) as dns:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.sendto(query("API.Anthropic.com"), ("127.0.0.1", dns.port))
            reply, _ = s.recvfrom(512)
            s.sendto(query("api.anthropic.com", qtype=28), ("127.0.0.1", dns.port))
            s.recvfrom(512)
            s.sendto(b"\x00\x01garbage", ("127.0.0.1", dns.port))
        qid, flags, qd, an = struct.unpack("!HHHH", reply[:8])
        assert (qid, flags & 0x8000, flags & 0xF, qd, an) == (0x1234, 0x8000, dnsmod.NXDOMAIN, 1, 0)
        assert reply[12:] == query("API.Anthropic.com")[12:]
        with socket.create_connection(("127.0.0.1", dns.port), timeout=5) as t:
            q = query("pypi.org", qid=7)
            t.sendall(struct.pack("!H", len(q)) + q)
            size = struct.unpack("!H", t.recv(2))[0]
            assert struct.unpack("!H", t.recv(size)[:2])[0] == 7
        assert dns.names() == ["api.anthropic.com", "pypi.org"]


def test_non_isolated_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    box = Sandbox.create(isolation="none")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", box.port))
        s.listen()
        with pytest.raises(ConduitError, match=f"127.0.0.1:{box.port}"):
            box.run(ToolRun(argv=[sys.executable, "-c", "pass"], env={}, cwd=tmp_path))
