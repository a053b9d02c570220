"""Mistral Vibe adapter: config.toml's ``[[providers]]``/``[[models]]`` tables named ``conduit``, the key in
``.env``, the limits, ``VIBE_HOME``, and what outranks the user file (exported variables, a project file)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.vibe import Vibe


def _doc(home: Path) -> dict:
    return tomllib.loads((home / ".vibe" / "config.toml").read_text())


def _conduit(tables: list[dict], key: str) -> dict:
    (found,) = [t for t in tables if t.get(key) == "conduit"]
    return found


def test_sample_keeps_everything_but_conduits_tables(temp_home: Path) -> None:
    path = toolsamples.vibe(temp_home)
    write_profile(temp_home, tools=("vibe",))
    lifecycle(temp_home)
    text = path.read_text()
    doc, before = tomllib.loads(text), tomllib.loads(toolsamples.VIBE_CONFIG)
    assert doc.pop("active_model") == "conduit" and before.pop("active_model") == "my-local-model"
    assert doc["providers"].pop() == {"name": "conduit", "api_base": "https://gw.example.com/api/v1",
                                      "api_key_env_var": "CONDUIT_API_KEY", "api_style": "openai",
                                      "backend": "generic"}
    assert doc["models"].pop() == {"alias": "conduit", "name": "claude-sonnet-4-20250514", "provider": "conduit"}
    assert doc == before
    for kept in ("# Mistral Vibe configuration", "# a local model served by llama.cpp", "# keep me"):
        assert kept in text
    assert "sk-test-abc" not in text and path.stat().st_mode & 0o777 == 0o644
    dotenv = (temp_home / ".vibe" / ".env").read_text()
    assert "MISTRAL_API_KEY=sk-mistral-person-own" in dotenv and "CONDUIT_API_KEY=sk-test-abc" in dotenv


def test_limits_written_while_known_and_removed_after(temp_home: Path) -> None:
    toolsamples.vibe(temp_home)
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("vibe",),
                  extra="context_window = 32768\nmax_output_tokens = 2000\n")
    lifecycle(temp_home)
    model = _conduit(_doc(temp_home)["models"], "alias")
    assert (model["max_context_length"], model["max_output_tokens"]) == (32768, 2000)
    write_profile(temp_home, tools=("vibe",))
    lifecycle(temp_home)
    assert set(_conduit(_doc(temp_home)["models"], "alias")) == {"alias", "name", "provider"}


def test_fresh_home_with_create(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = temp_home / "vibe-home"
    monkeypatch.setenv("VIBE_HOME", str(home))
    write_profile(temp_home, tools=(), extra="[tools.vibe]\ncreate = true\n")
    lifecycle(temp_home)
    doc = tomllib.loads((home / "config.toml").read_text())
    assert doc["active_model"] == "conduit" and len(doc["providers"]) == len(doc["models"]) == 1


def test_providers_that_is_not_an_array_is_left_alone(temp_home: Path) -> None:
    bad = 'providers = "llamacpp"\n'
    path = toolsamples.write(temp_home / ".vibe" / "config.toml", bad)
    write_profile(temp_home, tools=("vibe",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "error" and "providers" in (report.message or "")
    assert path.read_text() == bad


def test_exported_variables_and_project_file_outrank(temp_home: Path) -> None:
    toolsamples.vibe(temp_home)
    write_profile(temp_home, tools=("vibe",))
    run_sync(temp_home)
    project = temp_home / "project"
    toolsamples.write(project / ".vibe" / "config.toml", 'active_model = "devstral"\n')
    toolsamples.write(temp_home / ".vibe" / "trusted_folders.toml", f'trusted = ["{project}"]\n')  # else ignored
    env = Env({"HOME": str(temp_home), "CONDUIT_API_KEY": "sk-shell", "VIBE_ACTIVE_MODEL": "x"}, cwd=project)
    settings = ToolSettings(tool="vibe", channel="gw", root=Root("https://gw.example.com/api"), key="sk-test-abc",
                            model="claude-sonnet-4-20250514")
    sources = {(b.source, b.fix.split()[-1]) for b in Vibe().outranks(settings, env)}
    assert ("shell environment", "VIBE_ACTIVE_MODEL") in sources and ("shell environment", "CONDUIT_API_KEY") in sources
    assert any(src.endswith(".vibe/config.toml") for src, _ in sources)
    view = Vibe().client_view(env)
    assert view is not None and view.key == "sk-shell"  # the shell's value wins over .env
    facts = Vibe().inspect(env)
    assert "sk-shell" not in str(facts.as_dict()) and "sk-test-abc" not in str(facts.as_dict())


def test_a_window_vibe_refuses_is_written_with_a_notice(temp_home: Path) -> None:
    toolsamples.vibe(temp_home)
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("vibe",), extra="context_window = 8192\n")
    (report,) = run_sync(temp_home).tools
    notices = [n for r in report.results for n in r.notices]
    assert _conduit(_doc(temp_home)["models"], "alias")["max_context_length"] == 8192
    assert any("under 13334" in n for n in notices), notices
