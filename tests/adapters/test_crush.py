"""Crush adapter (documented format only): strict JSON edits, the selected models, the file's location, what
outranks the global crush.json, and that the real-tool tier skips it (no package)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import toolsamples
from helpers.toolfiles import lifecycle, write_profile

from conduit.adapters.base import Env, Root, TextTarget, ToolSettings
from conduit.adapters.crush import Crush, config_file, data_file
from conduit.errors import ToolFileError

ADAPTER = Crush()


def settings(**kw: object) -> ToolSettings:
    base: dict[str, object] = {"tool": "crush", "channel": "gw", "root": Root("https://gw.example.com/api"),
                               "key": "sk-test-abc", "model": "m1", "options": Crush.Options(create=True)}
    return ToolSettings(**{**base, **kw})  # type: ignore[arg-type]


def render(home: Path, text: str | None, **kw: object) -> str:
    [target] = ADAPTER.plan(settings(**kw), Env({"HOME": str(home)}, cwd=home))
    assert isinstance(target, TextTarget)
    return target.render(text)


def test_sample_survives_only_owned_keys_change(temp_home: Path) -> None:
    path = toolsamples.crush(temp_home)
    write_profile(temp_home, tools=("crush",))
    lifecycle(temp_home)
    before, after = json.loads(toolsamples.CRUSH_JSON), json.loads(path.read_text())
    assert after["providers"].pop("conduit") == {
        "name": "conduit (gw)", "type": "openai-compat", "base_url": "https://gw.example.com/api/v1",
        "api_key": "sk-test-abc", "models": [{"id": "claude-sonnet-4-20250514", "name": "claude-sonnet-4-20250514"},
                                             {"id": "claude-3-5-haiku-20241022", "name": "claude-3-5-haiku-20241022"}]}
    assert after.pop("models") == {
        "large": {"model": "claude-sonnet-4-20250514", "provider": "conduit", "max_tokens": 4000},
        "small": {"model": "claude-3-5-haiku-20241022", "provider": "conduit"}}
    before.pop("models")
    assert after == before
    assert path.stat().st_mode & 0o777 == 0o600


def test_small_slot_takes_the_main_model_without_a_small_one(tmp_path: Path) -> None:
    doc = json.loads(render(tmp_path, None))
    assert doc["models"]["small"] == {"model": "m1", "provider": "conduit"}
    assert doc["providers"]["conduit"]["models"] == [{"id": "m1", "name": "m1"}]


def test_limits_written_when_known(tmp_path: Path) -> None:
    doc = json.loads(render(tmp_path, None, context_window=131072, max_output_tokens=8192))
    assert doc["providers"]["conduit"]["models"] == [{"id": "m1", "name": "m1", "context_window": 131072,
                                                      "default_max_tokens": 8192}]


def test_comments_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolFileError):
        render(tmp_path, '{\n  // a comment\n  "options": {}\n}\n')


def test_locations(tmp_path: Path) -> None:
    assert config_file(Env({"HOME": str(tmp_path)})) == tmp_path / ".config" / "crush" / "crush.json"
    assert config_file(Env({"HOME": str(tmp_path), "CRUSH_GLOBAL_CONFIG": str(tmp_path / "c")})) == \
        tmp_path / "c" / "crush.json"
    assert data_file(Env({"HOME": str(tmp_path)})) == tmp_path / ".local" / "share" / "crush" / "crush.json"
    assert data_file(Env({"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "d")})) == \
        tmp_path / "d" / "crush" / "crush.json"


def test_outranks(temp_home: Path, tmp_path: Path) -> None:
    toolsamples.crush(temp_home)
    project = tmp_path / "project"
    project.mkdir()
    (project / ".crush.json").write_text("{}")
    (temp_home / ".config" / "crush" / "crushrc").write_text("provider add x --type openai-compat\n")
    data = temp_home / ".local" / "share" / "crush" / "crush.json"
    data.parent.mkdir(parents=True)
    data.write_text(json.dumps({"models": {"large": {"model": "deepseek-chat", "provider": "deepseek"},
                                           "small": {"model": "m1", "provider": "conduit"}}}))
    blockers = ADAPTER.outranks(settings(), Env(cwd=project))
    assert [b.source for b in blockers] == [str(project / ".crush.json"),
                                            str(temp_home / ".config" / "crush" / "crushrc"), f"{data} models.large"]


def test_documented_format_only_the_tier_skips_it() -> None:
    from realtools.tier import case_id, cases, check_declared

    assert ADAPTER.package is None and ADAPTER.one_shot is not None
    crush_cases = [c for c in cases() if c[0] == "crush"]
    assert crush_cases and all(not form.startswith("missing") for _, form, _ in crush_cases)
    with pytest.raises(pytest.skip.Exception):
        check_declared(*crush_cases[0][:2])
    assert case_id(*crush_cases[0]) == "crush-api-dirtykey"
