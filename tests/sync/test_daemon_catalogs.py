"""The daemon follows the channels' model-list caches: a new context window reaches the tools without a profile
edit, and a rewrite that lists the same models costs no sync.

A real ``conduit daemon`` subprocess under a temporary HOME, Codex CLI's real config file, and the cache written
by conduit's own ``write_cache`` (what the agent's prober and ``conduit models`` call).
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

from helpers.daemonproc import Daemon, wait_for
from helpers.toolfiles import write_profile

from conduit.daemon.catalog.models import Catalog, ModelInfo, cache_path, models_base, write_cache
from conduit.daemon.config.profile import load_profile

MODEL = "qwen-coder-7b"


def _context(home: Path) -> int | None:
    path = home / ".codex" / "config.toml"
    if not path.exists():
        return None
    value = tomllib.loads(path.read_text()).get("model_context_window")
    return value if isinstance(value, int) else None


def _cache(base: str, window: int) -> None:
    write_cache(Catalog("gw", base, time.time(), (ModelInfo(MODEL, window, None), ModelInfo("other", 4096, None))))


def test_a_new_model_list_reaches_the_tools_and_the_same_list_costs_nothing(temp_home: Path, tmp_path: Path) -> None:
    profile = write_profile(temp_home, "http://127.0.0.1:9/api", tools=(), model=MODEL, small_model=None,
                            extra="[tools.codex]\ncreate = true\n")
    base = models_base(load_profile(profile).roots["gw"])
    assert base is not None and not cache_path("gw").parent.exists()  # the models directory comes later
    daemon = Daemon(temp_home, tmp_path).start()
    try:
        wait_for(lambda: (temp_home / ".codex" / "config.toml").exists(), what="codex config written")
        assert _context(temp_home) is None  # no cache yet: no context key
        _cache(base, 8192)  # creates state/models/: the daemon watched its parent until now
        wait_for(lambda: _context(temp_home) == 8192, what="context 8192 from the first cache")
        _cache(base, 8192)  # the same models, fetched again (the agent refreshes every minute)
        _cache(base, 32768)
        try:
            wait_for(lambda: _context(temp_home) == 32768, what="context 32768 from the new list")
        except AssertionError:
            print(daemon.log()[-6000:])
            state = temp_home / ".local" / "state" / "conduit" / "state.json"
            print("STATE", state.read_text() if state.exists() else "none")
            raise
        wait_for(lambda: daemon.log().count("sync codex: changed") >= 3, what="log lines")
    finally:
        assert daemon.stop() == 0
    log = daemon.log()
    assert log.count("(models)") == log.count("sync codex: changed config.toml (models)") == 2, log
