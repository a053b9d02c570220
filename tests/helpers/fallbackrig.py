"""The fallback rig, shared by tests/agent/test_fallback_e2e.py and bench/fallback.py: a real `conduit agent`
supervising tests/helpers/fake_vllm.py as the primary `local` channel, a real `conduit daemon`, a hosted stand-in (the
loopback recording gateway of conduit.daemon.verify.gateway) as the `[fallback]` channel, and real tool files
under a temporary HOME.

    with Rig(home, tmp, after_s=2) as rig:
        rig.wait_route("primary")
        t0 = rig.kill_vllm()            # SIGKILL to vLLM's process group; [vllm.restart] mode = "never"
        rig.wait_route("fallback")      # every following tool's file names the fallback's port and model
        rig.start_vllm()                # POST /v1/vllm/start
        rig.wait_route("primary")
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from conduit.daemon.verify.gateway import RecordingGateway
from helpers.agentproc import AgentProc, request
from helpers.daemonproc import Daemon
from helpers.procs import group

FAKE = str(Path(__file__).parent / "fake_vllm.py")

#: tool -> its file under HOME (Claude Code's settings, Codex's config, OpenCode's config).
TOOL_FILES = {"claude_code": ".claude/settings.json", "codex": ".codex/config.toml",
              "opencode": ".config/opencode/opencode.json"}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Rig:
    """See the module docstring. ``follow``: the tools that follow the fallback; ``stay``: ``fallback = false``.
    ``vllm``: a whole ``[vllm]`` table (TOML text) instead of the fake server's, serving ``model`` on ``port``;
    ``start_s``: how long a vLLM start may take."""

    def __init__(self, home: Path, tmp: Path, after_s: float = 2.0, follow: tuple[str, ...] = ("claude_code", "opencode"),
                 stay: tuple[str, ...] = ("codex",), vllm: str | None = None, model: str = "fake",
                 port: int | None = None, start_s: float = 60.0) -> None:
        self.home, self.tmp, self.after_s = home, tmp, after_s
        self.follow, self.stay = follow, stay
        self.port = port or free_port()
        self.vllm_text, self.start_s = vllm, start_s
        self.hosted = RecordingGateway(models=("hosted-model",))
        self.model, self.fb_model = model, "hosted-model"
        self.agent: AgentProc | None = None
        self.daemon: Daemon | None = None
        self.pgids: set[int] = set()

    # ---- setup

    def profile_path(self) -> Path:
        return self.home / ".config" / "conduit" / "profile.toml"

    def write_profile(self, model: str | None = None, fb_model: str | None = None) -> None:
        """Write the profile atomically (primary ``model`` and fallback model may be changed)."""
        self.model, self.fb_model = model or self.model, fb_model or self.fb_model
        tools = "".join(f"[tools.{t}]\n" for t in self.follow) + "".join(f"[tools.{t}]\nfallback = false\n"
                                                                          for t in self.stay)
        text = (f'version = 1\nchannel = "local"\nmodel = "{self.model}"\n\n'
                f'[channels.hosted]\nbase_url = "{self.hosted.root}/api"\nprotocols = ["openai", "anthropic"]\n\n'
                f'[fallback]\nchannel = "hosted"\nmodel = "{self.fb_model}"\nafter_s = {self.after_s}\n\n{tools}\n')
        text += self.vllm_text if self.vllm_text is not None else (
                f'[vllm]\nmodel = "fake-model"\nserved_model_name = "fake"\nport = {self.port}\n'
                f'command = ["{sys.executable}", "{FAKE}"]\nhealth_interval_s = 0.2\nmetrics_interval_s = 0.5\n'
                f'stop_grace_s = 3\n[vllm.restart]\nmode = "never"\n')
        p = self.profile_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, p)

    def start(self) -> Rig:
        self.hosted.start()
        (self.home / ".codex").mkdir(exist_ok=True)
        (self.home / ".config" / "opencode").mkdir(parents=True, exist_ok=True)
        self.write_profile()
        self.agent = AgentProc(self.home, args=["--probe-interval", "30"]).start()
        self.vllm_wait("ready")
        assert self.agent is not None  # a slow start may have switched to the fallback: start from the primary
        self.agent.wait_for("/v1/status", lambda b: (b.get("routing") or {}).get("active") == "primary",
                            timeout=self.after_s + 60)
        self.daemon = Daemon(self.home, self.tmp).start()
        return self

    def close(self) -> None:
        if self.agent is not None and self.agent.proc is not None and self.agent.proc.poll() is None:
            with contextlib.suppress(Exception):
                request(self.agent.sock, "POST", "/v1/vllm/stop", timeout=30)
        if self.daemon is not None:
            self.daemon.stop()
        if self.agent is not None:
            self.agent.__exit__()
        for pgid in self.pgids:  # a vLLM left by a failed test
            for pid in group(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.hosted.stop()

    def __enter__(self) -> Rig:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- vLLM

    def vllm(self) -> dict[str, Any]:
        assert self.agent is not None
        return request(self.agent.sock, "GET", "/v1/vllm")[1]

    def vllm_wait(self, state: str, timeout: float | None = None) -> dict[str, Any]:
        assert self.agent is not None
        body = self.agent.wait_for("/v1/vllm", lambda b: b.get("state") == state, timeout=timeout or self.start_s)
        if body.get("pgid"):
            self.pgids.add(int(body["pgid"]))
        return body

    def kill_vllm(self) -> float:
        """SIGKILL vLLM's whole process group; returns the Unix time of the kill."""
        pgid = self.vllm_wait("ready")["pgid"]
        t = time.time()
        os.killpg(int(pgid), signal.SIGKILL)
        return t

    def start_vllm(self) -> float:
        """Ask the agent to start vLLM again; returns the Unix time it turned ready (its ``since``)."""
        assert self.agent is not None
        request(self.agent.sock, "POST", "/v1/vllm/start", timeout=40)
        return float(self.vllm_wait("ready")["since"])

    def status(self) -> dict[str, Any]:
        assert self.agent is not None
        return request(self.agent.sock, "GET", "/v1/status")[1]

    # ---- tool files

    def file(self, tool: str) -> Path:
        return self.home / TOOL_FILES[tool]

    def points_at(self, tool: str, route: str) -> bool:
        """The tool's file names the route's port and model (``primary``: the fake vLLM; ``fallback``: hosted)."""
        try:
            text = self.file(tool).read_text()
        except OSError:
            return False
        port, model = ((self.port, self.model) if route == "primary" else (self.hosted.port, self.fb_model))
        other = self.hosted.port if route == "primary" else self.port
        return f":{port}" in text and json.dumps(model)[1:-1] in text and f":{other}" not in text

    def signatures(self) -> dict[str, tuple[int, int, int]]:
        """tool -> ``(mtime_ns, inode, size)`` of its file."""
        out = {}
        for t in (*self.follow, *self.stay):
            st = self.file(t).stat()
            out[t] = (st.st_mtime_ns, st.st_ino, st.st_size)
        return out

    def wait_route(self, route: str, timeout: float = 60.0) -> float:
        """Poll until every following tool points at ``route``; returns the Unix time of the last file's write."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.points_at(t, route) for t in self.follow):
                return max(self.file(t).stat().st_mtime_ns for t in self.follow) / 1e9
            time.sleep(0.02)
        texts = {t: self.file(t).read_text() if self.file(t).exists() else None for t in self.follow}
        log = self.daemon.log()[-3000:] if self.daemon else ""
        raise AssertionError(f"tools not on the {route} in {timeout} s: {texts}\ndaemon log:\n{log}")
