"""Doctor's "who really wins" against the real binaries: per tool, the competing sources that matter for it, each
set up beside a `conduit sync` of the profile, then `conduit doctor --json` (a real subprocess, same HOME, working
folder and exported variables) and the tool's one-shot command in the verify sandbox against the recording
gateway. The binary is the judge: doctor's state for the tool must be ``in_sync`` exactly when every model
request carried the profile's model and key, and ``overridden``/``untrusted`` when the competing source won.

Scenarios (the rules are ``conduit.adapters.precedence``; facts in docs/formats/<tool>.md):
- an exported competing variable; a project file in the working folder; the same file at the repository root
  while working in a subfolder; Codex's project file in an untrusted folder; Claude Code's top-level ``model``
  (an alias, ``opusplan``, a full id: field case C33) and ``apiKeyHelper``; Aider's ``.env`` lines
  (``AIDER_MODEL``, ``AIDER_SONNET=true``) and an OpenCode project file that sets no gateway value.
At the end a table row per run (tool, scenario, doctor's state, what the binary sent) goes to the tier's summary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from realtools.tier import routes
from test_realtools import KEY, MODEL, PROMPT, sync, tool_env, write_profile

from conduit.daemon.verify.runner import ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(900)]

OTHER = "competing-model"
"""The model a competing source names: a request asking for it shows that the source won."""
OTHER_KEY = "sk-competing-helper-key"
"""The key Claude Code's ``apiKeyHelper`` prints in its scenario."""

Setup = Callable[[Path, Path], tuple[Path, dict[str, str]]]
"""``(home, project root) -> (working folder, extra exported variables)``; it writes the competing source."""


@dataclass(frozen=True)
class Scenario:
    """``may_add_key``: the competing source adds a second credential on some runs only (Claude Code fetches the
    ``apiKeyHelper`` key in the background: with 2.1.197 the first request carried it in one run and not in
    another), so doctor must say ``overridden`` and the binary may or may not show it."""

    tool: str
    name: str
    setup: Setup
    may_add_key: bool = False


def _git(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True, capture_output=True, timeout=30)


def _sub(root: Path) -> Path:
    sub = root / "pkg" / "deep"
    sub.mkdir(parents=True)
    return sub


def _json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _patch_json(path: Path, **top: Any) -> None:
    doc = json.loads(path.read_text())
    doc.update(top)
    _json(path, doc)


def _exported(var: str, value: str) -> Setup:
    return lambda home, root: (root, {var: value})


