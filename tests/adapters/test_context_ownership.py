"""A context-window / output-limit value belongs to conduit only while it is still what conduit wrote there
(``conduit.adapters.limits``, records in ``state_dir()/limits.json``): a limit that becomes unknown removes
conduit's own value and puts back the one it replaced; a value the person (or the tool's own settings window)
set or changed stays; a person's Aider metadata entry comes back whole after conduit wrote into it; a JSON5
metadata file, which Aider reads, is left alone with a notice and Aider's YAML is still synced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helpers.modelserver import ModelServer
from helpers.toolfiles import cline_gen_b, cline_gen_c, run_sync, write_profile

from conduit.daemon.catalog.context import limits_path
from conduit.daemon.catalog.models import cache_path, refresh
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import resolve_channel

LISTED, OTHER = "qwen-coder-7b", "claude-sonnet-4"
BODY = {"object": "list", "data": [{"id": LISTED, "object": "model", "max_model_len": 4096},
                                   {"id": OTHER, "object": "model", "max_model_len": 200000}]}
TABLES = "[tools.codex]\ncreate = true\n[tools.cline]\n[tools.aider]\ncreate = true\n"
ACT = {"contextWindow": 32000, "maxTokens": 4096, "supportsImages": True}
PLAN = {"contextWindow": 1000, "supportsPromptCache": False}
USER_ENTRY = {"input_cost_per_token": 3e-06, "max_input_tokens": 150000, "litellm_provider": "openai", "mode": "chat"}


@pytest.fixture
def server() -> ModelServer:
    srv = ModelServer(BODY)
    yield srv
    srv.close()


def _setup(home: Path, url: str, model: str) -> None:
    """The person's own limits in Codex, Cline (B and C) and Aider's metadata; the model list cached."""
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('approval_policy = "on-request"\nmodel_context_window = 32000   '
                                                 '# mine\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n')
    state, _ = cline_gen_b(home)
    doc = json.loads(state.read_text())
    state.write_text(json.dumps({**doc, "actModeOpenAiModelInfo": ACT, "planModeOpenAiModelInfo": PLAN}))
    cline_gen_c(home)
    (home / ".aider.model.metadata.json").write_text(json.dumps({f"openai/{OTHER}": USER_ENTRY}, indent=2))
    _profile(home, url, model)
    refresh(resolve_channel(load_profile(home / ".config" / "conduit" / "profile.toml"), "gw"))


def _profile(home: Path, url: str, model: str) -> None:
    write_profile(home, url, tools=(), model=model, small_model=None, extra=TABLES)


def _codex(home: Path) -> dict[str, object]:
    return tomllib.loads((home / ".codex" / "config.toml").read_text())


def _state(home: Path) -> dict[str, object]:
    return json.loads((home / ".cline" / "data" / "globalState.json").read_text())


def _meta(home: Path) -> dict[str, object]:
    return json.loads((home / ".aider.model.metadata.json").read_text())


def test_person_values_kept_when_limits_unknown(temp_home: Path, server: ModelServer) -> None:
    """The profile's model is not in the list: nothing of the person's is touched, the comment included, and
    neither Cline object goes."""
    _setup(temp_home, server.url, "unlisted-model")
    assert run_sync(temp_home).ok
    assert "model_context_window = 32000   # mine" in (temp_home / ".codex" / "config.toml").read_text()
    state = _state(temp_home)
    assert state["actModeOpenAiModelInfo"] == ACT and state["planModeOpenAiModelInfo"] == PLAN
    assert _meta(temp_home) == {f"openai/{OTHER}": USER_ENTRY}


def test_conduit_value_goes_and_the_replaced_one_comes_back(temp_home: Path, server: ModelServer) -> None:
    """Known limits are written over the person's; once unknown, the person's values are back, and a second
    sync writes nothing."""
    _setup(temp_home, server.url, LISTED)
    assert run_sync(temp_home).ok
    assert _codex(temp_home)["model_context_window"] == 4096
    assert _state(temp_home)["actModeOpenAiModelInfo"] == {**ACT, "contextWindow": 4096, "maxTokens": 1024}
    assert _state(temp_home)["planModeOpenAiModelInfo"] == {**PLAN, "contextWindow": 4096, "maxTokens": 1024}
    cache_path("gw").unlink()  # the channel now lists no context for the model
    assert run_sync(temp_home).ok
    assert _codex(temp_home)["model_context_window"] == 32000
    state = _state(temp_home)
    assert state["actModeOpenAiModelInfo"] == ACT and state["planModeOpenAiModelInfo"] == PLAN
    settings = json.loads((temp_home / ".cline/data/settings/providers.json").read_text())["providers"]
    assert "contextWindow" not in settings["openai-compatible"]["settings"]  # conduit had added it: gone
    assert not run_sync(temp_home).changed


def test_value_changed_by_the_person_stays(temp_home: Path, server: ModelServer) -> None:
    """A value the person (or Cline's window) changed after conduit wrote it is theirs: kept when unknown."""
    _setup(temp_home, server.url, LISTED)
    assert run_sync(temp_home).ok
    cfg = temp_home / ".codex" / "config.toml"
    cfg.write_text(cfg.read_text().replace("model_context_window = 4096", "model_context_window = 9999"))
    state = _state(temp_home)
    state["actModeOpenAiModelInfo"] = {**ACT, "contextWindow": 7777}  # type: ignore[dict-item]
    (temp_home / ".cline" / "data" / "globalState.json").write_text(json.dumps(state))
    cache_path("gw").unlink()
    assert run_sync(temp_home).ok
    assert _codex(temp_home)["model_context_window"] == 9999
    info = _state(temp_home)["actModeOpenAiModelInfo"]
    assert info["contextWindow"] == 7777 and info["maxTokens"] == 4096  # type: ignore[index]
    assert _state(temp_home)["planModeOpenAiModelInfo"] == PLAN  # conduit's values there: the person's back


def test_aider_person_entry_back_after_a_model_round_trip(temp_home: Path, server: ModelServer) -> None:
    """The person's entry for a model conduit switched to (a fallback, a `conduit use`) gets conduit's limits
    while it is the model, and is exactly the person's again once it is not; conduit's entry of the model it
    left goes."""
    _setup(temp_home, server.url, LISTED)
    assert run_sync(temp_home).ok
    assert _meta(temp_home)[f"openai/{LISTED}"] == {"litellm_provider": "openai", "mode": "chat",
                                                    "max_input_tokens": 3072, "max_output_tokens": 1024,
                                                    "max_tokens": 1024}
    _profile(temp_home, server.url, OTHER)
    assert run_sync(temp_home).ok
    meta = _meta(temp_home)
    assert f"openai/{LISTED}" not in meta
    assert meta[f"openai/{OTHER}"]["max_input_tokens"] == 200000 - 32768  # type: ignore[index]
    _profile(temp_home, server.url, LISTED)
    assert run_sync(temp_home).ok
    assert _meta(temp_home)[f"openai/{OTHER}"] == USER_ENTRY
    assert not run_sync(temp_home).changed


def test_dry_run_records_nothing(temp_home: Path, server: ModelServer) -> None:
    """A dry run writes no record: what it would write is not conduit's."""
    _setup(temp_home, server.url, LISTED)
    run_sync(temp_home, dry_run=True)
    assert not limits_path().exists()
    assert run_sync(temp_home).ok
    assert set(json.loads(limits_path().read_text())) == {"aider", "cline", "codex"}
    assert limits_path().stat().st_mode & 0o777 == 0o600


def test_aider_json5_metadata_left_alone_with_a_notice(temp_home: Path, server: ModelServer) -> None:
    """`conduit sync` (a real subprocess) with a JSON5 metadata file: exit 0, the file byte for byte as it was,
    one notice naming it and the way out, and ~/.aider.conf.yml still written."""
    _setup(temp_home, server.url, LISTED)
    meta = temp_home / ".aider.model.metadata.json"
    text = '{\n  // mine\n  "openai/other": {max_input_tokens: 1000, litellm_provider: "openai", mode: "chat",},\n}\n'
    meta.write_text(text)
    env = dict(os.environ, HOME=str(temp_home), COLUMNS="200", NO_COLOR="1")
    run = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], capture_output=True, text=True,
                         env=env, timeout=120)
    out = " ".join((run.stdout + run.stderr).split())  # the terminal width may wrap the notice anywhere
    assert run.returncode == 0, out[-600:]
    assert meta.read_text() == text
    assert str(meta) in out and "convert it to plain JSON" in out
    assert "would ignore" not in out
    assert f"openai/{LISTED}" in (temp_home / ".aider.conf.yml").read_text()


