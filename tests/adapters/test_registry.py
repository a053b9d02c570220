"""The registry and the adapters' declarations: everything outside an adapter comes from them.

- Every adapter declares what the Protocol asks (and reads no environment variable it does not declare).
- A throwaway adapter, registered through the documented hook, shows up in ``sync``, ``doctor`` and ``init``
  without any other file changing.
- Tests never touch real tool directories: with every declared variable pointing at a sentinel directory, a
  child test run that syncs and doctors every tool leaves each sentinel byte for byte as it was, because the
  autouse fixture clears them; the same run with a fixture that only moves HOME does write into them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from helpers import toolsamples
from helpers.isolation import CONDUIT_VARS, XDG_VARS, isolated_vars
from helpers.paths import HELPERS, TESTS
from helpers.toolfiles import cc_switch_db, run_sync, write_profile

from conduit.adapters import registry
from conduit.adapters.base import (
    AdapterDefaults,
    Env,
    Proposal,
    Protocol_,
    Root,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.formats.jsonfile import json_target, read_json_quietly
from conduit.adapters.registry import ADAPTERS, declared_env_vars
from conduit.daemon.cli.main import main as cli_main

# ------------------------------------------------------------------------------------------ declarations


def test_registry_is_sorted_and_named_by_its_keys() -> None:
    assert list(ADAPTERS) == sorted(ADAPTERS)
    for name, adapter in ADAPTERS.items():
        assert adapter.name == name
        assert isinstance(adapter.env_vars, tuple) and all(v.isupper() for v in adapter.env_vars)


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_every_adapter_makes_every_required_declaration(name: str) -> None:
    missing = registry.missing_declarations(ADAPTERS[name])
    assert not missing, f"{name} lacks {', '.join(missing)}: declare them on {type(ADAPTERS[name]).__name__}"


def test_a_missing_declaration_is_named_and_has_no_default() -> None:
    assert not set(registry.REQUIRED) & set(vars(AdapterDefaults))
    cc = ADAPTERS["cc_switch"]  # a desktop application: no command line, said explicitly
    assert cc.one_shot is None and cc.package is None and "one_shot" in vars(type(cc))

    class Partial(AdapterDefaults):
        one_shot = None

    assert registry.missing_declarations(Partial())[:2] == ["package", "competing"]


def _settings(name: str) -> ToolSettings:
    adapter = ADAPTERS[name]
    fields = adapter.Options.model_fields
    options: dict[str, Any] = {"create": True} if "create" in fields else {}
    if "generation" in fields:
        options["generation"] = "C"
    return ToolSettings(tool=name, channel="gw", root=Root("https://gw.example.com/api"), key="sk-test-abc",
                        model="m", options=adapter.Options.model_validate(options))


class _Recording(dict[str, str]):
    """An environment that remembers every name looked up in it."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_adapter_reads_only_the_variables_it_declares(temp_home: Path, name: str) -> None:
    adapter = ADAPTERS[name]
    if name in toolsamples.SAMPLES:
        toolsamples.SAMPLES[name](temp_home)
    cc_switch_db(temp_home)
    env = Env(cwd=temp_home)
    env.environ = recording = _Recording(dict(os.environ))
    adapter.plan(_settings(name), env)
    facts = adapter.inspect(env)
    adapter.discover(env)
    adapter.client_view(env)
    assert isinstance(facts, ToolFacts)
    json.dumps(facts.as_dict(), default=str)  # what doctor --json prints
    undeclared = recording.read - set(adapter.env_vars) - {"HOME"}
    assert not undeclared, f"{name} reads {sorted(undeclared)}: add them to {type(adapter).__name__}.env_vars"


def test_fixture_cleared_every_declared_variable() -> None:
    assert {"CLAUDE_CONFIG_DIR", "CLINE_DATA_DIR", "CODEX_HOME", "CONTINUE_GLOBAL_DIR", "GEMINI_CLI_HOME",
            "OPENCODE_CONFIG", "AIDER_MODEL"} <= set(declared_env_vars())
    assert set(isolated_vars()) >= {*declared_env_vars(), *XDG_VARS, *CONDUIT_VARS}
    assert [v for v in isolated_vars() if v in os.environ] == []


# ------------------------------------------------------------------------------------- a throwaway tool


class Notes(AdapterDefaults):
    """A made-up tool keeping an OpenAI gateway in ``$NOTES_HOME/notes.json`` (default ``~/.notes``)."""

    name: ClassVar[str] = "notes"
    display_name: ClassVar[str] = "Notes"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = ("notes.json: baseUrl, apiKey, model",)
    env_vars: ClassVar[tuple[str, ...]] = ("NOTES_HOME",)

    @staticmethod
    def path(env: Env) -> Path:
        return Path(env.get("NOTES_HOME") or env.home / ".notes") / "notes.json"

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        owned = {"baseUrl": settings.root.openai_base(), "apiKey": settings.key_or_placeholder,
                 "model": settings.model}
        return [json_target(self.path(env), lambda doc: {**doc, **owned}, secret_keys=("apiKey",))]

    def inspect(self, env: Env) -> ToolFacts:
        doc, error = read_json_quietly(self.path(env))
        return ToolFacts(summary=f"notes file {self.path(env).name}", details={"model": doc.get("model"),
                                                                            "parse_error": error})

    def discover(self, env: Env) -> Proposal | None:
        doc, _ = read_json_quietly(self.path(env))
        if not doc.get("baseUrl"):
            return None
        return Proposal(self.name, doc["baseUrl"], "openai", doc.get("model"), doc.get("apiKey"))


@pytest.fixture
def notes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Notes]:
    adapter = Notes()
    monkeypatch.setitem(registry.ADAPTERS, adapter.name, adapter)  # type: ignore[index]  # the registry hook
    monkeypatch.delenv("NOTES_HOME", raising=False)
    yield adapter


