"""Canary sweep: a key from each source kind (file, env, command, secret, keyring: a real Secret Service,
tests/helpers/secretservice.py) goes through `conduit key set`, a full `conduit sync`, `doctor --json`, `status
--json`, `key list --json`, `conduit run` (a stand-in Codex), a rotation (or its refusal), an error, and the daemon
with its log and its notify messages, a real agent's socket answers and log; then the key is searched in every file under HOME and the runtime folder, and
in every output. It may rest only in its own source and in the files doctor lists as holding it (the tools that take
a copy); the tools set to a reference (Claude Code's apiKeyHelper, Codex ``env_key``, Qwen Code ``envKey``, Droid
``${VAR}``, OpenCode ``{env:...}``, Crush ``$VAR``, Zed's variable) hold none. Meanwhile ``/proc/*/cmdline`` of
every process (and the environment of conduit's children) is sampled: the key is in no argv. Then ``git grep`` over
the synced HOME as a git work tree finds it only in the source and those copies (docs/keys.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import secretservice
from helpers.agentproc import AgentProc, request
from helpers.daemonproc import Daemon
from helpers.secretservice import SecretService
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

OLD = "sk-canary-old-7f3a9c1e5b2d4086QZ"
NEW = "sk-canary-new-19e8d7c6b5a4f302WX"
COPY_TOOLS = {"cline", "cc_switch"}
"""The tools of the profile that can only take a copy of the key (the others get a reference)."""
REFERENCES = ('[tools.claude_code]\nkey_delivery = "reference"\n', '[tools.codex]\ncreate = true\nkey_method = "env"\n',
              '[tools.qwen]\ncreate = true\nkey_source = "env"\n', '[tools.droid]\ncreate = true\nkey_source = "env"\n',
              '[tools.opencode]\ncreate = true\nkey_source = "env"\n',
              '[tools.crush]\ncreate = true\nkey_source = "env"\n', '[tools.zed]\ncreate = true\n')
KINDS = ("file", "env", "command", "secret", "keyring")


class Sampler:
    """Reads ``/proc/*/cmdline`` of every process, and ``/proc/*/environ`` of the descendants of ``roots``,
    in a loop until stopped; ``hits`` names each process whose argv (or environment) held a needle."""

    def __init__(self, needles: tuple[str, ...], roots: list[int], environ: bool) -> None:
        self.needles, self.roots, self.environ = [n.encode() for n in needles], roots, environ
        self.hits: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples += 1
            parents: dict[int, int] = {}
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                argv = _read(f"/proc/{pid}/cmdline")
                if any(n in argv for n in self.needles):
                    self.hits.append(f"argv of {pid}: {argv[:200]!r}")
                stat = _read(f"/proc/{pid}/stat")
                if stat:
                    parents[pid] = int(stat.rsplit(b")", 1)[1].split()[1])
            if self.environ:
                self._children_environ(parents)

    def _children_environ(self, parents: dict[int, int]) -> None:
        for pid in parents:
            up, seen = parents.get(pid), 0
            while up and up not in self.roots and seen < 64:
                up, seen = parents.get(up), seen + 1
            if up in self.roots and any(n in _read(f"/proc/{pid}/environ") for n in self.needles):
                self.hits.append(f"environment of {pid} ({_read(f'/proc/{pid}/cmdline')[:120]!r})")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


class Home:
    """One HOME with a profile whose channel ``gw`` reads its key from ``kind``; every conduit run's stdout and
    stderr are kept in ``outputs``, every run sampled (``Sampler``)."""

    def __init__(self, home: Path, tmp: Path, kind: str, ss: SecretService | None) -> None:
        self.home, self.tmp, self.kind, self.ss = home, tmp, kind, ss
        self.runtime = tmp / "runtime"
        self.runtime.mkdir(mode=0o700)
        self.outside = tmp / "outside"  # the command source's file: not under HOME
        self.outside.mkdir()
        self.outputs: list[str] = []
        self.proc_hits: list[str] = []
        self.samples = 0

    def env(self) -> dict[str, str]:
        base = self.ss.child_env() if self.ss else {**os.environ, "HOME": str(self.home)}
        env = {**base, "NO_COLOR": "1", "COLUMNS": "200", "XDG_RUNTIME_DIR": str(self.runtime),
               "CONDUIT_KEYRING_TIMEOUT_S": "60"}  # a loaded test machine: the bound is not what is tested here
        env.pop("NOTIFY_SOCKET", None)
        if self.kind == "env":
            env["CANARY_GW_KEY"] = self.current
        return env

    current = OLD

    def conduit(self, *args: str, stdin: str = "", path: str | None = None,
                environ: bool = True) -> subprocess.CompletedProcess[str]:
        """Run conduit with ``args``, sampled; ``environ=False`` for a run that gives the key to a tool's
        environment on purpose (``conduit run``): only argv is checked then."""
        env = self.env() if path is None else {**self.env(), "PATH": path}
        proc = subprocess.Popen([sys.executable, "-m", "conduit.daemon.cli", *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=self.home)
        with Sampler((OLD, NEW), [proc.pid], environ=environ and self.kind != "env") as sampler:
            out, err = proc.communicate(stdin, timeout=120)
        self.proc_hits += sampler.hits
        self.samples += sampler.samples
        self.outputs += [f"$ conduit {' '.join(args)}\n{out}", err]
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def source(self) -> str:
        """The profile's key line for ``kind``, after putting the key there."""
        if self.kind == "file":
            keyfile = self.home / ".config" / "conduit" / "keys" / "gw"
            keyfile.parent.mkdir(parents=True, exist_ok=True)
            keyfile.write_text(OLD + "\n")
            keyfile.chmod(0o600)
            return 'key = { file = "~/.config/conduit/keys/gw" }'
        if self.kind == "env":
            return 'key = { env = "CANARY_GW_KEY" }'
        if self.kind == "command":
            (self.outside / "gw").write_text(OLD + "\n")
            return f'key = {{ command = "cat {self.outside / "gw"}" }}'
        assert self.conduit("key", "set", "gw", *(["--keyring"] if self.kind == "keyring" else []),
                            stdin=OLD + "\n").returncode == 0, self.outputs[-1]
        return f'key = {{ {self.kind} = "gw" }}'

    def own_source(self) -> set[str]:
        """The files under HOME that are the key's own source."""
        return {"file": {".config/conduit/keys/gw"}, "secret": {".config/conduit/secrets.toml"}}.get(self.kind, set())


