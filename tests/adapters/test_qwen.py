"""Qwen Code adapter: conduit's modelProviders.openai entry, auth type and model in settings.json (comments and the
person's entries kept), the key in ~/.qwen/.env by envKey, limits, and what outranks conduit."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.formats.textformats import parse_jsonc, read_dotenv
from conduit.adapters.limits import LimitLedger
from conduit.adapters.qwen import Qwen, QwenOptions, qwen_dir

MODEL = "claude-sonnet-4-20250514"


def _env(home: Path, cwd: Path | None = None, **extra: str) -> Env:
    return Env(dict(os.environ, HOME=str(home), **extra), cwd=cwd or home)


def _settings(**kw: object) -> ToolSettings:
    return ToolSettings("qwen", "gw", Root("https://gw.example.com/api"), "sk-test-abc", model=MODEL,
                        options=QwenOptions(), **kw)  # type: ignore[arg-type]


def test_sample_keeps_everything_but_owned_keys(temp_home: Path) -> None:
    path = toolsamples.qwen(temp_home)
    write_profile(temp_home, tools=("qwen",))
    lifecycle(temp_home)
    text = path.read_text()
    assert "// Qwen Code user settings" in text and "// was: log in" in text
    doc = parse_jsonc(text, path=path)
    assert doc["security"]["auth"]["selectedType"] == "openai"
    assert doc["model"] == {"name": MODEL, "baseUrl": "https://gw.example.com/api/v1"}
    entries = doc["modelProviders"]["openai"]
    assert entries[0] == {"id": MODEL, "name": f"{MODEL} (conduit gw)", "baseUrl": "https://gw.example.com/api/v1",
                          "envKey": "CONDUIT_API_KEY"}
    assert entries[1]["id"] == "claude-3-5-haiku-20241022"
    before = parse_jsonc(toolsamples.QWEN_SETTINGS, path=path)
    assert entries[2:] == before["modelProviders"]["openai"]
    assert {k: doc[k] for k in ("ui", "mcpServers", "$version")} == {k: before[k] for k in ("ui", "mcpServers",
                                                                                            "$version")}
    assert "sk-test-abc" not in text
    dotenv = temp_home / ".qwen" / ".env"
    assert read_dotenv(dotenv.read_text()) == {"BAILIAN_CODING_PLAN_API_KEY": "sk-bailian-own",
                                               "CONDUIT_API_KEY": "sk-test-abc"}
    assert dotenv.stat().st_mode & 0o777 == 0o600


def test_limits_and_person_keys_in_conduit_entry(temp_home: Path) -> None:
    path = toolsamples.qwen(temp_home)
    text = path.read_text().replace('"envKey": "BAILIAN_CODING_PLAN_API_KEY",', '"envKey": "BAILIAN_CODING_PLAN_API_KEY",'
                                    '\n        "generationConfig": {"timeout": 5},')
    ledger = LimitLedger()
    settings = _settings(context_window=131072, max_output_tokens=8192, limits=ledger)
    _, target = Qwen().plan(settings, _env(temp_home))
    first = target.render(text)  # type: ignore[union-attr]
    doc = parse_jsonc(first, path=path)
    ours = doc["modelProviders"]["openai"][0]
    assert ours["generationConfig"] == {"contextWindowSize": 131072, "samplingParams": {"max_tokens": 8192}}
    assert doc["modelProviders"]["openai"][-1]["generationConfig"] == {"timeout": 5}
    ours["generationConfig"]["timeout"] = 9
    edited = first.replace('"contextWindowSize": 131072', '"timeout": 9, "contextWindowSize": 131072')
    # limits unknown now: conduit's values go (its records say they are its own), the person's timeout stays
    _, target = Qwen().plan(_settings(limits=LimitLedger(before=ledger.after)), _env(temp_home))
    again = parse_jsonc(target.render(edited), path=path)  # type: ignore[union-attr]
    assert again["modelProviders"]["openai"][0]["generationConfig"] == {"timeout": 9}


def test_trailing_comma_refused_unchanged(temp_home: Path) -> None:
    bad = '{\n  "ui": { "theme": "GitHub", },\n}\n'
    path = toolsamples.write(temp_home / ".qwen" / "settings.json", bad)
    write_profile(temp_home, tools=("qwen",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "error" and "trailing comma" in (report.message or "")
    assert path.read_text() == bad


def test_qwen_home_variable(temp_home: Path) -> None:
    assert qwen_dir(_env(temp_home, QWEN_HOME="~/q")) == temp_home / "q"
    assert qwen_dir(_env(temp_home)) == temp_home / ".qwen"


def test_client_view_reads_the_key_from_qwens_env(temp_home: Path) -> None:
    toolsamples.qwen(temp_home)
    write_profile(temp_home, tools=("qwen",))
    run_sync(temp_home)
    view = Qwen().client_view(_env(temp_home))
    assert view is not None and view.key == "sk-test-abc" and view.model == MODEL
    assert view.key_files == (temp_home / ".qwen" / ".env",)
    exported = Qwen().client_view(_env(temp_home, CONDUIT_API_KEY="sk-shell"))
    assert exported is not None and exported.key == "sk-shell"


def test_outranks(temp_home: Path, tmp_path: Path) -> None:
    toolsamples.qwen(temp_home)
    write_profile(temp_home, tools=("qwen",))
    run_sync(temp_home)
    project = tmp_path / "project"
    (project / ".qwen").mkdir(parents=True)
    settings = _settings()
    assert Qwen().outranks(settings, _env(temp_home, project, OPENAI_API_KEY="sk-x", OPENAI_MODEL="gpt-4o")) == []
    (project / ".env").write_text("CONDUIT_API_KEY=sk-project\n")
    (project / ".qwen" / "settings.json").write_text('{"model": {"name": "gpt-4o"}, "modelProviders": {"openai": []}}')
    found = Qwen().outranks(settings, _env(temp_home, project))
    # the list replaces conduit's; model.name alone counts only where an entry offers it (qwen_precedence)
    assert [b.source for b in found] == [str(project / ".env"), str(project / ".qwen" / "settings.json")]
    assert "sk-project" not in repr(found)
    shell = Qwen().outranks(settings, _env(temp_home, project, CONDUIT_API_KEY="sk-shell"))
    assert shell[0].source == "shell environment" and "sk-shell" not in repr(shell)


def test_inspect_masks_key(temp_home: Path) -> None:
    toolsamples.qwen(temp_home)
    write_profile(temp_home, tools=("qwen",))
    run_sync(temp_home)
    facts = Qwen().inspect(_env(temp_home))
    assert facts.details["owned"]["envKey"] == "CONDUIT_API_KEY" and "sk-test-abc" not in repr(facts)
