"""Kimi CLI adapter: config.toml's conduit provider and model, the window (Kimi's 100000 while unknown), the
legacy JSON refusal, ``KIMI_SHARE_DIR``, and the exported OpenAI variables that replace the file's values."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.kimi import UNKNOWN_CONTEXT, Kimi


def _doc(home: Path) -> dict:
    return tomllib.loads((home / ".kimi" / "config.toml").read_text())


def test_sample_keeps_everything_but_conduits_tables(temp_home: Path) -> None:
    path = toolsamples.kimi(temp_home)
    write_profile(temp_home, tools=("kimi",))
    lifecycle(temp_home)
    text = path.read_text()
    doc, before = tomllib.loads(text), tomllib.loads(toolsamples.KIMI_CONFIG)
    assert doc.pop("default_model") == "conduit" and before.pop("default_model") == "kimi-for-coding"
    assert doc["providers"].pop("conduit") == {"type": "openai_legacy", "base_url": "https://gw.example.com/api/v1",
                                               "api_key": "sk-test-abc"}
    assert doc["models"].pop("conduit") == {"provider": "conduit", "model": "claude-sonnet-4-20250514",
                                            "max_context_size": UNKNOWN_CONTEXT}
    assert doc == before
    for kept in ("# Kimi CLI configuration", "# keep me", 'capabilities = ["thinking", "image_in"]'):
        assert kept in text
    assert text.index("default_model") < text.index("[providers.kimi-for-coding]")
    assert path.stat().st_mode & 0o777 == 0o600


def test_window_written_then_kimis_default_back(temp_home: Path) -> None:
    toolsamples.kimi(temp_home)
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("kimi",), extra="context_window = 32768\n")
    lifecycle(temp_home)
    assert _doc(temp_home)["models"]["conduit"]["max_context_size"] == 32768
    write_profile(temp_home, tools=("kimi",))
    lifecycle(temp_home)
    assert _doc(temp_home)["models"]["conduit"]["max_context_size"] == UNKNOWN_CONTEXT
    assert _doc(temp_home)["models"]["kimi-for-coding"]["max_context_size"] == 262144


def test_persons_window_stays(temp_home: Path) -> None:
    path = toolsamples.kimi(temp_home)
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("kimi",), extra="context_window = 32768\n")
    assert run_sync(temp_home).ok
    path.write_text(path.read_text().replace("max_context_size = 32768", "max_context_size = 50000  # mine"))
    write_profile(temp_home, tools=("kimi",))
    lifecycle(temp_home)
    assert "max_context_size = 50000  # mine" in path.read_text()


def test_legacy_json_refused_until_kimi_migrates_it(temp_home: Path) -> None:
    toolsamples.write(temp_home / ".kimi" / "config.json", '{"default_model": ""}\n')
    write_profile(temp_home, tools=(), extra="[tools.kimi]\ncreate = true\n")
    (report,) = run_sync(temp_home).tools
    assert report.status != "changed" and "config.json" in (report.message or "")
    assert not (temp_home / ".kimi" / "config.toml").exists()


def test_share_dir_variable(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    share = temp_home / "kimi-share"
    share.mkdir()
    monkeypatch.setenv("KIMI_SHARE_DIR", str(share))
    write_profile(temp_home, tools=("kimi",))
    lifecycle(temp_home)
    assert tomllib.loads((share / "config.toml").read_text())["default_model"] == "conduit"
    assert not (temp_home / ".kimi").exists()


def test_exported_openai_variables_outrank_the_file(temp_home: Path) -> None:
    toolsamples.kimi(temp_home)
    write_profile(temp_home, tools=("kimi",))
    run_sync(temp_home)
    env = Env({"HOME": str(temp_home), "OPENAI_BASE_URL": "https://elsewhere.example/v1",
               "OPENAI_API_KEY": "sk-shell"}, cwd=temp_home)
    settings = ToolSettings(tool="kimi", channel="gw", root=Root("https://gw.example.com/api"), key="sk-test-abc",
                            model="claude-sonnet-4-20250514")
    blockers = Kimi().outranks(settings, env)
    assert {b.why.split()[0] for b in blockers} == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
    view = Kimi().client_view(env)
    assert view is not None and (view.base_url, view.key) == ("https://elsewhere.example/v1", "sk-shell")
    facts = Kimi().inspect(env)
    assert set(facts.effective or {}) == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
    assert "sk-shell" not in str(facts.as_dict()) and "sk-test-abc" not in str(facts.as_dict())