def _with(setup: Setup, **exported: str) -> Setup:
    def both(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        cwd, extra = setup(home, root)
        return cwd, {**extra, **exported}
    return both


# --- Claude Code -------------------------------------------------------------------------------------------------
def _cc_project(where: str) -> Setup:
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        _git(root)
        _json(root / ".claude" / "settings.json", {"env": {"ANTHROPIC_MODEL": OTHER}})
        return (_sub(root) if where == "sub" else root), {}
    return setup


def _cc_top_model(value: str) -> Setup:
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        _patch_json(home / ".claude" / "settings.json", model=value)
        return root, {}
    return setup


def _cc_top_model_without_env(value: str) -> Setup:
    """``model`` at the top level while ``env.ANTHROPIC_MODEL`` is gone from the user file (the person deleted it:
    doctor's dry-run sync says drifted); the alias slots conduit wrote stay."""
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        path = home / ".claude" / "settings.json"
        doc = json.loads(path.read_text())
        del doc["env"]["ANTHROPIC_MODEL"]
        _json(path, {**doc, "model": value})
        return root, {}
    return setup


def _cc_key_helper(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    _patch_json(home / ".claude" / "settings.json", apiKeyHelper=f"echo {OTHER_KEY}")
    return root, {}


# --- Codex -------------------------------------------------------------------------------------------------------
def _codex_project(where: str, trusted: bool, sub_trust: str | None = None) -> Setup:
    """The project file at the repository root; the root trusted or not, and the subfolder's own entry
    (``sub_trust``: ``trusted``/``untrusted``) when given."""
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        _git(root)
        (root / ".codex").mkdir()
        (root / ".codex" / "config.toml").write_text(f'model = "{OTHER}"\n')
        cwd = _sub(root) if where == "sub" else root
        entries = {**({root: "trusted"} if trusted else {}), **({cwd: sub_trust} if sub_trust else {})}
        with (home / ".codex" / "config.toml").open("a") as f:
            f.writelines(f'\n[projects.{json.dumps(str(p))}]\ntrust_level = "{t}"\n' for p, t in entries.items())
        return cwd, {}
    return setup


# --- a file at the repository root (OpenCode, Kilo CLI, Gemini CLI, Aider) ------------------------------------------
def _root_file(name: str, where: str, text: str) -> Setup:
    """``name`` holding ``text`` at the repository root, worked in from the root (``cwd``) or a subfolder."""
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        _git(root)
        (root / name).write_text(text)
        return (_sub(root) if where == "sub" else root), {}
    return setup


_OC_MODEL = json.dumps({"model": f"conduit/{OTHER}", "provider": {"conduit": {"models": {OTHER: {"name": OTHER}}}}})
_NO_GATEWAY = json.dumps({"autoupdate": False})


def _aider_between(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    """A ``.env`` in a folder between the repository root and the working folder (Aider reads neither)."""
    _git(root)
    sub = _sub(root)
    (sub.parent / ".env").write_text(f"AIDER_MODEL=openai/{OTHER}\n")
    return sub, {}


def _aider_project_yaml(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    _git(root)
    (root / ".aider.conf.yml").write_text(f"model: openai/{OTHER}\n")
    return root, {}


SCENARIOS = (
    Scenario("claude_code", "exported-model", _exported("ANTHROPIC_MODEL", OTHER)),
    Scenario("claude_code", "project-file-cwd", _cc_project("cwd")),
    Scenario("claude_code", "project-file-root-from-subfolder", _cc_project("sub")),
    Scenario("claude_code", "top-model-alias-sonnet", _cc_top_model("sonnet")),
    Scenario("claude_code", "top-model-alias-opusplan", _cc_top_model("opusplan")),
    Scenario("claude_code", "top-model-full-id", _cc_top_model(OTHER)),
    Scenario("claude_code", "top-model-full-id-without-env-model", _cc_top_model_without_env(OTHER)),
    Scenario("claude_code", "top-model-alias-without-env-model", _cc_top_model_without_env("sonnet")),
    Scenario("claude_code", "api-key-helper", _cc_key_helper, may_add_key=True),
    Scenario("claude_code", "exported-other-auth-variable", _exported("ANTHROPIC_API_KEY", OTHER_KEY)),
    Scenario("codex", "exported-model", _exported("OPENAI_MODEL", OTHER)),
    Scenario("codex", "project-file-cwd-trusted", _codex_project("cwd", True)),
    Scenario("codex", "project-file-cwd-untrusted", _codex_project("cwd", False)),
    Scenario("codex", "project-file-root-from-subfolder-trusted", _codex_project("sub", True)),
    Scenario("codex", "project-file-root-from-subfolder-untrusted", _codex_project("sub", False)),
    Scenario("codex", "project-file-root-trusted-subfolder-untrusted", _codex_project("sub", True, "untrusted")),
    Scenario("codex", "project-file-root-subfolder-trusted-only", _codex_project("sub", False, "trusted")),
    Scenario("opencode", "exported-model", _exported("OPENAI_MODEL", OTHER)),
    Scenario("opencode", "project-file-cwd", _root_file("opencode.json", "cwd", _OC_MODEL)),
    Scenario("opencode", "project-file-root-from-subfolder", _root_file("opencode.json", "sub", _OC_MODEL)),
    Scenario("opencode", "project-file-without-gateway-keys", _root_file("opencode.json", "cwd", _NO_GATEWAY)),
    Scenario("opencode", "project-file-disabled-by-variable", _with(_root_file("opencode.json", "cwd", _OC_MODEL),
                                                                    OPENCODE_DISABLE_PROJECT_CONFIG="1")),
    Scenario("kilo", "project-file-root-from-subfolder", _root_file("kilo.json", "sub", _OC_MODEL)),
    Scenario("kilo", "project-file-without-gateway-keys", _root_file("kilo.json", "cwd", _NO_GATEWAY)),
    Scenario("gemini", "exported-model", _exported("GEMINI_MODEL", OTHER)),
    Scenario("gemini", "dotenv-model-cwd", _root_file(".env", "cwd", f"GEMINI_MODEL={OTHER}\n")),
    Scenario("gemini", "dotenv-model-root-from-subfolder", _root_file(".env", "sub", f"GEMINI_MODEL={OTHER}\n")),
    Scenario("aider", "exported-model", _exported("AIDER_MODEL", f"openai/{OTHER}")),
    Scenario("aider", "dotenv-model-cwd", _root_file(".env", "cwd", f"AIDER_MODEL=openai/{OTHER}\n")),
    Scenario("aider", "dotenv-model-root-from-subfolder", _root_file(".env", "sub", f"AIDER_MODEL=openai/{OTHER}\n")),
    Scenario("aider", "dotenv-sonnet-switch", _root_file(".env", "cwd", "AIDER_SONNET=true\n")),
    Scenario("aider", "dotenv-between-root-and-cwd", _aider_between),
    Scenario("aider", "project-yaml-cwd", _aider_project_yaml),
)


BLOCKED = ("overridden", "untrusted", "refused")
"""Doctor's states saying another source wins (``conduit.daemon.sync.outrank``)."""


def _credentials(r: Any) -> list[str]:
    """Every distinct credential a request carries (``Bearer `` stripped): a second header with another key is a
    competing credential even when the first one is conduit's."""
    headers = ("authorization", "x-api-key", "x-goog-api-key")
    return sorted({r.headers[h].removeprefix("Bearer ").removeprefix("bearer ") for h in headers if h in r.headers})


def doctor_state(home: Path, cwd: Path, extra: dict[str, str], tool: str) -> dict[str, Any]:
    """``conduit doctor --json``'s entry for ``tool``, run as a person runs it from ``cwd`` with ``extra``
    exported."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "CONDUIT_STABLE_INSTALL": "1", **extra}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "doctor", "--json"], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1) and r.stdout.strip(), \
        f"conduit doctor exit {r.returncode}:\n{r.stdout[-1000:]}\n{r.stderr[-2000:]}"
    entry: dict[str, Any] = json.loads(r.stdout)["tools"][tool]
    return entry


VERIFIED = ("claude_code",)
"""Tools whose scenarios also run through `conduit verify` (field case C33 names it): its report's model must be
the one the binary sent in the direct run. Skipped where conduit's own file was edited (doctor lists
``changed_files``): verify writes conduit's config into its temporary HOME first, so it shows the state after a
sync, which is doctor's fix there."""


def verify_model(home: Path, cwd: Path, extra: dict[str, str], tool: str, path: str) -> str | None:
    """The model of the request `conduit verify TOOL --json` reports, run from ``cwd`` with ``extra`` exported and
    the tier's binaries on ``PATH``."""
    env = {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "CONDUIT_STABLE_INSTALL": "1", **extra}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "verify", tool, "--json"], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=180)
    assert r.stdout.strip(), f"conduit verify exit {r.returncode}:\n{r.stderr[-2000:]}"
    [check] = json.loads(r.stdout)
    model = check.get("model")
    return str(model) if model is not None else None


@pytest.mark.parametrize("case", SCENARIOS, ids=[f"{s.tool}-{s.name}" for s in SCENARIOS])
def test_doctor_agrees_with_the_binary(case: Scenario, temp_home: Path, tmp_path: Path, tool_cache: Path,
                                       tool_path: str, sandbox: Any, tier_rows: list[dict[str, Any]]) -> None:
    spec = ONE_SHOTS[case.tool]
    binary = find_binary(spec, tool_cache.joinpath("bin").as_posix())
    assert binary is not None, f"{spec.binaries} not in {tool_cache / 'bin'}"
    root = tmp_path / "project"
    root.mkdir()
    write_profile(temp_home, case.tool, sandbox.root + "/api", KEY + "\n", root)
    sync(temp_home)
    cwd, extra = case.setup(temp_home, root)
    entry = doctor_state(temp_home, cwd, extra, case.tool)
    env = {**tool_env(temp_home, tool_path, spec), **extra}
    result = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=env, cwd=cwd, timeout_s=spec.timeout_s))
    # Gemini CLI's route holds the model: a request for the competing one is a model request too
    model_reqs = [r for r in result.requests if r.path.split("?")[0] in {*routes(case.tool, MODEL),
                                                                          *routes(case.tool, OTHER)}]
    keys_ok = bool(model_reqs) and all(_credentials(r) == [KEY] for r in model_reqs)
    models = sorted({str(r.model) for r in model_reqs})
    follows = bool(model_reqs) and models == [MODEL] and keys_ok
    tier_rows.append({"tool": case.tool, "version": "", "form": case.name, "key": "ok" if keys_ok else "other",
                      "path_hit": bool(model_reqs), "auth_ok": keys_ok, "model_ok": models == [MODEL],
                      "seconds": round(result.duration_s, 1), "exit": result.exit_code,
                      "leftovers": f"doctor={entry['state']} sent={','.join(models) or '-'}",
                      "isolation": result.isolation})
    why = (f"{case.tool} / {case.name}: doctor says {entry['state']} ({entry.get('why')}; fix {entry.get('fix')}), "
           f"the binary sent models {models}, key ok {keys_ok}, exit {result.exit_code}, requests "
           f"{[r.path for r in result.requests]}\nstderr: {result.stderr_tail[-1200:]}")
    if case.tool in VERIFIED and not entry.get("changed_files"):  # verify renders conduit's files first
        assert verify_model(temp_home, cwd, extra, case.tool, tool_path) == (models[0] if models else None), why
    if case.may_add_key:
        assert models == [MODEL] and entry["state"] in BLOCKED, why
    elif follows:  # in_sync, or drifted / not synced where the scenario edited conduit's own file
        assert entry["state"] not in BLOCKED, why
    else:
        assert model_reqs or result.exit_code not in (0, None), why
        assert entry["state"] in BLOCKED, why
