"""Doctor's precedence rules (``conduit.adapters.precedence`` and each adapter's ``precedence``), without a tool
binary: which project files a tool applies from a working folder (Codex's trust, the folders each tool searches,
OpenCode's switch), which model source wins (Claude Code's ``ANTHROPIC_MODEL`` over its top-level ``model``:
field case C33; Aider's shortcut switches), each on real files under a temporary HOME. The same rules are checked
against the binaries by tests/realtools/test_realtools_precedence.py; these keep them checked in every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conduit.adapters.aider import Aider
from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.claude_code import ClaudeCode
from conduit.adapters.codex import Codex, CodexOptions
from conduit.adapters.kilo import Kilo, KiloOptions
from conduit.adapters.opencode import OpenCode, OpenCodeOptions
from conduit.adapters.precedence import Order, ProjectScope
from conduit.adapters.registry import ADAPTERS

MODEL = "m-main"
OTHER = "other-model"


def settings(tool: str, **kw: Any) -> ToolSettings:
    base: dict[str, Any] = {"tool": tool, "channel": "gw", "root": Root("https://gw.example.com/api"),
                            "key": "sk-test-abc", "model": MODEL}
    return ToolSettings(**{**base, **kw})


def env(cwd: Path, **environ: str) -> Env:
    return Env({"HOME": os.environ["HOME"], **environ}, cwd=cwd)


def repo(tmp_path: Path) -> tuple[Path, Path]:
    """A git repository (a ``.git`` folder is what the tools look for) and a subfolder two levels down."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    sub = root / "pkg" / "deep"
    sub.mkdir(parents=True)
    return root, sub


# --- the rules as data ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tool", sorted(ADAPTERS))
def test_each_rule_cites_where_the_tool_implements_it(tool: str) -> None:
    """``precedence`` is part of every adapter (the protocol's default is ``()``); the tools whose project scopes
    and source orders the real-tool tier checked declare them, each rule with its source and checked version."""
    rules = ADAPTERS[tool].precedence
    if tool in ("claude_code", "codex", "opencode", "kilo", "aider"):
        assert rules, f"{tool} declares no precedence rules"
    assert all(isinstance(r, ProjectScope | Order) for r in rules)
    for rule in rules:
        assert "/" in rule.cite.repo or rule.cite.repo.startswith("npm "), rule.cite
        assert rule.cite.path and rule.cite.symbol and rule.cite.checked, rule.cite


def test_folders_searched(tmp_path: Path) -> None:
    root, sub = repo(tmp_path)
    cite = ADAPTERS["codex"].precedence[0].cite
    assert ProjectScope(("f",), "cwd", cite).folders(sub) == [sub]
    assert ProjectScope(("f",), "root_and_cwd", cite).folders(sub) == [root, sub]
    assert ProjectScope(("f",), "root_to_cwd", cite).folders(sub) == [root, root / "pkg", sub]
    loose = tmp_path / "loose" / "a"
    loose.mkdir(parents=True)
    assert ProjectScope(("f",), "root_to_cwd", cite).folders(loose) == [loose]
    assert ProjectScope(("f",), "root_to_cwd", cite, outside_git="filesystem_root").folders(loose)[0] == Path("/")
    assert Order("model", ("a", "b"), cite).winner({"a": "", "b": "x"}) == "b"


# --- Codex: trusted projects only, from the project root down to the working folder ----------------------------
def _codex(temp_home: Path, root: Path, trust: dict[Path, str]) -> None:
    (temp_home / ".codex").mkdir(exist_ok=True)
    projects = "".join(f'\n[projects.{json.dumps(str(p))}]\ntrust_level = "{t}"\n' for p, t in trust.items())
    (temp_home / ".codex" / "config.toml").write_text(f'model = "{MODEL}"\nmodel_provider = "conduit"\n{projects}')
    (root / ".codex").mkdir(exist_ok=True)
    (root / ".codex" / "config.toml").write_text(f'model = "{OTHER}"\n')


