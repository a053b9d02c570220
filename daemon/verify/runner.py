"""The parent side of an isolated one-shot tool run: decide the isolation once, run a tool against the
recording gateway, and bring back what it sent.

Isolation, decided once per process by ``Sandbox.create()`` with a trivial probe command:

- ``unshare -n -m -p -f --mount-proc --kill-child`` (root): network, mount and pid namespaces. The tool sees
  only ``lo``; the gateway and a DNS responder run inside, in ``sandbox.py`` (pid 1 there), so every
  process the tool leaves is in that namespace and dies with it.
- ``unshare -r ...`` (same, inside a user namespace) when not root but user namespaces are allowed.
- none: the gateway runs in a thread here, the tool in its own session with ``CONDUIT_VERIFY_RUN=<uuid>``
  in its environment; afterwards its group is killed and then every process whose environment carries the
  marker (those are the ``leftovers``). Outbound traffic is then cut only by ``OPT_OUT_ENV``.

``CONDUIT_VERIFY_ISOLATION`` (``auto``, ``unshare``, ``userns``, ``none``) or ``create(isolation=...)``
forces a mode. Either way a run is bounded by ``timeout_s + OVERHEAD_S`` and leaves no process behind.

Example::

    box = Sandbox.create()
    res = box.run(ToolRun(argv=["claude", "-p", "hi"], env=env, cwd=Path.cwd()))
    res.requests[0].path        # "/api/v1/messages?beta=true"
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from conduit.daemon.verify import sandbox as inner
from conduit.daemon.verify.gateway import Recorded, RecordingGateway
from conduit.errors import ConduitError

ISOLATED_PORT = 47823
"""The gateway's port inside a fresh network namespace (always free there)."""
OVERHEAD_S = 10.0
"""What a run may take beyond ``timeout_s``: namespace setup, the group's grace period, the sweep."""
MARKER_ENV = "CONDUIT_VERIFY_RUN"
"""The variable that marks a non-isolated run's processes."""
ISOLATION_ENV = "CONDUIT_VERIFY_ISOLATION"
"""Forces the isolation mode: ``auto`` (default), ``unshare``, ``userns`` or ``none``."""

OPT_OUT_ENV: dict[str, str] = {
    # The Console Do Not Track convention; honoured by Gemini CLI's and several npm tools' telemetry.
    "DO_NOT_TRACK": "1",
    # Claude Code docs, "Environment variables": NONESSENTIAL_TRAFFIC = autoupdater + bug command + error
    # reporting + telemetry in one; the others are the individual switches.
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    # npm's update-notifier package (used by many npm CLIs) and npm itself.
    "NO_UPDATE_NOTIFIER": "1",
    "npm_config_update_notifier": "false",
    # Gemini CLI docs (telemetry.md): GEMINI_TELEMETRY_ENABLED overrides settings.telemetry.enabled.
    "GEMINI_TELEMETRY_ENABLED": "false",
    # OpenCode's flag.ts: OPENCODE_DISABLE_AUTOUPDATE, OPENCODE_DISABLE_MODELS_FETCH (models.dev),
    # OPENCODE_DISABLE_LSP_DOWNLOAD.
    "OPENCODE_DISABLE_AUTOUPDATE": "true",
    "OPENCODE_DISABLE_MODELS_FETCH": "true",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
    # Aider's args.py (configargparse: every option is also AIDER_<NAME>): --no-check-update,
    # --no-analytics (this session only; --analytics-disable would write ~/.aider/analytics.json),
    # --no-show-release-notes.
    "AIDER_CHECK_UPDATE": "false",
    "AIDER_ANALYTICS": "false",
    "AIDER_SHOW_RELEASE_NOTES": "false",
    # Continue CLI (extensions/cli telemetry notes): CONTINUE_TELEMETRY_ENABLED=0, legacy
    # CONTINUE_ALLOW_ANONYMOUS_TELEMETRY=0.
    "CONTINUE_TELEMETRY_ENABLED": "0",
    "CONTINUE_ALLOW_ANONYMOUS_TELEMETRY": "0",
    # Cline CLI's own test environment (apps/cli tests/helpers/env.ts): no auto-update, no telemetry, no
    # Cline Pass notice. (Reported: otel.cline.bot is still contacted; the namespace is what cuts it.)
    "CLINE_NO_AUTO_UPDATE": "1",
    "CLINE_TELEMETRY_DISABLED": "1",
    "CLINE_DISABLE_CLINE_PASS_NOTICE": "1",
    # The OpenTelemetry SDK's standard switch (Cline, Gemini CLI, Codex export through OTel).
    "OTEL_SDK_DISABLED": "true",
}
"""The documented telemetry/update opt-outs every tool run gets (the source of each in its comment)."""


