"""Kilo CLI adapter: OpenCode's provider edits in Kilo's global kilo.jsonc (comments and Kilo's own keys kept), the
file Kilo writes, the {file:} key reference, and the layers that outrank it."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.formats.textformats import parse_jsonc
from conduit.adapters.kilo import Kilo, KiloOptions, config_file

MODEL = "claude-sonnet-4-20250514"


def _env(home: Path, cwd: Path | None = None, **extra: str) -> Env:
    return Env(dict(os.environ, HOME=str(home), **extra), cwd=cwd or home)


def _settings(**kw: object) -> ToolSettings:
    return ToolSettings("kilo", "gw", Root("https://gw.example.com/api"), "sk-test-abc", model=MODEL,
                        options=KiloOptions(), **kw)  # type: ignore[arg-type]


def test_sample_keeps_everything_but_owned_keys(temp_home: Path) -> None:
    path = toolsamples.kilo(temp_home)
    write_profile(temp_home, tools=("kilo",))
    lifecycle(temp_home)
    text = path.read_text()
    before, after = parse_jsonc(toolsamples.KILO_JSONC, path=path), parse_jsonc(text, path=path)
    conduit = after["provider"].pop("conduit")
    assert after.pop("model") == f"conduit/{MODEL}"
    assert after.pop("small_model") == "conduit/claude-3-5-haiku-20241022"
    before.pop("model")
    assert after == before  # $schema, permission, the ollama provider
    assert "// Kilo CLI global config" in text and "// local models" in text
    key_file = temp_home / ".config" / "conduit" / "tool-keys" / "gw.key"
    assert conduit["options"] == {"baseURL": "https://gw.example.com/api/v1", "apiKey": f"{{file:{key_file}}}"}
    assert conduit["npm"] == "@ai-sdk/openai-compatible" and MODEL in conduit["models"]
    assert "sk-test-abc" not in text and key_file.read_text() == "sk-test-abc"


def test_writes_the_file_kilo_writes(temp_home: Path) -> None:
    d = temp_home / ".config" / "kilo"
    d.mkdir(parents=True)
    assert config_file(_env(temp_home)) == d / "kilo.jsonc"  # none yet: the one Kilo creates
    (d / "config.json").write_text("{}")
    assert config_file(_env(temp_home)) == d / "config.json"
    (d / "kilo.json").write_text("{}")
    assert config_file(_env(temp_home)) == d / "kilo.json"
    assert config_file(_env(temp_home, XDG_CONFIG_HOME=str(temp_home / "xdg"))) == temp_home / "xdg/kilo/kilo.jsonc"


def test_limits_in_conduits_model(temp_home: Path) -> None:
    path = toolsamples.kilo(temp_home)
    _, target = Kilo().plan(_settings(context_window=200000, max_output_tokens=16000), _env(temp_home))
    doc = parse_jsonc(target.render(path.read_text()), path=path)  # type: ignore[union-attr]
    assert doc["provider"]["conduit"]["models"][MODEL]["limit"] == {"context": 200000, "output": 16000}


def test_env_key_source_and_client_view(temp_home: Path) -> None:
    toolsamples.kilo(temp_home)
    write_profile(temp_home, tools=(), extra='[tools.kilo]\nkey_source = "env"\n')
    lifecycle(temp_home)
    doc = parse_jsonc(config_file(_env(temp_home)).read_text(), path=Path("x"))
    assert doc["provider"]["conduit"]["options"]["apiKey"] == "{env:CONDUIT_API_KEY}"
    view = Kilo().client_view(_env(temp_home, CONDUIT_API_KEY="sk-shell"))
    assert view is not None and view.key == "sk-shell" and view.model == MODEL
    assert "CONDUIT_API_KEY" in Kilo().inspect(_env(temp_home)).effective


def test_outranks(temp_home: Path, tmp_path: Path) -> None:
    toolsamples.kilo(temp_home)
    write_profile(temp_home, tools=("kilo",))
    run_sync(temp_home)
    project = tmp_path / "project"
    project.mkdir()
    settings = _settings()
    assert Kilo().outranks(settings, _env(temp_home, project)) == []
    (project / "kilo.json").write_text('{"model": "anthropic/claude"}')
    (temp_home / ".kilo").mkdir()
    (temp_home / ".kilo" / "kilo.json").write_text('{"model": "openai/gpt-4o"}')
    (temp_home / ".config" / "kilo" / "opencode.json").write_text('{"theme": "x"}')  # sets no model: fine
    found = Kilo().outranks(settings, _env(temp_home, project, KILO_CONFIG_CONTENT='{"model": "x/y"}'))
    assert [b.source for b in found] == ["shell environment", str(project / "kilo.json"),
                                         str(temp_home / ".kilo" / "kilo.json")]
    facts = Kilo().inspect(_env(temp_home, project))
    assert facts.effective["model"].value == "openai/gpt-4o"  # the last layer that sets it
    assert "sk-test-abc" not in repr(facts)


def test_broken_jsonc_refused_unchanged(temp_home: Path) -> None:
    bad = '{\n  // a comment\n  "model": "x",,\n}\n'
    path = toolsamples.write(temp_home / ".config" / "kilo" / "kilo.jsonc", bad)
    write_profile(temp_home, tools=("kilo",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "error" and "kilo.jsonc" in (report.message or "")
    assert path.read_text() == bad
