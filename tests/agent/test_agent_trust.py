"""A client believes only an agent socket that is the user's alone (docs/design.md "The agent's socket").

Without ``XDG_RUNTIME_DIR`` the socket lives in the guessable ``/tmp/conduit-<uid>``; another user who creates
that directory first can plant an agent there. The real ``conduit status`` (the ``--json`` fast path and the full
CLI) and ``conduit wait`` refuse it with exit 2, naming the directory, its owner and mode and what to do. The
planting runs as root in a private mount namespace with its own ``/tmp`` (tests/helpers/planted_agent.py), so nothing of
the machine's ``/tmp/conduit-0`` is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.agentproc import AgentProc, conduit_exe, short_dir
from helpers.paths import HELPERS

from conduit.daemon.agent.client import AgentClient
from conduit.daemon.agent.trust import UntrustedSocket, socket_problem

HELPER = str(HELPERS / "planted_agent.py")
NOBODY = 65534


def plant(owner: int, mode: int) -> dict[str, Any]:
    """Run tests/helpers/planted_agent.py in a private mount namespace; its JSON results."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to plant a directory owned by another uid")
    r = subprocess.run(["unshare", "-m", sys.executable, HELPER, "--owner", str(owner), "--mode", f"{mode:o}",
                        "--conduit", conduit_exe()], capture_output=True, text=True, timeout=180)
    if r.returncode != 0 and "unshare failed" in r.stderr:
        pytest.skip(f"no mount namespaces here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    results: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return results


def test_a_planted_agent_in_a_directory_of_another_uid_is_refused() -> None:
    res = plant(NOBODY, 0o700)
    assert res["socket_owner"] == NOBODY
    for name in ("status_json", "status", "wait"):
        r = res[name]
        assert r["rc"] == 2, (name, r)
        assert "planted" not in r["stdout"], (name, r)
        assert "refusing the agent socket /tmp/conduit-0/agent.sock" in r["stderr"], (name, r)
        assert "not owned by you" in r["stderr"] and f"uid {NOBODY}" in r["stderr"] and "mode 0700" in r["stderr"]
        assert "remove /tmp/conduit-0" in r["stderr"] and "XDG_RUNTIME_DIR" in r["stderr"]
        assert "Traceback" not in r["stderr"]


def test_a_directory_of_ours_open_to_others_is_refused() -> None:
    res = plant(0, 0o755)
    for name in ("status_json", "status", "wait"):
        r = res[name]
        assert r["rc"] == 2 and "planted" not in r["stdout"], (name, r)
        assert "is open to other users" in r["stderr"] and "mode 0755" in r["stderr"], (name, r)


def test_a_directory_of_ours_with_mode_0700_is_believed() -> None:
    """The control: the same server in a directory that is ours alone is asked (so the refusals above are
    about the directory, not about the fake server)."""
    res = plant(0, 0o700)
    assert res["status_json"]["rc"] == 0, res
    assert json.loads(res["status_json"]["stdout"])["planted"] is True
    assert res["wait"]["rc"] == 0, res


def test_socket_problem_cases(tmp_path: Path) -> None:
    d = short_dir()
    try:
        sock = d / "agent.sock"
        assert socket_problem(sock) is None  # nothing there yet: "does not answer" is the caller's error
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(sock))
        try:
            assert socket_problem(sock) is None  # mkdtemp: ours, 0700
            os.chmod(d, 0o750)
            problem = socket_problem(sock)
            assert isinstance(problem, UntrustedSocket) and problem.exit_code == 2
            assert "open to other users" in problem.message and "mode 0750" in problem.message
            os.chmod(d, 0o700)
            if os.geteuid() == 0:
                os.chown(sock, NOBODY, NOBODY)
                problem = socket_problem(sock)
                assert problem is not None and "it is not owned by you" in problem.message
                os.chown(sock, 0, 0)
            with AgentClient(sock) as client:  # trusted, but nobody listens: the ordinary error
                with pytest.raises(Exception) as exc:
                    client.get("/v1/healthz")
                assert not isinstance(exc.value, UntrustedSocket)
        finally:
            s.close()
        (d / "file").write_text("x")
        problem = socket_problem(d / "file")
        assert problem is not None and "is not a socket" in problem.message
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_real_agent_is_still_believed(temp_home: Path) -> None:
    with AgentProc(temp_home) as agent:
        r = subprocess.run([conduit_exe(), "status", "--json"], env=agent.env, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        os.chmod(agent.sock.parent, 0o755)  # someone loosened it: refused until it is 0700 again
        r = subprocess.run([conduit_exe(), "status", "--json"], env=agent.env, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and "is open to other users" in r.stderr, r.stderr
        os.chmod(agent.sock.parent, 0o700)
