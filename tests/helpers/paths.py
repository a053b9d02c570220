"""The repository's folders as the tests name them."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
"""``tests/helpers``: the scripts tests run as subprocesses (``fake_vllm.py``, ``planted_agent.py``...)."""
TESTS = HELPERS.parent
"""``tests``."""
DATA = TESTS / "data"
"""``tests/data``: captured vLLM logs, metrics and the message corpus."""
REPO = TESTS.parent
"""The repository root."""