@pytest.mark.parametrize(("trust", "where", "wins"), [
    ({}, "root", False),                                    # untrusted: Codex ignores the project file
    ({"root": "trusted"}, "root", True),
    ({"root": "trusted"}, "sub", True),                     # the root's file applies in a subfolder
    ({"root": "trusted", "sub": "untrusted"}, "sub", True),  # in a repository only the root's entry counts
    ({"sub": "trusted"}, "sub", False),
])
def test_codex_project_file_needs_trust(temp_home: Path, tmp_path: Path, trust: dict[str, str], where: str,
                                        wins: bool) -> None:
    root, sub = repo(tmp_path)
    _codex(temp_home, root, {(root if k == "root" else sub): v for k, v in trust.items()})
    found = Codex().outranks(settings("codex", options=CodexOptions()), env(root if where == "root" else sub))
    assert [b.source for b in found] == ([str(root / ".codex" / "config.toml")] if wins else [])
    assert all(OTHER in b.why and "trusted" in b.why for b in found)


# --- OpenCode: project files up to the git root, only where they set a gateway value ------------------------------
@pytest.mark.parametrize(("doc", "extra", "wins"), [
    ({"model": f"conduit/{OTHER}"}, {}, True),
    ({"provider": {"conduit": {"options": {"baseURL": "https://elsewhere.example/v1"}}}}, {}, True),
    ({"autoupdate": False, "provider": {"conduit": {"models": {OTHER: {}}}}}, {}, False),
    ({"model": f"conduit/{OTHER}"}, {"OPENCODE_DISABLE_PROJECT_CONFIG": "1"}, False),
])
def test_opencode_project_file_from_a_subfolder(temp_home: Path, tmp_path: Path, doc: dict[str, Any],
                                                extra: dict[str, str], wins: bool) -> None:
    root, sub = repo(tmp_path)
    (root / "opencode.json").write_text(json.dumps(doc))
    found = OpenCode().outranks(settings("opencode", options=OpenCodeOptions()), env(sub, **extra))
    assert [b.source for b in found] == ([str(root / "opencode.json")] if wins else [])


@pytest.mark.parametrize(("doc", "wins"), [({"model": f"conduit/{OTHER}"}, True), ({"autoupdate": False}, False)])
def test_kilo_project_file_from_a_subfolder(temp_home: Path, tmp_path: Path, doc: dict[str, Any], wins: bool) -> None:
    root, sub = repo(tmp_path)
    (root / "kilo.json").write_text(json.dumps(doc))
    found = Kilo().outranks(settings("kilo", options=KiloOptions()), env(sub))
    assert [b.source for b in found] == ([str(root / "kilo.json")] if wins else [])
    assert Kilo().outranks(settings("kilo", options=KiloOptions()), env(sub, KILO_DISABLE_PROJECT_CONFIG="1")) == []


def test_opencode_nearer_project_file_wins(temp_home: Path, tmp_path: Path) -> None:
    root, sub = repo(tmp_path)
    (root / "opencode.json").write_text(json.dumps({"model": f"conduit/{OTHER}"}))
    (sub / "opencode.jsonc").write_text('// mine\n{"model": "conduit/m-main"}\n')
    assert OpenCode().outranks(settings("opencode", options=OpenCodeOptions()), env(sub)) == []


