"""The precedence rules of Factory Droid, Pi, OpenClaw, Cline CLI and Continue's ``cn`` (each adapter's
``precedence``), without a binary: which project files each applies from a working folder and which source decides
the model or key, on real files under a temporary HOME. The same rules are checked against the binaries by
tests/realtools/test_realtools_precedence_agents.py; these keep them checked in every run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.cline import Cline, ClineOptions
from conduit.adapters.continue_dev import Continue
from conduit.adapters.droid import Droid, DroidOptions
from conduit.adapters.openclaw import OpenClaw, running_agents
from conduit.adapters.pi import Pi, PiOptions
from conduit.adapters.precedence import Order, ProjectScope
from conduit.adapters.registry import ADAPTERS

MODEL = "m-main"
OTHER = "other-model"
TOOLS = ("droid", "pi", "openclaw", "cline", "continue")


def settings(tool: str, **kw: Any) -> ToolSettings:
    base: dict[str, Any] = {"tool": tool, "channel": "gw", "root": Root("https://gw.example.com/api"),
                            "key": "sk-test-abc", "model": MODEL}
    return ToolSettings(**{**base, **kw})


def env(cwd: Path, **environ: str) -> Env:
    return Env({"HOME": os.environ["HOME"], **environ}, cwd=cwd)


def repo(tmp_path: Path) -> tuple[Path, Path]:
    """A git repository (a ``.git`` folder) and a subfolder two levels down."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    sub = root / "pkg" / "deep"
    sub.mkdir(parents=True)
    return root, sub


