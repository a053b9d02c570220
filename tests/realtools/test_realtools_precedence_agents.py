"""Doctor's "who really wins" against five more binaries: Factory Droid, Pi, OpenClaw, Cline CLI and Continue's
``cn``. Same check as tests/realtools/test_realtools_precedence.py (whose per-scenario check this module runs): a
competing source is set up beside a `conduit sync` of the profile, then `conduit doctor --json` and the tool's
one-shot command run from the same working folder with the same exported variables; doctor's state must be
``in_sync`` exactly when every model request carried the profile's model and key.

Scenarios, per tool the competing sources it really has (rules in each adapter's ``precedence``; facts in
docs/formats/<tool>.md):
- Droid: a project ``.factory/settings.json`` choosing another model, in the working folder and at the git root
  seen from a subfolder; a top-level ``model`` there (it beats the user's ``sessionDefaultSettings.model``);
  an exported ``FACTORY_RUNTIME_SETTINGS_PATH`` overlay.
- Pi: a project ``.pi/settings.json`` in the working folder (applied) and at the git root seen from a subfolder
  (not read); a project ``enabledModels`` leaving conduit's model out; exported OpenAI variables (ignored).
- OpenClaw: exported OpenAI variables and a working folder ``.env`` (neither outranks the config's provider);
  the sole agent's own ``agents.entries.main.model`` (wins), another agent's while ``main`` is the default (not).
- Cline CLI: exported OpenAI variables, ``CLINE_PROVIDER``/``CLINE_MODEL`` exported or in a working folder ``.env``
  (the saved provider wins).
- Continue ``cn``: exported OpenAI variables and a project ``.continue/config.yaml`` (not read); another chat model
  listed before conduit's (cn takes the first), and the same with cn's saved selection naming conduit's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_realtools_precedence import OTHER, Scenario, Setup, _exported, _git, _json, _root_file, _sub, _with
from test_realtools_precedence import test_doctor_agrees_with_the_binary as _doctor_agrees_with_the_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(900)]

OPENAI_VARS = {"OPENAI_API_KEY": "sk-competing-env-key", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
               "OPENAI_API_BASE": "http://127.0.0.1:9/v1", "OPENAI_MODEL": OTHER}
"""Exported OpenAI SDK variables naming a dead gateway, another key and another model."""


def _openai_exported(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    return root, dict(OPENAI_VARS)


# --- Factory Droid -----------------------------------------------------------------------------------------------
def _droid_other_entry(home: Path) -> None:
    """A second custom model of the person's, ``custom:other``, beside conduit's (same gateway and key)."""
    path = home / ".factory" / "settings.json"
    doc = json.loads(path.read_text())
    mine = next(m for m in doc["customModels"] if m.get("id") == "custom:conduit")
    doc["customModels"].append({**{k: mine[k] for k in ("baseUrl", "apiKey", "provider")},
                                "id": "custom:other", "model": OTHER, "displayName": "other"})
    _json(path, doc)


def _droid_project(where: str, doc: dict[str, Any]) -> Setup:
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        _droid_other_entry(home)
        _git(root)
        _json(root / ".factory" / "settings.json", doc)
        return (_sub(root) if where == "sub" else root), {}
    return setup


def _droid_runtime(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    _droid_other_entry(home)
    overlay = home / "runtime-settings.json"
    _json(overlay, {"sessionDefaultSettings": {"model": "custom:other"}})
    return root, {"FACTORY_RUNTIME_SETTINGS_PATH": str(overlay)}


_DROID_CHOOSES = {"sessionDefaultSettings": {"model": "custom:other"}}

# --- Pi ----------------------------------------------------------------------------------------------------------
def _pi_other_provider(home: Path) -> None:
    """A provider ``other`` of the person's serving ``OTHER`` (same gateway and key reference as conduit's)."""
    path = home / ".pi" / "agent" / "models.json"
    doc = json.loads(path.read_text())
    mine = doc["providers"]["conduit"]
    doc["providers"]["other"] = {**{k: mine[k] for k in ("baseUrl", "api", "apiKey")}, "models": [{"id": OTHER}]}
    _json(path, doc)


def _pi_project(where: str, doc: dict[str, Any]) -> Setup:
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        _pi_other_provider(home)
        _git(root)
        _json(root / ".pi" / "settings.json", doc)
        return (_sub(root) if where == "sub" else root), {}
    return setup


_PI_DEFAULT = {"defaultProvider": "other", "defaultModel": OTHER}


# --- OpenClaw ----------------------------------------------------------------------------------------------------
def _openclaw_agents(entries: dict[str, Any]) -> Setup:
    """``agents.entries`` set to ``entries`` (the competing model listed in conduit's provider, so it resolves)."""
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        path = home / ".openclaw" / "openclaw.json"
        doc = json.loads(path.read_text())
        doc["models"]["providers"]["conduit"]["models"].append({"id": OTHER, "name": OTHER})
        doc["agents"]["entries"] = entries
        _json(path, doc)
        return root, {}
    return setup


_DOTENV_OPENAI = "".join(f"{k}={v}\n" for k, v in OPENAI_VARS.items())


def _openclaw_env(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    """The key and model exported, the base URLs in the working folder's ``.env`` (one run covers both: a run of
    OpenClaw takes 15-30 s)."""
    (root / ".env").write_text("".join(f"{k}={v}\n" for k, v in OPENAI_VARS.items() if "BASE" in k))
    return root, {k: v for k, v in OPENAI_VARS.items() if "BASE" not in k}


# --- Continue ----------------------------------------------------------------------------------------------------
def _cn_first_model(selected: str | None) -> Setup:
    """Another chat model listed before conduit's in ``~/.continue/config.yaml`` (same gateway and key); with
    ``selected``, cn's saved selection (``index/globalContext.json`` ``cliSelectedModel``) names that model."""
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        from ruamel.yaml import YAML

        yaml = YAML()
        path = home / ".continue" / "config.yaml"
        doc = yaml.load(path.read_text())
        mine = next(m for m in doc["models"] if m.get("name") == "conduit")
        doc["models"].insert(0, {"name": "other", "provider": "openai", "model": OTHER, "apiBase": mine["apiBase"],
                                 "apiKey": mine["apiKey"], "roles": ["chat"]})
        with path.open("w") as f:
            yaml.dump(doc, f)
        if selected is not None:
            _json(home / ".continue" / "index" / "globalContext.json", {"cliSelectedModel": selected})
        return root, {}
    return setup


def _cn_project_config(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    _git(root)
    (root / ".continue").mkdir()
    (root / ".continue" / "config.yaml").write_text(
        "name: project\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: project-model\n    provider: openai\n"
        f"    model: {OTHER}\n    apiBase: http://127.0.0.1:9/v1\n    apiKey: sk-project\n    roles: [chat]\n")
    return root, {}


SCENARIOS = (
    Scenario("droid", "project-file-cwd", _droid_project("cwd", _DROID_CHOOSES)),
    Scenario("droid", "project-file-root-from-subfolder", _droid_project("sub", _DROID_CHOOSES)),
    Scenario("droid", "project-top-level-model", _droid_project("cwd", {"model": "custom:other"})),
    Scenario("droid", "exported-runtime-settings", _droid_runtime),
    Scenario("pi", "project-file-cwd", _pi_project("cwd", _PI_DEFAULT)),
    Scenario("pi", "project-file-root-from-subfolder", _pi_project("sub", _PI_DEFAULT)),
    Scenario("pi", "project-enabled-models", _pi_project("cwd", {"enabledModels": [f"other/{OTHER}"]})),
    Scenario("pi", "exported-openai-variables", _openai_exported),
    Scenario("openclaw", "exported-and-dotenv-openai-variables", _openclaw_env),
    Scenario("openclaw", "sole-agent-model", _openclaw_agents({"main": {"model": f"conduit/{OTHER}"}})),
    Scenario("openclaw", "other-agent-model", _openclaw_agents({"main": {"default": True},
                                                                 "helper": {"model": f"conduit/{OTHER}"}})),
    Scenario("cline", "exported-openai-variables", _openai_exported),
    Scenario("cline", "exported-cline-provider-model", _with(_exported("CLINE_PROVIDER", "openai-native"),
                                                                   CLINE_MODEL=OTHER)),
    Scenario("cline", "dotenv-cwd", _root_file(".env", "cwd", _DOTENV_OPENAI + f"CLINE_MODEL={OTHER}\n")),
    Scenario("continue", "exported-openai-variables", _openai_exported),
    Scenario("continue", "project-config-cwd", _cn_project_config),
    Scenario("continue", "other-model-listed-first", _cn_first_model(None)),
    Scenario("continue", "other-model-first-conduit-selected", _cn_first_model("conduit")),
)


@pytest.mark.parametrize("case", SCENARIOS, ids=[f"{s.tool}-{s.name}" for s in SCENARIOS])
def test_doctor_agrees_with_the_binary_agents(case: Scenario, temp_home: Path, tmp_path: Path, tool_cache: Path,
                                              tool_path: str, sandbox: Any, tier_rows: list[dict[str, Any]]) -> None:
    _doctor_agrees_with_the_binary(case, temp_home, tmp_path, tool_cache, tool_path, sandbox, tier_rows)
