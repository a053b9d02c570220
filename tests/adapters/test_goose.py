"""Goose adapter: the OpenAI provider as host and path in ``config.yaml``, the key in ``secrets.yaml`` (0600),
the person's keys kept, and what outranks the files (docs/formats/goose.md)."""

from __future__ import annotations

from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env
from conduit.adapters.formats.textformats import parse_yaml
from conduit.adapters.goose import Goose


def test_config_and_secrets_written(temp_home: Path) -> None:
    path = toolsamples.goose(temp_home)
    write_profile(temp_home, tools=("goose",))
    lifecycle(temp_home)
    doc = dict(parse_yaml(path.read_text(), path=path))
    assert {k: doc[k] for k in ("GOOSE_PROVIDER", "GOOSE_MODEL", "OPENAI_HOST", "OPENAI_BASE_PATH")} == {
        "GOOSE_PROVIDER": "openai", "GOOSE_MODEL": "claude-sonnet-4-20250514",
        "OPENAI_HOST": "https://gw.example.com/api", "OPENAI_BASE_PATH": "v1/chat/completions"}
    assert doc["GOOSE_MODE"] == "smart_approve" and doc["extensions"]["developer"]["enabled"] is True
    assert "sk-test-abc" not in path.read_text()
    secrets = path.parent / "secrets.yaml"
    assert dict(parse_yaml(secrets.read_text(), path=secrets)) == {"ANTHROPIC_API_KEY": "sk-ant-person-own",
                                                                    "OPENAI_API_KEY": "sk-test-abc"}
    assert secrets.stat().st_mode & 0o777 == 0o600


def test_version_segment_goes_into_the_base_path(temp_home: Path) -> None:
    path = toolsamples.goose(temp_home)
    write_profile(temp_home, "https://gw.example.com/api/v4", tools=("goose",))
    run_sync(temp_home)
    doc = dict(parse_yaml(path.read_text(), path=path))
    assert (doc["OPENAI_HOST"], doc["OPENAI_BASE_PATH"]) == ("https://gw.example.com/api", "v4/chat/completions")


def test_goose_path_root_moves_the_directory(temp_home: Path, monkeypatch) -> None:
    root = temp_home / "goose-root"
    (root / "config").mkdir(parents=True)
    monkeypatch.setenv("GOOSE_PATH_ROOT", str(root))
    write_profile(temp_home, tools=("goose",))
    run_sync(temp_home)
    assert (root / "config" / "config.yaml").is_file() and (root / "config" / "secrets.yaml").is_file()


def test_exported_variables_outrank_and_keyring_is_named(temp_home: Path, monkeypatch) -> None:
    toolsamples.goose(temp_home)
    write_profile(temp_home, tools=("goose",))
    run_sync(temp_home)
    facts = Goose().inspect(Env(cwd=temp_home))
    assert any("GOOSE_DISABLE_KEYRING" in w for w in facts.warnings)
    monkeypatch.setenv("GOOSE_DISABLE_KEYRING", "1")
    monkeypatch.setenv("OPENAI_HOST", "https://api.openai.com")
    assert Goose().inspect(Env(cwd=temp_home)).warnings == ()
    from conduit.adapters.base import Root, ToolSettings

    settings = ToolSettings(tool="goose", channel="gw", root=Root("https://gw.example.com/api"), key="k", model="m")
    (blocker,) = Goose().outranks(settings, Env(cwd=temp_home))
    assert blocker.state == "overridden" and "OPENAI_HOST" in blocker.why
    view = Goose().client_view(Env(cwd=temp_home))
    assert view is not None and view.base_url == "https://api.openai.com/v1"  # the environment wins


def test_missing_goose_is_not_found(temp_home: Path) -> None:
    write_profile(temp_home, tools=("goose",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "not_found" and "[tools.goose]" in (report.message or "")
