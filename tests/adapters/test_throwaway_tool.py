"""Everything a tool is, in its adapter: a throwaway tool declared in ONE module (written into tmp_path) and
registered through the registry's test hook shows up in sync, doctor (with its competing sources), init
discovery, ``conduit verify`` against a stand-in binary, and the real-tool tier's parametrization, with no other
file changed. Without one of its declarations, the registry test and the tier's case fail naming it.

Everything runs in this process (a subprocess would not see the monkeypatched registry); the stand-in tool is a
real process that ``conduit verify`` runs in its sandbox.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_registry as registry_tests
from helpers.toolfiles import run_sync, write_profile
from realtools import tier

from conduit.adapters import registry
from conduit.daemon.cli.main import main as cli_main
from conduit.daemon.verify.tools import ONE_SHOTS

KEY = "sk-throwaway-0123456789abcd"

TOOL_MODULE = '''
"""Throwaway: a Qwen-like CLI keeping an OpenAI gateway in ``$THROWAWAY_HOME/settings.json`` (default
``~/.throwaway``): ``baseUrl`` (with the version segment), ``apiKey``, ``model``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from conduit.adapters.base import AdapterDefaults, Env, NotFound, Proposal, Protocol_, Target, ToolFacts, ToolSettings
from conduit.adapters.declarations import OPENAI_FORMS, OPENAI_ROUTES, Blocker, Competing, OneShot, Package
from conduit.adapters.formats.jsonfile import json_target, read_json_quietly


class ThrowawayOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    create: bool = False