def test_throwaway_adapter_is_synced(temp_home: Path, notes: Notes, capsys: pytest.CaptureFixture[str]) -> None:
    profile = write_profile(temp_home, tools=("notes",))
    (report,) = run_sync(temp_home).tools
    assert report.tool == "notes" and report.status == "changed"
    assert json.loads((temp_home / ".notes" / "notes.json").read_text())["baseUrl"] == "https://gw.example.com/api/v1"
    assert cli_main(["--profile", str(profile), "sync"]) == 0
    assert "Notes" in capsys.readouterr().out


def test_throwaway_adapter_in_doctor(temp_home: Path, notes: Notes, capsys: pytest.CaptureFixture[str]) -> None:
    profile = write_profile(temp_home, tools=("notes",))
    run_sync(temp_home)
    assert cli_main(["--profile", str(profile), "doctor", "--json"]) == 0
    tool = json.loads(capsys.readouterr().out)["tools"]["notes"]
    assert tool["state"] == "in_sync" and tool["summary"] == "notes file notes.json"
    assert tool["facts"] == {"model": "claude-sonnet-4-20250514", "parse_error": None}
    cli_main(["--profile", str(profile), "doctor"])
    assert "Notes" in capsys.readouterr().out


def test_throwaway_adapter_in_init(temp_home: Path, notes: Notes, capsys: pytest.CaptureFixture[str]) -> None:
    path = temp_home / ".notes" / "notes.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"baseUrl": "https://notes-gw.example.com/v1", "apiKey": "sk-notes-0123456789",
                                "model": "notes-model"}))
    assert cli_main(["init"]) == 0
    out = capsys.readouterr().out
    assert "notes -> https://notes-gw.example.com/v1" in out and "sk-notes-0123456789" not in out
    text = (temp_home / ".config" / "conduit" / "profile.toml").read_text()
    assert "[tools.notes]" in text and 'base_url = "https://notes-gw.example.com"' in text
    assert 'model = "notes-model"' in text


# ------------------------------------------------------------------------------- sentinel directories

CHILD_TEST = '''
from pathlib import Path

from conduit.adapters.base import Env
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.cli.main import main
from conduit.daemon.config.profile import load_profile
from conduit.daemon.sync.doctor import doctor
from conduit.daemon.sync.engine import sync


def test_sync_and_doctor_every_tool(temp_home: Path) -> None:
    cfg = temp_home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True)
    (cfg / "keys" / "gw").write_text("sk-test-abc\\n")
    (cfg / "keys" / "gw").chmod(0o600)
    tables = ""
    for name, adapter in ADAPTERS.items():
        fields = adapter.Options.model_fields
        tables += f"[tools.{name}]\\n" + ("create = true\\n" if "create" in fields else "")
        tables += 'generation = "C"\\n' if "generation" in fields else ""
    profile = cfg / "profile.toml"
    profile.write_text('version = 1\\nchannel = "gw"\\nmodel = "m"\\n\\n[channels.gw]\\n'
                       'base_url = "https://gw.example.com/api"\\nprotocols = ["openai", "anthropic", "gemini"]\\n'
                       'key = { file = "~/.config/conduit/keys/gw" }\\n\\n' + tables)
    report = sync(load_profile(profile), env=Env())
    assert [t.tool for t in report.tools if t.status == "changed"], report
    doctor(profile, Env())
    main(["--profile", str(profile), "sync"])
    main(["--profile", str(profile), "doctor", "--json"])
'''

HOME_ONLY_CONFTEST = '''
import pytest


@pytest.fixture(autouse=True)
def temp_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    return home
'''


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _run_child(tmp_path: Path, conftest: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Path]]:
    """Run CHILD_TEST under ``conftest`` with every isolated variable set to its own sentinel directory."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(conftest)
    (suite / "helpers").mkdir()
    (suite / "helpers" / "__init__.py").write_text("")
    shutil.copy(HELPERS / "isolation.py", suite / "helpers" / "isolation.py")
    (suite / "test_child.py").write_text(CHILD_TEST)
    sentinels = {var: tmp_path / "sentinels" / var for var in isolated_vars()}
    for var, d in sentinels.items():
        d.mkdir(parents=True)
        (d / "MARKER").write_text(f"{var} sentinel\n")
    env = dict(os.environ, **{var: str(d) for var, d in sentinels.items()})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                        str(tmp_path / "child-tmp"), str(suite)], cwd=suite, env=env, capture_output=True,
                       text=True, timeout=240)
    return r, sentinels


def test_sentinel_directories_untouched_because_the_fixture_clears_them(tmp_path: Path) -> None:
    r, sentinels = _run_child(tmp_path, (TESTS / "conftest.py").read_text())
    assert r.returncode == 0, r.stdout + r.stderr
    for var, d in sentinels.items():
        assert _snapshot(d) == {"MARKER": f"{var} sentinel\n".encode()}, f"${var} ({d}) was written by a test"


def test_without_the_fixture_the_same_run_writes_into_the_sentinels(tmp_path: Path) -> None:
    r, sentinels = _run_child(tmp_path, textwrap.dedent(HOME_ONLY_CONFTEST))
    assert r.returncode == 0, r.stdout + r.stderr
    touched = {var for var, d in sentinels.items() if set(_snapshot(d)) != {"MARKER"}}
    # The declared variables do redirect the tools (and conduit), so clearing them is what keeps tests out.
    assert {"CLAUDE_CONFIG_DIR", "CODEX_HOME", "CONTINUE_GLOBAL_DIR", "GEMINI_CLI_HOME", "XDG_CONFIG_HOME"} <= touched, \
        touched