@dataclass
class ToolRun:
    """One one-shot run: ``argv`` (argv[0] found on ``env["PATH"]``), the exact environment, the working
    directory, the timeout in seconds, and optional text on stdin (else ``/dev/null``)."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    timeout_s: float = 60.0
    stdin: str | None = None


@dataclass
class RunResult:
    """What one run did. ``exit_code`` is None when it timed out (or never started); ``requests`` hold raw
    credentials (``Recorded.auth_value``): compare them, show only fingerprints. ``dns_names`` are the names
    the tool looked up (isolated runs only); ``leftovers`` the command lines of processes it left (killed);
    the tails are the last 4 KiB of its output; ``isolation`` says how it was cut off, in words."""

    exit_code: int | None
    timed_out: bool
    duration_s: float
    requests: list[Recorded]
    dns_names: list[str]
    leftovers: list[str]
    stdout_tail: str
    stderr_tail: str
    isolated: bool
    isolation: str
    setup_errors: list[str] = field(default_factory=list)


_PREFIXES: dict[str, list[str]] = {
    "unshare": ["unshare", "-n", "-m", "-p", "-f", "--mount-proc", "--kill-child"],
    "userns": ["unshare", "-r", "-n", "-m", "-p", "-f", "--mount-proc", "--kill-child"],
}
_WORDS = {
    "unshare": "network, mount and pid namespaces (unshare)",
    "userns": "network, mount and pid namespaces in a user namespace (unshare -r)",
}
_DECIDED: dict[str, tuple[str, str]] = {}
"""The per-process cache of ``Sandbox.create``'s probe: requested mode -> (mode, words)."""


def _probe(prefix: list[str]) -> str | None:
    """None when ``prefix true`` works, else why not (one line)."""
    if shutil.which(prefix[0]) is None:
        return f"{prefix[0]} not found"
    try:
        done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:][0] if done.stderr else (
            f"exit {done.returncode}")
    return None


