"""Doctor's precedence rules for Qwen Code, Mistral Vibe, Copilot CLI, Kimi CLI and Hermes Agent
(``conduit.adapters.qwen_precedence``, ``vibe_precedence``, ``env_precedence``), without a tool binary, on real
files under a temporary HOME: which project files each applies from a working folder (the nearest found walking up,
folder trust, a workspace model only where a provider entry offers it) and which exported variables really win.
The same rules are checked against the binaries by tests/realtools/test_realtools_precedence_more.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.copilot import Copilot
from conduit.adapters.env_precedence import COPILOT_MODEL_ORDER, HERMES_MODEL_ORDER, exported_over
from conduit.adapters.hermes import Hermes
from conduit.adapters.kimi import Kimi
from conduit.adapters.precedence import ProjectScope
from conduit.adapters.qwen import Qwen, QwenOptions
from conduit.adapters.registry import ADAPTERS
from conduit.adapters.vibe import Vibe

MODEL = "m-main"
OTHER = "other-model"
KEY = "sk-test-abc"
BASE = "https://gw.example.com/api/v1"
MORE = ("qwen", "vibe", "copilot", "kimi", "hermes")


def settings(tool: str, **kw: Any) -> ToolSettings:
    base: dict[str, Any] = {"tool": tool, "channel": "gw", "root": Root("https://gw.example.com/api"), "key": KEY,
                            "model": MODEL}
    return ToolSettings(**{**base, **kw})


def env(cwd: Path, **environ: str) -> Env:
    return Env({"HOME": os.environ["HOME"], **environ}, cwd=cwd)


def repo(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    sub = root / "pkg" / "deep"
    sub.mkdir(parents=True)
    return root, sub


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("tool", MORE)
def test_each_tool_declares_cited_rules(tool: str) -> None:
    rules = ADAPTERS[tool].precedence
    assert rules, f"{tool} declares no precedence rules"
    assert all(r.cite.symbol and r.cite.checked and r.cite.path for r in rules)


def test_cwd_up_stops_at_home_and_keeps_the_nearest(tmp_path: Path) -> None:
    home = tmp_path / "home"
    root, sub = repo(home)
    scope = ProjectScope((".env", ".qwen/.env"), "cwd_up", ADAPTERS["qwen"].precedence[1].cite)
    assert scope.folders(sub, home) == [root, root / "pkg", sub]
    assert scope.folders(home, home) == []
    _write(root / ".env", "A=1\n")
    _write(root / "pkg" / ".qwen" / ".env", "B=1\n")
    _write(home / ".env", "C=1\n")  # home's own file is a user file, never a project one
    assert scope.applied(sub, {}, home=home) == [root / "pkg" / ".qwen" / ".env"]


# --- Qwen Code -----------------------------------------------------------------------------------------------------
def _qwen_user(home: Path, **extra: Any) -> None:
    doc = {"security": {"auth": {"selectedType": "openai"}}, "model": {"name": MODEL, "baseUrl": BASE},
           "modelProviders": {"openai": [{"id": MODEL, "name": MODEL, "baseUrl": BASE, "envKey": "CONDUIT_API_KEY"}]},
           **extra}
    _write(home / ".qwen" / "settings.json", json.dumps(doc))


def _qwen_blockers(cwd: Path, **environ: str) -> list[str]:
    return [b.source for b in Qwen().outranks(settings("qwen", options=QwenOptions()), env(cwd, **environ))]


@pytest.mark.parametrize(("offered", "wins"), [(True, True), (False, False)])
def test_qwen_workspace_model_wins_only_where_an_entry_offers_it(temp_home: Path, tmp_path: Path, offered: bool,
                                                                 wins: bool) -> None:
    _qwen_user(temp_home)
    root, _ = repo(tmp_path)
    entry = {"id": OTHER, "baseUrl": BASE, "envKey": "CONDUIT_API_KEY"}
    ws = _write(root / ".qwen" / "settings.json", json.dumps(
        {"model": {"name": OTHER}, **({"modelProviders": {"openai": [entry]}} if offered else {})}))
    found = _qwen_blockers(root)
    assert (str(ws) in found) is wins  # not offered: Qwen Code falls back to the first entry, conduit's


def test_qwen_workspace_is_read_in_the_working_folder_only(temp_home: Path, tmp_path: Path) -> None:
    _qwen_user(temp_home)
    root, sub = repo(tmp_path)
    _write(root / ".qwen" / "settings.json", json.dumps({"security": {"auth": {"selectedType": "gemini"}}}))
    assert _qwen_blockers(root) and _qwen_blockers(sub) == []


@pytest.mark.parametrize(("rules", "wins"), [(None, False), ({"repo": "TRUST_FOLDER"}, True),
                                             ({"repo": "DO_NOT_TRUST"}, False)])
def test_qwen_folder_trust_hides_workspace_and_dotenv(temp_home: Path, tmp_path: Path,
                                                      rules: dict[str, str] | None, wins: bool) -> None:
    _qwen_user(temp_home, security={"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": True}})
    root, sub = repo(tmp_path)
    if rules is not None:
        _write(temp_home / ".qwen" / "trustedFolders.json", json.dumps({str(root): level for level in rules.values()}))
    ws = _write(sub / ".qwen" / "settings.json", json.dumps({"security": {"auth": {"selectedType": "gemini"}}}))
    dotenv = _write(root / ".env", "CONDUIT_API_KEY=sk-other\n")
    assert _qwen_blockers(sub) == ([str(dotenv), str(ws)] if wins else [])


def test_qwen_dotenv_nearest_file_only_and_shell_first(temp_home: Path, tmp_path: Path) -> None:
    _qwen_user(temp_home)
    root, sub = repo(tmp_path)
    dotenv = _write(root / ".env", "CONDUIT_API_KEY=sk-other\n")
    assert _qwen_blockers(sub) == [str(dotenv)]
    assert _qwen_blockers(sub, CONDUIT_API_KEY=KEY) == []  # an exported variable is never replaced by a file
    _write(root / "pkg" / ".env", "UNRELATED=1\n")  # nearer, without the key: the walk stops there
    assert _qwen_blockers(sub) == []


# --- Mistral Vibe --------------------------------------------------------------------------------------------------
_VIBE = f'active_model = "other"\n[[models]]\nname = "{OTHER}"\nprovider = "conduit"\nalias = "other"\n'


def _vibe_trust(home: Path, *folders: Path) -> None:
    _write(home / ".vibe" / "trusted_folders.toml", f"trusted = {json.dumps([str(f) for f in folders])}\n"
                                                   "untrusted = []\n")


@pytest.mark.parametrize(("trusted", "where", "wins"), [
    ("none", "root", False),   # -p trusts no folder by itself: the project file is ignored
    ("root", "root", True),
    ("root", "sub", True),     # the nearest file up from the subfolder, its folder trusted
    ("sub", "sub", False),     # the file's own folder decides, and the root is not trusted
])
def test_vibe_project_file_needs_its_folder_trusted(temp_home: Path, tmp_path: Path, trusted: str, where: str,
                                                    wins: bool) -> None:
    root, sub = repo(tmp_path)
    path = _write(root / ".vibe" / "config.toml", _VIBE)
    _vibe_trust(temp_home, *({"none": [], "root": [root], "sub": [sub]}[trusted]))
    found = Vibe().outranks(settings("vibe"), env(root if where == "root" else sub))
    assert [b.source for b in found] == ([str(path)] if wins else [])


def test_vibe_project_file_without_gateway_values_and_nearest_only(temp_home: Path, tmp_path: Path) -> None:
    root, sub = repo(tmp_path)
    _write(root / ".vibe" / "config.toml", _VIBE)
    _vibe_trust(temp_home, root)
    _write(sub / ".vibe" / "config.toml", 'theme = "dark"\n')  # nearer: it hides the root's and sets no gateway
    assert Vibe().outranks(settings("vibe"), env(sub)) == []


# --- Copilot CLI, Kimi CLI, Hermes Agent: exported variables -------------------------------------------------------
def test_copilot_model_id_does_not_change_the_model_sent(temp_home: Path) -> None:
    session = Copilot().run_env(settings("copilot"), env(temp_home))
    exported = {k: v for k, v in session.items() if v is not None}
    assert Copilot().outranks(settings("copilot"), env(temp_home, **exported, COPILOT_PROVIDER_MODEL_ID=OTHER)) == []
    found = Copilot().outranks(settings("copilot"), env(temp_home, **exported, COPILOT_PROVIDER_WIRE_MODEL=OTHER))
    assert ["COPILOT_PROVIDER_WIRE_MODEL" in b.why for b in found] == [True]
    assert COPILOT_MODEL_ORDER.winner({"COPILOT_MODEL": MODEL, "COPILOT_PROVIDER_WIRE_MODEL": OTHER}) == \
        "COPILOT_PROVIDER_WIRE_MODEL"


@pytest.mark.parametrize(("environ", "wins"), [
    ({"OPENAI_API_KEY": "sk-other"}, ["OPENAI_API_KEY"]),
    ({"OPENAI_API_KEY": KEY}, []),                                   # the same key: nothing changes
    ({"OPENAI_BASE_URL": "https://elsewhere.example/v1"}, ["OPENAI_BASE_URL"]),
    ({"KIMI_API_KEY": "sk-other", "KIMI_MODEL_NAME": OTHER, "KIMI_BASE_URL": "https://x/v1"}, []),  # type kimi only
])
def test_kimi_openai_variables_replace_conduits_provider(temp_home: Path, environ: dict[str, str],
                                                         wins: list[str]) -> None:
    found = Kimi().outranks(settings("kimi"), env(temp_home, **environ))
    assert [b.fix.removeprefix("unset ") for b in found] == wins
    assert all("sk-other" not in b.why for b in found)


@pytest.mark.parametrize(("environ", "wins"), [
    ({"HERMES_INFERENCE_MODEL": OTHER}, True),
    ({"HERMES_INFERENCE_MODEL": MODEL}, False),
    ({"CONDUIT_API_KEY": "sk-other", "HERMES_INFERENCE_PROVIDER": "openrouter"}, False),  # .env and the config win
])
def test_hermes_only_the_inference_model_wins(temp_home: Path, environ: dict[str, str], wins: bool) -> None:
    found = Hermes().outranks(settings("hermes"), env(temp_home, **environ))
    assert bool(found) is wins


def test_exported_over_names_a_source_of_the_order() -> None:
    with pytest.raises(ValueError):
        exported_over(HERMES_MODEL_ORDER, {}, "not a source", MODEL)
