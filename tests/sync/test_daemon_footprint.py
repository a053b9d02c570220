"""What the sync daemon's code loads: no event loop, TLS, HTTP client or keychain library until a request or a
key source needs one. Each costs megabytes of idle RSS in a process that runs all day (asyncio with ssl alone
is about 6 MB; bench/propagation.py measures the daemon's idle RSS against its goal of 45 MB).

A real interpreter imports the daemon's process module and every adapter of the registry, as the daemon does
on its first sync, and reports its ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """import json, sys
import conduit.daemon.sync.syncd
from conduit.adapters.registry import ADAPTERS
for name in ADAPTERS:
    ADAPTERS[name]
print(json.dumps(sorted(sys.modules)))
"""

ON_DEMAND = ("asyncio", "ssl", "httpx", "aiohttp", "keyring", "secretstorage", "jeepney", "mcp")
"""Loaded only inside the function that makes a request or reads such a key source."""


def test_daemon_loads_no_event_loop_tls_http_or_keychain_library() -> None:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    names = set(json.loads(r.stdout))
    loaded = sorted(n for n in names if n.split(".")[0] in ON_DEMAND)
    assert loaded == [], loaded
    assert "conduit.adapters.claude_code" in names  # it really loaded the adapters
