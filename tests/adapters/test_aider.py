"""Aider adapter: ~/.aider.conf.yml owned keys with comments kept; doctor shows AIDER_* and .env overrides."""

from __future__ import annotations

from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, write_profile
from ruamel.yaml import YAML

from conduit.adapters.base import Env
from conduit.daemon.sync.doctor import doctor


def _load(text: str) -> dict:
    return YAML(typ="safe").load(text)


def test_fixture_survives_only_owned_keys_change(temp_home: Path) -> None:
    path = toolsamples.aider(temp_home)
    write_profile(temp_home, tools=("aider",))
    lifecycle(temp_home)
    text = path.read_text()
    after, before = _load(text), _load(toolsamples.AIDER_YAML)
    assert after.pop("model") == "openai/claude-sonnet-4-20250514"
    assert after.pop("weak-model") == "openai/claude-3-5-haiku-20241022"
    assert after.pop("openai-api-base") == "https://gw.example.com/api/v1"
    assert after.pop("openai-api-key") == "sk-test-abc"
    before.pop("model")
    assert after == before
    kept = [line for line in toolsamples.AIDER_YAML.splitlines() if not line.startswith("model:")]
    lines = iter(text.splitlines())
    assert all(any(line == got for got in lines) for line in kept)
    assert text.splitlines()[6] == "model: openai/claude-sonnet-4-20250514"  # replaced where it was
    assert path.stat().st_mode & 0o777 == 0o600


def test_no_small_model_no_weak_model(temp_home: Path) -> None:
    path = toolsamples.aider(temp_home)
    write_profile(temp_home, tools=("aider",), small_model=None)
    lifecycle(temp_home)
    assert "weak-model" not in _load(path.read_text())


def test_doctor_shows_env_and_dotenv_overrides(temp_home: Path) -> None:
    toolsamples.aider(temp_home)
    write_profile(temp_home, tools=("aider",))
    lifecycle(temp_home)
    toolsamples.write(temp_home / ".env", "AIDER_MODEL=gpt-4o\n")
    environ = {"HOME": str(temp_home), "PATH": "", "AIDER_OPENAI_API_KEY": "sk-exported-0000000000"}
    rep = doctor(None, Env(environ, cwd=temp_home))
    eff = rep["tools"]["aider"]["facts"]["effective"]
    assert eff["model"]["overrides_conduit"] and eff["model"]["value"] == "gpt-4o"
    assert eff["model"]["source"] == str(temp_home / ".env")
    assert eff["openai-api-key"]["overrides_conduit"] and eff["openai-api-key"]["source"] == "shell environment"
    assert "sk-exported-0000000000" not in str(rep)
    assert not eff["openai-api-base"]["overrides_conduit"]
    assert eff["openai-api-base"]["value"] == "https://gw.example.com/api/v1"