def setup(h: Home) -> None:
    claude_settings(h.home)
    cline_gen_c(h.home)
    cc_switch_db(h.home)
    profile = write_profile(h.home, "http://127.0.0.1:9/api", key_text=None,
                            extra="".join(REFERENCES))
    text = profile.read_text().replace('auth = "bearer"', f'{h.source()}\nauth = "bearer"')
    profile.write_text(text.replace("[tools.claude_code]\n[tools.cline]", "[tools.cline]"))


def holding(root: Path, needle: str) -> set[str]:
    """Paths (relative to ``root``) of the files under it holding ``needle``."""
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and needle.encode() in p.read_bytes()}


def copies(report: dict[str, Any], home: Path) -> tuple[set[str], set[str]]:
    """(the tools doctor says hold a copy, the files it lists as holding the key, relative to ``home``)."""
    tools, files = set(), set()
    for name, entry in report["tools"].items():
        rest = entry.get("key_at_rest") or {}
        if rest.get("files"):
            files |= {str(Path(f["path"]).relative_to(home)) for f in rest["files"]}
            if not rest["where"].startswith("reference"):
                tools.add(name)
    return tools, files


@pytest.fixture(params=KINDS)
def canary(request: pytest.FixtureRequest, temp_home: Path, tmp_path: Path) -> Iterator[Home]:
    ss = None
    if request.param == "keyring":
        secretservice.require()
        ss = SecretService.start(temp_home, tmp_path)
    try:
        h = Home(temp_home, tmp_path, request.param, ss)
        setup(h)
        yield h
    finally:
        if ss is not None:
            ss.close()


