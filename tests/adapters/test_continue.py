"""Continue adapter: the `conduit` model entry in config.yaml, YAML comments and other entries kept."""

from __future__ import annotations

from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile
from ruamel.yaml import YAML


def _load(text: str) -> dict:
    return YAML(typ="safe").load(text)


def test_fixture_survives_only_owned_keys_change(temp_home: Path) -> None:
    path = toolsamples.continue_dev(temp_home)
    write_profile(temp_home, tools=("continue",))
    lifecycle(temp_home)
    text = path.read_text()
    before, after = _load(toolsamples.CONTINUE_YAML), _load(text)
    entry = after["models"].pop()
    assert after == before
    assert entry == {"name": "conduit", "provider": "openai", "model": "claude-sonnet-4-20250514",
                     "apiBase": "https://gw.example.com/api/v1", "apiKey": "sk-test-abc",
                     "roles": ["chat", "edit", "apply"]}
    # every original line is still there, in order
    lines = iter(text.splitlines())
    assert all(any(line == got for got in lines) for line in toolsamples.CONTINUE_YAML.splitlines())
    assert path.stat().st_mode & 0o777 == 0o600


def test_existing_entry_updated_in_place_user_fields_kept(temp_home: Path) -> None:
    text = toolsamples.CONTINUE_YAML.replace("models:\n", "models:\n  - name: conduit  # managed by conduit\n"
                                            "    provider: openai\n    model: old\n    apiBase: https://old/v1\n"
                                            "    apiKey: sk-old\n    roles: [chat]\n    defaultCompletionOptions:\n"
                                            "      temperature: 0.2\n")
    path = toolsamples.write(temp_home / ".continue" / "config.yaml", text)
    write_profile(temp_home, tools=("continue",), model="glm-4.6")
    lifecycle(temp_home)
    out = path.read_text()
    entry = _load(out)["models"][0]
    assert entry == {"name": "conduit", "provider": "openai", "model": "glm-4.6",
                     "apiBase": "https://gw.example.com/api/v1", "apiKey": "sk-test-abc", "roles": ["chat"],
                     "defaultCompletionOptions": {"temperature": 0.2}}
    assert "# managed by conduit" in out and len(_load(out)["models"]) == 3


def test_new_file_created_when_dir_exists(temp_home: Path) -> None:
    (temp_home / ".continue").mkdir()
    write_profile(temp_home, tools=("continue",))
    lifecycle(temp_home)
    doc = _load((temp_home / ".continue" / "config.yaml").read_text())
    assert doc["schema"] == "v1" and doc["models"][0]["name"] == "conduit"


def test_deprecated_config_json_only_is_unsupported(temp_home: Path) -> None:
    toolsamples.write(temp_home / ".continue" / "config.json", '{"models": []}\n')
    write_profile(temp_home, tools=("continue",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "unsupported" and "config.yaml" in (report.message or "")
    assert not (temp_home / ".continue" / "config.yaml").exists()


def test_invalid_yaml_left_alone(temp_home: Path) -> None:
    bad = "models:\n  - name: x\n   provider: [\n"
    path = toolsamples.write(temp_home / ".continue" / "config.yaml", bad)
    write_profile(temp_home, tools=("continue",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "error" and "config.yaml" in (report.message or "")
    assert path.read_text() == bad
