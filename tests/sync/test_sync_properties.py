"""Property tests through the whole sync: random settings documents keep every unowned key and its order,
and a second sync writes nothing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from helpers.toolfiles import run_sync, write_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conduit.adapters.claude_code import AUTH_VARS, DEPRECATED_VARS, MODEL_VARS

OWNED_ENV = {"ANTHROPIC_BASE_URL", *AUTH_VARS, *MODEL_VARS, *DEPRECATED_VARS, "API_TIMEOUT_MS"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
keys = st.text(min_size=1, max_size=12).filter(lambda k: k != "env")
env_keys = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12).filter(lambda k: k not in OWNED_ENV)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(top=st.dictionaries(keys, json_values, max_size=6), env=st.dictionaries(env_keys, st.text(max_size=10), max_size=5),
       env_first=st.booleans())
def test_claude_settings_unowned_keys_survive(temp_home: Path, top: dict, env: dict, env_first: bool) -> None:
    home = Path(tempfile.mkdtemp(dir=temp_home))
    try:
        os.environ["HOME"] = str(home)
        doc = ({"env": env} | top) if env_first else (top | {"env": env})
        path = home / ".claude" / "settings.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(doc, indent=2))
        write_profile(home, tools=("claude_code",))
        run_sync(home)
        after = json.loads(path.read_text())
        helper = [] if "apiKeyHelper" in doc else ["apiKeyHelper"]  # the key by reference (the default), appended
        assert list(after) == [*doc, *helper]
        for k, v in top.items():
            assert after[k] == v
        assert [k for k in after["env"] if k not in OWNED_ENV] == list(env)
        assert all(after["env"][k] == v for k, v in env.items())
        mtime = path.stat().st_mtime_ns
        second = run_sync(home)
        assert not second.changed and path.stat().st_mtime_ns == mtime
    finally:
        shutil.rmtree(home, ignore_errors=True)
