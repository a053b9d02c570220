"""Hermes Agent adapter: config.yaml's ``providers.conduit`` and ``model``, the key in ``.env``, the limits,
``HERMES_HOME``, and ``HERMES_INFERENCE_MODEL`` outranking ``model.default``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.hermes import Hermes


def _doc(home: Path) -> dict:
    return yaml.safe_load((home / ".hermes" / "config.yaml").read_text())


def test_sample_keeps_everything_but_conduits_keys(temp_home: Path) -> None:
    path = toolsamples.hermes(temp_home)
    write_profile(temp_home, tools=("hermes",))
    lifecycle(temp_home)
    text = path.read_text()
    doc, before = yaml.safe_load(text), yaml.safe_load(toolsamples.HERMES_CONFIG)
    assert doc.pop("model") == {"default": "claude-sonnet-4-20250514", "provider": "custom:conduit"}
    assert doc["providers"].pop("conduit") == {"name": "conduit", "base_url": "https://gw.example.com/api/v1",
                                               "key_env": "CONDUIT_API_KEY", "api_mode": "chat_completions"}
    before.pop("model")
    assert doc == before
    for kept in ("# Hermes Agent configuration", "# fewer turns than the default"):
        assert kept in text
    assert "sk-test-abc" not in text and path.stat().st_mode & 0o777 == 0o644
    dotenv = (temp_home / ".hermes" / ".env").read_text()
    assert "OPENROUTER_API_KEY=sk-or-person-own" in dotenv and "CONDUIT_API_KEY=sk-test-abc" in dotenv


def test_a_plain_string_model_becomes_a_mapping(temp_home: Path) -> None:
    toolsamples.write(temp_home / ".hermes" / "config.yaml", "model: anthropic/claude-opus-4.6\nagent:\n  max_turns: 5\n")
    write_profile(temp_home, tools=("hermes",))
    lifecycle(temp_home)
    doc = _doc(temp_home)
    assert doc["model"] == {"default": "claude-sonnet-4-20250514", "provider": "custom:conduit"}
    assert doc["agent"] == {"max_turns": 5}


def test_limits_written_while_known_and_removed_after(temp_home: Path) -> None:
    toolsamples.hermes(temp_home)
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("hermes",),
                  extra="context_window = 32768\nmax_output_tokens = 2000\n")
    lifecycle(temp_home)
    model = _doc(temp_home)["model"]
    assert (model["context_length"], model["max_tokens"]) == (32768, 2000)
    write_profile(temp_home, tools=("hermes",))
    lifecycle(temp_home)
    assert "context_length" not in _doc(temp_home)["model"] and "max_tokens" not in _doc(temp_home)["model"]


def test_hermes_home_variable(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = temp_home / "hermes-profile"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    write_profile(temp_home, tools=("hermes",))
    lifecycle(temp_home)
    assert yaml.safe_load((home / "config.yaml").read_text())["model"]["provider"] == "custom:conduit"
    assert (home / ".env").stat().st_mode & 0o777 == 0o600


def test_inference_model_variable_outranks_the_file(temp_home: Path) -> None:
    toolsamples.hermes(temp_home)
    write_profile(temp_home, tools=("hermes",))
    run_sync(temp_home)
    env = Env({"HOME": str(temp_home), "HERMES_INFERENCE_MODEL": "other/model"}, cwd=temp_home)
    settings = ToolSettings(tool="hermes", channel="gw", root=Root("https://gw.example.com/api"), key="sk-test-abc",
                            model="claude-sonnet-4-20250514")
    (blocker,) = Hermes().outranks(settings, env)
    assert blocker.fix == "unset HERMES_INFERENCE_MODEL"
    facts = Hermes().inspect(env)
    assert (facts.effective or {})["model"].value == "other/model"
    assert "sk-test-abc" not in str(facts.as_dict())


def test_a_window_hermes_refuses_is_written_with_a_notice(temp_home: Path) -> None:
    toolsamples.hermes(temp_home)
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("hermes",), extra="context_window = 32768\n")
    (report,) = run_sync(temp_home).tools
    notices = [n for r in report.results for n in r.notices]
    assert _doc(temp_home)["model"]["context_length"] == 32768
    assert any("under 64000" in n for n in notices), notices