def test_continue_person_limit_kept_and_put_back(temp_home: Path, server: ModelServer) -> None:
    """Continue: the person's ``contextLength`` in conduit's entry stays while unknown, is replaced while known,
    and comes back (their comment on ``temperature`` kept) once unknown again."""
    (temp_home / ".continue").mkdir()
    cfg = temp_home / ".continue" / "config.yaml"
    cfg.write_text("name: Local\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: conduit\n    provider: openai\n"
                   "    model: x\n    defaultCompletionOptions:\n      temperature: 0.2  # mine\n"
                   "      contextLength: 8000\n")
    write_profile(temp_home, server.url, tools=(), model="unlisted-model", small_model=None,
                  extra="[tools.continue]\n")
    refresh(resolve_channel(load_profile(temp_home / ".config" / "conduit" / "profile.toml"), "gw"))
    assert run_sync(temp_home).ok
    assert "contextLength: 8000" in cfg.read_text() and "maxTokens" not in cfg.read_text()
    write_profile(temp_home, server.url, tools=(), model=LISTED, small_model=None, extra="[tools.continue]\n")
    assert run_sync(temp_home).ok
    assert "contextLength: 4096" in cfg.read_text() and "maxTokens: 1024" in cfg.read_text()
    cache_path("gw").unlink()
    assert run_sync(temp_home).ok
    text = cfg.read_text()
    assert "contextLength: 8000" in text and "maxTokens" not in text and "temperature: 0.2  # mine" in text


