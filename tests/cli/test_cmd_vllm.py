"""``conduit vllm run | logs`` as a person runs them: a real `conduit` process, the fake vLLM, SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from helpers.paths import HELPERS

from conduit.daemon.cli.vllm import tail_text

FAKE = str(HELPERS / "fake_vllm.py")
CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]


def write_profile(home: Path, vllm: str) -> None:
    p = home / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(
        'version = 1\nchannel = "local"\nmodel = "fake"\n\n[channels.local]\nbase_url = "http://127.0.0.1:18999"\n'
        'protocols = ["openai", "anthropic"]\n\n' + vllm
    )


def test_run_until_ctrl_c_then_nothing_left(temp_home: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    write_profile(temp_home, f'[vllm]\nmodel = "fake"\nport = {port}\ncommand = ["{sys.executable}", "{FAKE}"]\n'
                             'swap_space = 4\nextra_env = {{ FAKE_VLLM_CHILDREN = "1" }}\n'.replace("{{", "{")
                  .replace("}}", "}"))
    env = dict(os.environ, HOME=str(temp_home), COLUMNS="200", NO_COLOR="1")
    proc = subprocess.Popen([*CONDUIT, "vllm", "run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if " ready at " in line:
                break
        assert any("ready at" in ln for ln in lines), lines
        pid_line = next(ln for ln in lines if " starting pid " in ln)
        vllm_pid = int(pid_line.split(" starting pid ")[1].split()[0])
        group = {p.pid for p in psutil.process_iter() if _pgid(p.pid) == vllm_pid}
        assert len(group) == 3
        proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, errs
    assert "stopped" in out and "Traceback" not in errs
    assert "swap_space" in errs  # the C15 warning reaches the person
    assert not [p for p in group if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    r = subprocess.run([*CONDUIT, "vllm", "logs", "-n", "50"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0 and "Starting vLLM server on" in r.stdout


def test_run_preflight_reads_the_fake_gpus(temp_home: Path, tmp_path: Path) -> None:
    """`conduit vllm run` builds the preflight's probe from agent.gpu, so $CONDUIT_FAKE_GPUS decides."""
    g = 1024**3
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"devices": [{"name": "NVIDIA H100", "uuid": "GPU-0", "total": 80 * g,
                                             "used": 70 * g, "free": 10 * g}]}))
    write_profile(temp_home, f'[vllm]\nmodel = "fake"\nport = 18998\ncommand = ["{sys.executable}", "{FAKE}"]\n'
                             'gpu_memory_utilization = 0.9\n')
    env = dict(os.environ, HOME=str(temp_home), COLUMNS="200", NO_COLOR="1", CONDUIT_FAKE_GPUS=str(gpus))
    proc = subprocess.Popen([*CONDUIT, "vllm", "run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "fix:" in line or not line:
                break
        proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines) + out
    assert " vllm failed" in text and "GPU 0: 10.00 GiB free of 80.00 GiB" in text, (text, errs)
    assert " starting pid " not in text and "Traceback" not in errs  # refused before anything was launched


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_logs_without_a_log_says_what_to_do(temp_home: Path) -> None:
    env = dict(os.environ, HOME=str(temp_home))
    r = subprocess.run([*CONDUIT, "vllm", "logs"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1 and "no vLLM log yet" in r.stderr and "Traceback" not in r.stderr


def test_run_without_vllm_table_is_a_clear_error(temp_home: Path) -> None:
    write_profile(temp_home, "")
    env = dict(os.environ, HOME=str(temp_home))
    r = subprocess.run([*CONDUIT, "vllm", "run"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1 and "no [vllm] table" in r.stderr
    write_profile(temp_home, '[vllm]\nmodel = "m"\nmax_model_length = 5\n')
    r = subprocess.run([*CONDUIT, "vllm", "run"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1 and "profile.toml:11: unknown key `vllm.max_model_length`" in r.stderr
    assert "did you mean `max_model_len`?" in r.stderr and "Traceback" not in r.stderr


def test_tail_text(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_text("".join(f"line {i}\n" for i in range(10)))
    assert tail_text(p, 3) == "line 7\nline 8\nline 9"