def _decide(requested: str) -> tuple[str, str]:
    if requested == "none":
        return "none", "none: asked for (CONDUIT_VERIFY_ISOLATION=none); documented opt-outs only"
    modes = [requested] if requested in _PREFIXES else (["unshare", "userns"] if os.geteuid() == 0
                                                         else ["userns"])
    why: list[str] = []
    for mode in modes:
        reason = _probe(_PREFIXES[mode])
        if reason is None:
            return mode, _WORDS[mode]
        why.append(f"{' '.join(_PREFIXES[mode][:2])}: {reason}")
    return "none", f"none: unshare not permitted ({'; '.join(why)}); documented opt-outs only"


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago (bind to 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Sandbox:
    """Runs tools against a recording gateway at ``root``, isolated as ``create()`` decided."""

    def __init__(self, mode: str, isolation: str, port: int) -> None:
        self.mode, self.isolation, self.port = mode, isolation, port

    @classmethod
    def create(cls, isolation: str | None = None) -> Sandbox:
        """Decide the isolation (``isolation`` or ``$CONDUIT_VERIFY_ISOLATION``, default ``auto``: root's
        unshare, else a user namespace, else none), probed once per process. Raises ``ConduitError`` for an
        unknown mode name."""
        requested = (isolation or os.environ.get(ISOLATION_ENV) or "auto").strip().lower()
        if requested not in ("auto", "none", *_PREFIXES):
            raise ConduitError(f"unknown isolation {requested!r} ({ISOLATION_ENV} or isolation=)",
                               hint="use one of: auto, unshare, userns, none")
        if requested not in _DECIDED:
            _DECIDED[requested] = _decide(requested)
        mode, words = _DECIDED[requested]
        return cls(mode, words, ISOLATED_PORT if mode != "none" else free_port())

    @property
    def isolated(self) -> bool:
        """Whether runs happen in their own namespaces."""
        return self.mode != "none"

    @property
    def root(self) -> str:
        """``http://127.0.0.1:PORT``; callers append the profile's path (``/api``)."""
        return f"http://127.0.0.1:{self.port}"

    def run(self, job: ToolRun, reply: str = "ok") -> RunResult:
        """Run ``job`` once against the gateway (answering ``reply``); bounded by ``timeout_s + OVERHEAD_S``.
        Raises ``ConduitError`` when the isolated sandbox itself fails (its stderr tail in the message)."""
        if self.isolated:
            return self._run_isolated(job, reply)
        try:
            return self._run_plain(job, reply)
        except OSError as exc:  # the port found at create() was taken since: the caller's root names it
            raise ConduitError(f"the verify gateway cannot listen on 127.0.0.1:{self.port}: {exc}",
                               hint="create a new Sandbox (it picks a free port) and run again") from exc

    def _run_isolated(self, job: ToolRun, reply: str) -> RunResult:
        with tempfile.TemporaryDirectory(prefix="conduit-verify-") as tmp:
            spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
            spec = {"argv": job.argv, "env": job.env, "cwd": str(job.cwd), "timeout_s": job.timeout_s,
                    "port": self.port, "reply": reply, "stdin": job.stdin}
            fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(spec, f)
            cmd = [*_PREFIXES[self.mode], sys.executable, "-m", "conduit.daemon.verify.sandbox",
                   str(spec_path), str(result_path)]
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
            try:
                _, err = proc.communicate(timeout=job.timeout_s + OVERHEAD_S)
            except subprocess.TimeoutExpired:
                inner.signal_group(proc.pid, signal.SIGKILL)  # --kill-child takes the namespace with it
                _, err = proc.communicate()
            except BaseException:  # Ctrl-C or any error here: never leave the namespace running
                inner.signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            if not result_path.exists():
                tail = err.decode("utf-8", "replace").strip()[-2000:]
                raise ConduitError(f"the verify sandbox wrote no result (exit {proc.returncode}): {tail}",
                                   hint=f"set {ISOLATION_ENV}=none to run without namespaces")
            data = json.loads(result_path.read_text())
        return self._result(data)

    def _result(self, data: dict[str, Any]) -> RunResult:
        return RunResult(exit_code=data.get("exit_code"), timed_out=bool(data.get("timed_out")),
                         duration_s=float(data.get("duration_s") or 0.0),
                         requests=[Recorded.from_json(r) for r in data.get("requests") or []],
                         dns_names=list(data.get("dns_names") or []), leftovers=list(data.get("leftovers") or []),
                         stdout_tail=str(data.get("stdout_tail") or ""),
                         stderr_tail=str(data.get("stderr_tail") or ""), isolated=self.isolated,
                         isolation=self.isolation, setup_errors=list(data.get("setup_errors") or []))

    def _run_plain(self, job: ToolRun, reply: str) -> RunResult:
        marker = uuid.uuid4().hex
        env = dict(job.env, **{MARKER_ENV: marker})
        errors: list[str] = []
        with RecordingGateway(port=self.port, reply=reply) as gateway:
            start = time.monotonic()
            try:
                proc, out, err = inner.spawn(job.argv, env, str(job.cwd), job.stdin)
            except OSError as exc:
                errors.append(f"cannot start {job.argv[0]!r}: {exc}")
                return self._result({"setup_errors": errors})
            try:
                code, timed_out = inner.wait_bounded(proc, job.timeout_s)
            except BaseException:  # Ctrl-C: take the tool and what it started down with us
                inner.signal_group(proc.pid, signal.SIGKILL)
                inner.kill_all(marked_processes(marker), grace_s=0.5)
                raise
            duration = time.monotonic() - start
            marked = marked_processes(marker)
            leftovers = [d for d in (inner.describe(p) for p in marked) if d]
            inner.signal_group(proc.pid, signal.SIGKILL)
            inner.kill_all(marked)
            data = {"exit_code": code, "timed_out": timed_out, "duration_s": round(duration, 3),
                    "leftovers": leftovers, "stdout_tail": out.tail(), "stderr_tail": err.tail(),
                    "requests": [r.to_json(redact=False) for r in gateway.recorded()], "dns_names": [],
                    "setup_errors": errors}
        return self._result(data)


def marked_processes(marker: str) -> list[psutil.Process]:
    """Every live process (not this one) whose environment has ``CONDUIT_VERIFY_RUN=marker``; processes
    whose environment cannot be read (other users) are skipped."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE and p.environ().get(
                    MARKER_ENV) == marker:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return out