def test_a_figure_an_older_conduit_wrote_is_still_taken_back(temp_home: Path, server: ModelServer) -> None:
    """Upgrade from a conduit that kept no records: Codex holds the 4096 it wrote; the first sync finds the same
    figure, takes it for conduit's, and removes it once the model has no figure (no stale window)."""
    (temp_home / ".codex").mkdir()
    (temp_home / ".codex" / "config.toml").write_text("model_context_window = 4096\n")
    _profile(temp_home, server.url, LISTED)
    refresh(resolve_channel(load_profile(temp_home / ".config" / "conduit" / "profile.toml"), "gw"))
    run_sync(temp_home)
    assert _codex(temp_home)["model_context_window"] == 4096 and limits_path().exists()
    _profile(temp_home, server.url, "unlisted-model")
    run_sync(temp_home)
    assert "model_context_window" not in _codex(temp_home)


SAVER = """
import sys
from pathlib import Path
from conduit.adapters.base import Root, ToolSettings
from conduit.adapters.limits import LimitLedger
from conduit.adapters.writer.results import WriteResult
from conduit.daemon.catalog.context import remember_limits
tool, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    ledger = LimitLedger()
    ledger.settle(f"/x/{tool}.json", "ctx", 0, 1000 + i)
    s = ToolSettings(tool=tool, channel="gw", root=Root("http://x"), key=None, model="m", limits=ledger)
    remember_limits(s, [WriteResult(tool=tool, label=tool, path=Path(f"/x/{tool}.json"), changed=True)],
                    dry_run=False)
"""


def test_two_processes_saving_records_at_once_keep_both(temp_home: Path) -> None:
    """The daemon and a one-shot sync save at the same moment: neither erases the other tool's records."""
    env = dict(os.environ, HOME=str(temp_home))
    procs = [subprocess.Popen([sys.executable, "-c", SAVER, tool, "60"], env=env) for tool in ("codex", "aider")]
    assert [p.wait(120) for p in procs] == [0, 0]
    doc = json.loads(limits_path().read_text())
    assert doc["codex"] == {"/x/codex.json": {"ctx": {"wrote": 1059, "had": 0}}}
    assert doc["aider"] == {"/x/aider.json": {"ctx": {"wrote": 1059, "had": 0}}}