# --- Claude Code: the working folder's project settings; ANTHROPIC_MODEL above the top-level model (C33) ---------
def _claude_user(home: Path, **top: Any) -> Path:
    path = home / ".claude" / "settings.json"
    path.parent.mkdir(exist_ok=True)
    env_obj = {"ANTHROPIC_BASE_URL": "https://gw.example.com/api", "ANTHROPIC_AUTH_TOKEN": "sk-test-abc",
               "ANTHROPIC_MODEL": MODEL, "ANTHROPIC_DEFAULT_SONNET_MODEL": MODEL,
               "ANTHROPIC_DEFAULT_OPUS_MODEL": MODEL, "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL}
    doc = {"env": {k: v for k, v in env_obj.items() if k not in top.get("drop", ())},
           **{k: v for k, v in top.items() if k != "drop"}}
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("value", ["sonnet", "opusplan", OTHER])
def test_c33_top_level_model_is_shadowed_by_conduits_anthropic_model(temp_home: Path, value: str) -> None:
    path = _claude_user(temp_home, model=value)
    a, e = ClaudeCode(), env(temp_home)
    assert a.outranks(settings("claude_code"), e) == []
    [note] = a.inspect(e).warnings
    assert f'"model": "{value}" in {path} is ignored' in note and "conduit use" in note


def test_c33_top_level_model_wins_without_anthropic_model(temp_home: Path) -> None:
    path = _claude_user(temp_home, model=OTHER, drop=("ANTHROPIC_MODEL",))
    [b] = ClaudeCode().outranks(settings("claude_code"), env(temp_home))
    assert (b.state, b.source) == ("overridden", str(path)) and f'"{OTHER}"' in b.why
    assert "conduit sync" in b.fix and f'remove "model" from {path}' in b.fix
    _claude_user(temp_home, model="sonnet", drop=("ANTHROPIC_MODEL",))  # the alias's slot holds conduit's model
    assert ClaudeCode().outranks(settings("claude_code"), env(temp_home)) == []


def test_claude_project_settings_only_in_the_working_folder(temp_home: Path, tmp_path: Path) -> None:
    _claude_user(temp_home)
    root, sub = repo(tmp_path)
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text(json.dumps({"env": {"ANTHROPIC_MODEL": OTHER}}))
    assert ClaudeCode().outranks(settings("claude_code"), env(sub)) == []
    [b] = ClaudeCode().outranks(settings("claude_code"), env(root))
    assert b.source == str(root / ".claude" / "settings.json")


def test_c33_doctor_end_to_end(temp_home: Path) -> None:
    """C33 as a person meets it: `conduit sync`, then `"model": "sonnet"` at the top level (Claude Code's /model
    writes it), then `conduit doctor --json`: in sync, with a line saying the setting is ignored."""
    cfg = temp_home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True)
    (cfg / "keys" / "gw").write_text("sk-test-abc\n")
    (cfg / "keys" / "gw").chmod(0o600)
    (cfg / "profile.toml").write_text(f'version = 1\nchannel = "gw"\nmodel = "{MODEL}"\n\n[channels.gw]\nbase_url = '
                                      '"https://gw.example.com/api"\nprotocols = ["anthropic"]\nkey = { file = '
                                      '"~/.config/conduit/keys/gw" }\n\n[tools.claude_code]\n')
    run = [sys.executable, "-m", "conduit.daemon.cli"]
    environ = {"HOME": str(temp_home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    assert subprocess.run([*run, "sync"], env=environ, cwd=temp_home, capture_output=True, timeout=60).returncode == 0
    path = temp_home / ".claude" / "settings.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "model": "sonnet"}))
    r = subprocess.run([*run, "doctor", "--json"], env=environ, cwd=temp_home, capture_output=True, text=True,
                       timeout=60)
    report = json.loads(r.stdout)
    assert report["tools"]["claude_code"]["state"] == "in_sync"
    assert any('"model": "sonnet"' in w and "is ignored" in w for w in report["warnings"])


# --- Aider: .env at home, git root and working folder; shortcut switches only without a model -------------------
def _aider_home(home: Path, model: str | None = f"openai/{MODEL}") -> None:
    lines = ["openai-api-base: https://gw.example.com/api/v1", "openai-api-key: sk-test-abc"]
    (home / ".aider.conf.yml").write_text("\n".join(lines + ([f"model: {model}"] if model else [])) + "\n")


def test_aider_dotenv_between_root_and_cwd_is_not_read(temp_home: Path, tmp_path: Path) -> None:
    _aider_home(temp_home)
    root, sub = repo(tmp_path)
    (sub.parent / ".env").write_text(f"AIDER_MODEL=openai/{OTHER}\n")
    assert Aider().outranks(settings("aider"), env(sub)) == []
    (root / ".env").write_text(f"AIDER_MODEL=openai/{OTHER}\n")
    [b] = Aider().outranks(settings("aider"), env(sub))
    assert b.source == str(root / ".env")


def test_aider_shortcut_switch_only_without_a_model(temp_home: Path, tmp_path: Path) -> None:
    root, _ = repo(tmp_path)
    (root / ".env").write_text("AIDER_SONNET=true\n")
    _aider_home(temp_home)
    assert Aider().outranks(settings("aider"), env(root)) == []
    _aider_home(temp_home, model=None)
    found = [b for b in Aider().outranks(settings("aider"), env(root)) if "AIDER_SONNET" in b.why]
    assert [b.source for b in found] == [str(root / ".env")] and "conduit sync" in found[0].fix