def test_the_key_rests_only_in_its_source_and_the_copies_doctor_lists(canary: Home) -> None:
    h = canary
    r = h.conduit("sync")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(h.conduit("doctor", "--json").stdout)
    tools, files = copies(report, h.home)
    assert tools == COPY_TOOLS, {n: e.get("key_at_rest") for n, e in report["tools"].items()}
    for name in ("claude_code", "codex", "qwen", "droid", "opencode", "crush", "zed"):
        assert report["tools"][name]["key_at_rest"]["where"].startswith("reference"), report["tools"][name]
    assert holding(h.home, OLD) == files | h.own_source()
    h.conduit("status", "--json")
    bin_dir = h.tmp / "bin"  # a stand-in Codex that lives long enough to be sampled; `conduit run` gives it the key
    bin_dir.mkdir()
    (bin_dir / "codex").write_text(f"#!{sys.executable}\nimport os, time\ntime.sleep(0.5)\n"
                                   "raise SystemExit(0 if os.environ.get('CONDUIT_API_KEY') else 9)\n")
    (bin_dir / "codex").chmod(0o755)
    run = h.conduit("run", "codex", "--", "exec", "hi", path=f"{bin_dir}:/usr/bin:/bin", environ=False)
    assert run.returncode == 0, run.stderr
    assert h.conduit("key", "list", "--json").returncode == 0
    assert h.conduit("key", "print", "nope").returncode != 0  # an error path
    rotate = h.conduit("key", "rotate", "gw", stdin=NEW + "\n")  # the gateway is unreachable: refused
    assert rotate.returncode != 0
    if h.kind in ("file", "secret", "keyring"):
        assert h.conduit("key", "rotate", "gw", "--force", stdin=NEW + "\n").returncode == 0, h.outputs[-2:]
        h.current = NEW
        assert holding(h.home, OLD) == set()  # the live copies and every backup lost the old key
    daemon = Daemon(h.home, h.tmp, env={k: v for k, v in h.env().items() if os.environ.get(k) != v})
    with Sampler((OLD, NEW), [], environ=False) as sampler:
        daemon.start()
        time.sleep(2)
        daemon.stop()
    h.proc_hits += sampler.hits
    h.outputs += _agent_answers(h)
    report = json.loads(h.conduit("doctor", "--json").stdout)
    tools, files = copies(report, h.home)
    assert tools == COPY_TOOLS
    # the sweep: files under HOME and the runtime folder, the daemon's log and notify messages, every output
    assert holding(h.home, h.current) == files | h.own_source()
    assert holding(h.home, OLD if h.current == NEW else NEW) == set()
    assert holding(h.runtime, OLD) == holding(h.runtime, NEW) == set()
    said = "\n".join([*h.outputs, daemon.log(), *(daemon.notify.messages if daemon.notify else [])])
    assert OLD not in said and NEW not in said
    assert OLD[:-4] not in said and NEW[:-4] not in said  # not even the key without its last characters
    assert h.proc_hits == [] and h.samples > 0


def _agent_answers(h: Home) -> list[str]:
    """A real agent on its socket with the profile (it resolves the channel's key to probe the gateway): every
    answer of its read routes, a forced probe, and its log, for the sweep; its process sampled meanwhile."""
    agent = AgentProc(h.home, env={k: v for k, v in h.env().items() if os.environ.get(k) != v})
    with Sampler((OLD, NEW), [], environ=False) as sampler:
        agent.start()
        try:
            bodies = [agent.get(p) for p in ("/v1/status", "/v1/channels", "/v1/channels/gw", "/v1/tools",
                                              "/v1/vllm")]
            bodies.append(request(agent.sock, "POST", "/v1/channels/gw/probe", timeout=60))
        finally:
            agent.stop()
    h.proc_hits += sampler.hits
    assert bodies[0][0] == 200, bodies[0]
    return [json.dumps(bodies), agent.log.read_text(errors="replace")]


@pytest.mark.parametrize("kind", ["secret", "keyring"])
def test_git_grep_over_the_synced_home_finds_only_the_source_and_the_copies(kind: str, temp_home: Path,
                                                                            tmp_path: Path) -> None:
    ss = None
    if kind == "keyring":
        secretservice.require()
        ss = SecretService.start(temp_home, tmp_path)
    try:
        h = Home(temp_home, tmp_path, kind, ss)
        setup(h)
        assert h.conduit("sync").returncode == 0, h.outputs[-2:]
        _, files = copies(json.loads(h.conduit("doctor", "--json").stdout), temp_home)
    finally:
        if ss is not None:
            ss.close()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*"]
    env = {"HOME": str(temp_home), "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([*git, "init", "-q"], cwd=temp_home, env=env, check=True, timeout=60)
    subprocess.run([*git, "add", "-A"], cwd=temp_home, env=env, check=True, timeout=60)
    patterns = tmp_path / "patterns"  # not in argv: the sweep of a parallel test samples every process's argv
    patterns.write_text(OLD + "\n")
    found = subprocess.run([*git, "grep", "--cached", "-a", "-l", "-F", "-f", str(patterns)], cwd=temp_home,
                           env=env, capture_output=True, text=True, timeout=60)
    assert set(found.stdout.split()) == files | h.own_source(), found.stderr
    assert files == {".cline/data/settings/providers.json", ".cc-switch/cc-switch.db"}