class Throwaway(AdapterDefaults):
    name: ClassVar[str] = "throwaway"
    display_name: ClassVar[str] = "Throwaway"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = ("~/.throwaway/settings.json: baseUrl, apiKey, model",)
    Options: ClassVar[type[BaseModel]] = ThrowawayOptions
    env_vars: ClassVar[tuple[str, ...]] = ("THROWAWAY_HOME", "THROWAWAY_MODEL", "THROWAWAY_API_KEY",
                                           "THROWAWAY_BASE_URL")
    one_shot: ClassVar[OneShot | None] = OneShot(("throwaway",), ("-p",), opt_outs={"THROWAWAY_NO_UPDATE": "1"})
    package: ClassVar[Package | None] = Package("npm", "throwaway-cli", "0.0.1", ("throwaway",))
    competing: ClassVar[Competing] = Competing(("THROWAWAY_MODEL",), ("THROWAWAY_API_KEY",), ("THROWAWAY_BASE_URL",),
                                               (".throwaway/settings.json",))
    tool_dirs: ClassVar[Mapping[str, str]] = {"THROWAWAY_HOME": ".throwaway"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}

    @staticmethod
    def path(env: Env) -> Path:
        return Path(env.get("THROWAWAY_HOME") or env.home / ".throwaway") / "settings.json"

    def verify_files(self, env: Env) -> list[Path]:
        return [self.path(env).parent / "oauth_creds.json"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        path = self.path(env)
        if not path.parent.is_dir() and not ThrowawayOptions.model_validate(dict(settings.options)).create:
            raise NotFound(f"Throwaway not found: no {path.parent}")
        owned = {"baseUrl": settings.root.openai_base(), "apiKey": settings.key_or_placeholder,
                 "model": settings.model}
        return [json_target(path, lambda doc: {**doc, **owned}, secret_keys=("apiKey",), label="settings.json")]

    def inspect(self, env: Env) -> ToolFacts:
        doc, error = read_json_quietly(self.path(env))
        return ToolFacts(summary=f"throwaway file {self.path(env)}", details={"model": doc.get("model"),
                                                                             "parse_error": error})

    def discover(self, env: Env) -> Proposal | None:
        doc, _ = read_json_quietly(self.path(env))
        if not doc.get("baseUrl"):
            return None
        return Proposal(self.name, doc["baseUrl"], "openai", doc.get("model"), doc.get("apiKey"))

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        return self.competing.blockers(env.environ, env.cwd)
'''

# The stand-in CLI: reads the settings file conduit wrote (in the HOME it runs with), POSTs one chat completion.
STAND_IN = '''
import json, os, sys, urllib.request
if "--version" in sys.argv:
    print("throwaway 0.0.1"); sys.exit(0)
d = os.environ.get("THROWAWAY_HOME") or os.path.join(os.environ["HOME"], ".throwaway")
cfg = json.load(open(os.path.join(d, "settings.json")))
body = json.dumps({"model": cfg["model"], "messages": [{"role": "user", "content": sys.argv[-1]}]}).encode()
req = urllib.request.Request(cfg["baseUrl"] + "/chat/completions", data=body,
                             headers={"authorization": "Bearer " + cfg["apiKey"], "content-type": "application/json"})
urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10).read()
print("ok")
'''

SAMPLE = {"theme": "dark", "mcpServers": {"docs": {"command": "npx"}}}
"""The tool's sample file: the user's own settings, which a sync keeps."""


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, without: str | None = None) -> Any:
    """Write the module into tmp_path (``without``: that declaration's line left out), import it, register it."""
    text = textwrap.dedent(TOOL_MODULE)
    if without is not None:  # that statement's lines: the one naming it and its deeper-indented continuation
        kept, skipping = [], False
        for line in text.splitlines():
            skipping = line.startswith(f"    {without}:") or (skipping and line.startswith("     "))
            kept += [] if skipping else [line]
        text = "\n".join(kept)
    modname = f"throwaway_tool_{without or 'full'}"
    (tmp_path / f"{modname}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    adapter = importlib.import_module(modname).Throwaway()
    monkeypatch.setitem(registry.ADAPTERS, "throwaway", adapter)  # type: ignore[index]  # the registry hook
    monkeypatch.delitem(sys.modules, modname)
    return adapter


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var in ("THROWAWAY_HOME", "THROWAWAY_MODEL", "THROWAWAY_API_KEY", "THROWAWAY_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    yield _load(tmp_path, monkeypatch)


def _sample(home: Path) -> Path:
    path = home / ".throwaway" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(SAMPLE, indent=2) + "\n")
    return path


def test_declares_everything(throwaway: Any) -> None:
    assert registry.missing_declarations(throwaway) == []
    registry_tests.test_every_adapter_makes_every_required_declaration("throwaway")
    assert ONE_SHOTS["throwaway"].argv("/bin/throwaway", "hi") == ["/bin/throwaway", "-p", "hi"]


def test_synced(temp_home: Path, throwaway: Any) -> None:
    path = _sample(temp_home)
    write_profile(temp_home, tools=("throwaway",), key_text=KEY + "\n")
    (report,) = run_sync(temp_home).tools
    assert report.tool == "throwaway" and report.status == "changed", report
    doc = json.loads(path.read_text())
    assert doc == {**SAMPLE, "baseUrl": "https://gw.example.com/api/v1", "apiKey": KEY,
                   "model": "claude-sonnet-4-20250514"}


def test_doctor_table_json_and_competing_sources(temp_home: Path, throwaway: Any,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _sample(temp_home)
    profile = write_profile(temp_home, tools=("throwaway",), key_text=KEY + "\n")
    run_sync(temp_home)
    project = temp_home / "src" / "proj"  # from HOME, the user file would also be the project file
    project.mkdir(parents=True)
    monkeypatch.chdir(project)
    assert cli_main(["--profile", str(profile), "doctor", "--json"]) == 0
    tool = json.loads(capsys.readouterr().out)["tools"]["throwaway"]
    assert tool["state"] == "in_sync" and tool["blockers"] == [], tool
    monkeypatch.setenv("THROWAWAY_MODEL", "exported-model")
    cli_main(["--profile", str(profile), "doctor", "--json"])
    tool = json.loads(capsys.readouterr().out)["tools"]["throwaway"]
    assert tool["state"] == "overridden", tool
    assert [b["source"] for b in tool["blockers"]] == ["shell environment"]
    assert "THROWAWAY_MODEL" in tool["blockers"][0]["why"] and "exported-model" not in json.dumps(tool)
    cli_main(["--profile", str(profile), "doctor"])
    out = capsys.readouterr().out
    assert "Throwaway" in out and "THROWAWAY_MODEL" in out


def test_init_discovers_it(temp_home: Path, throwaway: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = _sample(temp_home)
    path.write_text(json.dumps({**SAMPLE, "baseUrl": "https://tw-gw.example.com/v1", "apiKey": KEY,
                                "model": "tw-model"}))
    assert cli_main(["init"]) == 0
    out = capsys.readouterr().out
    assert "throwaway -> https://tw-gw.example.com/v1" in out and KEY not in out
    text = (temp_home / ".config" / "conduit" / "profile.toml").read_text()
    assert "[tools.throwaway]" in text and 'base_url = "https://tw-gw.example.com"' in text


def test_verify_runs_a_stand_in(temp_home: Path, tmp_path: Path, throwaway: Any,
                                capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No ~/.throwaway yet: verify writes into its temporary HOME with ``fresh_options``; the stand-in reads that
    file and posts to the canary; the user's HOME is left as it was."""
    profile = write_profile(temp_home, tools=("throwaway",), key_text=KEY + "\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "throwaway").write_text(f"#!{sys.executable}\n{textwrap.dedent(STAND_IN)}")
    (bindir / "throwaway").chmod(0o755)
    project = temp_home / "src" / "proj"
    project.mkdir(parents=True)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert cli_main(["--profile", str(profile), "verify", "--json", "--timeout", "30"]) == 0
    (check,) = json.loads(capsys.readouterr().out)
    assert check["tool"] == "throwaway" and check["verdict"] == "ok", check
    assert check["path"] == "/api/v1/chat/completions" and check["version"] == "0.0.1"
    assert check["key_fingerprint"] == "sk-...abcd" and check["model"] == "claude-sonnet-4-20250514"
    assert not (temp_home / ".throwaway").exists()


def test_in_the_real_tool_tier(throwaway: Any) -> None:
    cases = tier.cases()
    assert [c for c in cases if c[0] == "throwaway"] == [
        ("throwaway", "/api", True), ("throwaway", "/api/v1", False), ("throwaway", "/api/v1/chat/completions", False)]
    assert tier.options_toml("throwaway") == "create = true\n"
    assert tier.routes("throwaway", "m") == ("/api/v1/chat/completions",)
    assert "npm throwaway throwaway-cli@0.0.1 throwaway" in tier.package_lines()
    tier.check_declared("throwaway", "/api")  # a complete tool's case goes on


@pytest.mark.parametrize("without", ["package", "one_shot", "competing", "model_routes"])
def test_a_missing_declaration_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, without: str) -> None:
    adapter = _load(tmp_path, monkeypatch, without=without)
    assert registry.missing_declarations(adapter) == [without]
    with pytest.raises(AssertionError, match=f"throwaway lacks {without}"):
        registry_tests.test_every_adapter_makes_every_required_declaration("throwaway")
    tier_cases = [c for c in tier.cases() if c[0] == "throwaway"]
    if without in tier.NEEDS:  # the tier collects one case for it, failing at run time with the name
        (case,) = tier_cases
        with pytest.raises(pytest.fail.Exception, match=without):
            tier.check_declared(*case[:2])
    else:
        assert len(tier_cases) == 3
    assert ("throwaway" in ONE_SHOTS) == (without != "one_shot")  # verify's table does not crash either


def test_on_the_docs_tools_page(throwaway: Any) -> None:
    from helpers.paths import REPO

    gen = REPO / "docs" / "gen_reference.py"
    if not gen.is_file():
        pytest.skip(f"no docs generator at {gen}")
    spec = importlib.util.spec_from_file_location("gen_reference_for_throwaway", gen)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.tools_page()
    assert "## Throwaway (`throwaway`)" in page and "throwaway-cli@0.0.1" in page