def put(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("tool", TOOLS)
def test_each_rule_cites_where_the_tool_implements_it(tool: str) -> None:
    rules = ADAPTERS[tool].precedence  # type: ignore[attr-defined]
    assert rules and all(isinstance(r, ProjectScope | Order) for r in rules)
    for rule in rules:
        assert "/" in rule.cite.repo or rule.cite.repo.startswith("npm "), rule.cite
        assert rule.cite.path and rule.cite.symbol and rule.cite.checked, rule.cite


# --- Droid: .factory settings from the git root down to the working folder; the highest file choosing decides ----
def _droid_user(home: Path) -> None:
    put(home / ".factory" / "settings.json", {"sessionDefaultSettings": {"model": "custom:conduit"}})


@pytest.mark.parametrize(("where", "doc", "wins"), [
    ("root", {"sessionDefaultSettings": {"model": "custom:other"}}, True),
    ("sub", {"sessionDefaultSettings": {"model": "custom:other"}}, True),   # the git root's file applies below it
    ("root", {"model": "custom:other"}, True),         # a project's top-level model beats the user's default
    ("root", {"sessionDefaultSettings": {"model": "custom:conduit"}, "model": "custom:other"}, False),
])
def test_droid_project_settings(temp_home: Path, tmp_path: Path, where: str, doc: dict[str, Any], wins: bool) -> None:
    _droid_user(temp_home)
    root, sub = repo(tmp_path)
    path = put(root / ".factory" / "settings.json", doc)
    found = Droid().outranks(settings("droid", options=DroidOptions()), env(root if where == "root" else sub))
    assert [b.source for b in found] == ([str(path)] if wins else [])


def test_droid_outside_git_reads_the_working_folder_only(temp_home: Path, tmp_path: Path) -> None:
    _droid_user(temp_home)
    loose = tmp_path / "loose" / "inner"
    loose.mkdir(parents=True)
    put(loose.parent / ".factory" / "settings.json", {"model": "custom:other"})
    assert Droid().outranks(settings("droid", options=DroidOptions()), env(loose)) == []
    overlay = put(tmp_path / "runtime.json", {"sessionDefaultSettings": {"model": "custom:other"}})
    [b] = Droid().outranks(settings("droid", options=DroidOptions()), env(loose, FACTORY_RUNTIME_SETTINGS_PATH=str(
        overlay)))
    assert b.source == str(overlay)


# --- Pi: the working folder's .pi/settings.json only ---------------------------------------------------------------
def test_pi_project_settings_in_the_working_folder_only(temp_home: Path, tmp_path: Path) -> None:
    put(temp_home / ".pi" / "agent" / "settings.json", {"defaultProvider": "conduit", "defaultModel": MODEL})
    root, sub = repo(tmp_path)
    path = put(root / ".pi" / "settings.json", {"defaultProvider": "other", "defaultModel": OTHER})
    assert Pi().outranks(settings("pi", options=PiOptions()), env(sub)) == []
    found = Pi().outranks(settings("pi", options=PiOptions()), env(root))
    assert {b.source for b in found} == {str(path)} and len(found) == 2
    put(path, {"enabledModels": [f"other/{OTHER}"]})
    [b] = Pi().outranks(settings("pi", options=PiOptions()), env(root))
    assert "enabledModels" in b.why
    assert Pi().outranks(settings("pi", options=PiOptions()), env(root, OPENAI_API_KEY="sk-x", OPENAI_MODEL=OTHER,
                                                                   OPENAI_BASE_URL="http://x/v1")) == [b]


# --- OpenClaw: only the running agent's own model; no variable or .env outranks the provider ---------------------
def test_openclaw_running_agents() -> None:
    assert running_agents({"main": {}}) == {"main": {}}
    assert list(running_agents({"main": {"default": True}, "helper": {"model": "x/y"}})) == ["main"]
    assert list(running_agents({"a": {}, "b": {}})) == ["a", "b"]  # several, none marked: a run names one


@pytest.mark.parametrize(("entries", "wins"), [
    ({"main": {"model": f"conduit/{OTHER}"}}, True),
    ({"main": {"default": True}, "helper": {"model": f"conduit/{OTHER}"}}, False),
    ({"main": {}, "helper": {"model": {"primary": f"conduit/{OTHER}"}}}, True),
])
def test_openclaw_agent_model(temp_home: Path, entries: dict[str, Any], wins: bool) -> None:
    put(temp_home / ".openclaw" / "openclaw.json", {"agents": {"defaults": {"model": f"conduit/{MODEL}"},
                                                               "entries": entries}})
    (temp_home / ".env").write_text("OPENAI_BASE_URL=http://elsewhere/v1\n")
    found = OpenClaw().outranks(settings("openclaw"), env(temp_home, OPENAI_API_KEY="sk-x"))
    assert bool(found) == wins and all("agents.entries" in b.source for b in found)


# --- Cline CLI: providers.json outranks CLINE_PROVIDER and OPENAI_API_KEY --------------------------------------------
def _cline(home: Path, **mine: Any) -> None:
    doc: dict[str, Any] = {"version": 1, "providers": {"openai-compatible": {"settings": {
        "provider": "openai-compatible", "model": MODEL, "baseUrl": "https://gw.example.com/api/v1", **mine},
        "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}}}
    put(home / ".cline" / "data" / "settings" / "providers.json", doc)


def test_cline_variables_yield_to_providers_json(temp_home: Path) -> None:
    exported = {"CLINE_PROVIDER": "openai-native", "CLINE_MODEL": OTHER, "OPENAI_API_KEY": "sk-x"}
    _cline(temp_home, apiKey="sk-test-abc")
    put(temp_home / ".cline" / "data" / "settings" / "providers.json",
        {**json.loads((temp_home / ".cline/data/settings/providers.json").read_text()),
         "lastUsedProvider": "openai-compatible"})
    a, s = Cline(), settings("cline", options=ClineOptions())
    assert a.outranks(s, env(temp_home, **exported)) == []
    _cline(temp_home)  # no lastUsedProvider, no apiKey: both variables decide
    found = a.outranks(s, env(temp_home, **exported))
    assert sorted(b.why.split()[0] for b in found) == ["CLINE_PROVIDER", "OPENAI_API_KEY"]
    assert a.outranks(s, env(temp_home)) == []


# --- Continue cn: the saved selection, else the first chat model of config.yaml ------------------------------------
def _continue(home: Path, *names: str, saved: str | None = None) -> None:
    entries = "".join(f"  - name: {n}\n    provider: openai\n    model: {MODEL if n == 'conduit' else OTHER}\n"
                      "    roles: [chat]\n" for n in names)
    d = home / ".continue"
    d.mkdir(exist_ok=True)
    (d / "config.yaml").write_text(f"name: c\nversion: 1.0.0\nschema: v1\nmodels:\n{entries}")
    if saved is not None:
        put(d / "index" / "globalContext.json", {"cliSelectedModel": saved})


@pytest.mark.parametrize(("names", "saved", "source"), [
    (("conduit", "other"), None, None),
    (("other", "conduit"), None, "config.yaml"),
    (("other", "conduit"), "conduit", None),
    (("conduit", "other"), "other", "globalContext.json"),
    (("other", "conduit"), "gone", "config.yaml"),      # a saved name matching no chat model is ignored
])
def test_continue_first_or_selected_chat_model(temp_home: Path, tmp_path: Path, names: tuple[str, ...],
                                               saved: str | None, source: str | None) -> None:
    _continue(temp_home, *names, saved=saved)
    root, _ = repo(tmp_path)
    (root / ".continue").mkdir()
    (root / ".continue" / "config.yaml").write_text("models: []\n")  # cn reads no project config
    found = Continue().outranks(settings("continue"), env(root, OPENAI_MODEL=OTHER))
    assert [Path(b.source).name for b in found] == ([source] if source else [])
    assert all("/model" in b.fix for b in found)
