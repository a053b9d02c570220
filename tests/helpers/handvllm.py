"""A real vLLM started the way a person starts it by hand (not by conduit), for the real-vLLM tier: its own
session (``os.killpg(proc.pid, ...)`` ends it), its output appended to a log file.

    proc = launch(tiny_settings(), tmp_path / "vllm.log", "--no-enable-prefix-caching")
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from conduit.daemon.config.vllm import API_SERVER_MODULE


def launch(settings: Any, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """``<settings.python> -m vllm.entrypoints.openai.api_server`` serving ``settings.model`` as ``tiny`` on
    ``settings.port`` (float32, max_model_len 256, eager), with ``settings.extra_env`` and the ``extra`` flags."""
    argv = [settings.python, "-m", API_SERVER_MODULE, "--model", settings.model, "--served-model-name", "tiny",
            "--host", "127.0.0.1", "--port", str(settings.port), "--dtype", "float32", "--max-model-len", "256",
            "--enforce-eager", *extra]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=dict(os.environ, **settings.extra_env), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
