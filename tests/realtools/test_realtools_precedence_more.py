"""Doctor's "who really wins" against five more binaries (Qwen Code, Copilot CLI, Kimi CLI, Hermes Agent, Mistral
Vibe), as test_realtools_precedence.py does for the first six: per scenario a `conduit sync` of the profile, the
competing source, `conduit doctor --json` from the working folder with the same exported variables, and the
tool's one-shot command in the verify sandbox against the recording gateway. The binary is the judge: doctor says
``in_sync`` exactly when every model request carried the profile's model and key.

Scenarios (the rules: ``conduit.adapters.qwen_precedence``, ``conduit.adapters.more_precedence``; facts in
docs/formats/<tool>.md):
- Qwen Code: ``OPENAI_MODEL`` exported (``model.name`` ranks above it); a workspace ``.qwen/settings.json`` in the
  working folder, the same at the repository root from a subfolder (read in the working folder only), the same in
  a folder that folder trust leaves untrusted; a project ``.env`` above the working folder (the walk up finds it).
- Copilot CLI (configured by environment): ``COPILOT_PROVIDER_WIRE_MODEL``, ``COPILOT_PROVIDER_MODEL_ID``,
  ``COPILOT_PROVIDER_BEARER_TOKEN`` exported; a repository ``.github/copilot/settings.json`` naming a model.
- Kimi CLI: ``OPENAI_API_KEY`` exported (replaces an ``openai_legacy`` provider's key); ``KIMI_*`` exported (only
  for ``type = "kimi"``; Kimi reads no ``.env`` file, so none is tried).
- Hermes Agent: ``HERMES_INFERENCE_MODEL`` exported; ``CONDUIT_API_KEY`` exported (``~/.hermes/.env`` overrides
  it); a working folder ``.env`` (never read); ``HERMES_INFERENCE_PROVIDER`` exported (the config names one).
- Mistral Vibe: ``VIBE_ACTIVE_MODEL`` and ``CONDUIT_API_KEY`` exported; a project ``.vibe/config.toml`` in an
  untrusted folder, in a trusted one, and at a trusted repository root from a subfolder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from realtools.tier import routes
from runenv import session_env
from test_realtools import KEY, MODEL, PROMPT, sync, tool_env, write_profile
from test_realtools_precedence import (
    BLOCKED,
    OTHER,
    OTHER_KEY,
    Scenario,
    Setup,
    _credentials,
    _exported,
    _git,
    _json,
    _root_file,
    _sub,
    doctor_state,
)

from conduit.daemon.verify.runner import ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(900)]


def _exports(**values: str) -> Setup:
    return lambda home, root: (root, dict(values))


# --- Qwen Code ---------------------------------------------------------------------------------------------------
def _qwen_workspace(where: str, offered: bool = True, trust_on: bool = False) -> Setup:
    """A workspace ``.qwen/settings.json`` at the repository root naming the competing model, with (``offered``) a
    provider list offering it on the gateway or without one (conduit's list offers no such id); folder trust
    turned on in the user settings with no rule for the project (``trust_on``)."""
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        user = home / ".qwen" / "settings.json"
        doc = json.loads(user.read_text())
        base = doc["modelProviders"]["openai"][0]["baseUrl"]
        if trust_on:
            doc.setdefault("security", {})["folderTrust"] = {"enabled": True}
            _json(user, doc)
        _git(root)
        entry = {"id": OTHER, "name": OTHER, "baseUrl": base, "envKey": "CONDUIT_API_KEY"}
        _json(root / ".qwen" / "settings.json",
              {"model": {"name": OTHER}, **({"modelProviders": {"openai": [entry]}} if offered else {})})
        return (_sub(root) if where == "sub" else root), {}
    return setup


# --- Copilot CLI -------------------------------------------------------------------------------------------------
def _copilot_repo_settings(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
    _git(root)
    _json(root / ".github" / "copilot" / "settings.json", {"model": OTHER})
    return root, {}


# --- Mistral Vibe ------------------------------------------------------------------------------------------------
_VIBE_PROJECT = (f'active_model = "other"\n\n[[models]]\nname = "{OTHER}"\nprovider = "conduit"\nalias = "other"\n'
                 "max_context_length = 131072\n")


def _vibe_project(where: str, trusted: str) -> Setup:
    """The project file at the repository root, worked in from the root or a subfolder; ``trusted`` names the
    folder listed in ``trusted_folders.toml`` (``root``, ``cwd``, or ``""`` for none)."""
    def setup(home: Path, root: Path) -> tuple[Path, dict[str, str]]:
        _git(root)
        (root / ".vibe").mkdir()
        (root / ".vibe" / "config.toml").write_text(_VIBE_PROJECT)
        cwd = _sub(root) if where == "sub" else root
        if trusted:
            folder = root if trusted == "root" else cwd
            (home / ".vibe" / "trusted_folders.toml").write_text(f"trusted = [{json.dumps(str(folder))}]\n"
                                                               "untrusted = []\n")
        return cwd, {}
    return setup


SCENARIOS = (
    Scenario("qwen", "exported-openai-model", _exported("OPENAI_MODEL", OTHER)),
    Scenario("qwen", "workspace-model-cwd", _qwen_workspace("cwd")),
    Scenario("qwen", "workspace-model-not-offered-cwd", _qwen_workspace("cwd", offered=False)),
    Scenario("qwen", "workspace-model-root-from-subfolder", _qwen_workspace("sub")),
    Scenario("qwen", "workspace-model-untrusted", _qwen_workspace("cwd", trust_on=True)),
    Scenario("qwen", "dotenv-key-root-from-subfolder", _root_file(".env", "sub", f"CONDUIT_API_KEY={OTHER_KEY}\n")),
    Scenario("copilot", "exported-wire-model", _exported("COPILOT_PROVIDER_WIRE_MODEL", OTHER)),
    Scenario("copilot", "exported-model-id", _exported("COPILOT_PROVIDER_MODEL_ID", OTHER)),
    Scenario("copilot", "exported-bearer-token", _exported("COPILOT_PROVIDER_BEARER_TOKEN", OTHER_KEY)),
    Scenario("copilot", "repo-settings-model", _copilot_repo_settings),
    Scenario("kimi", "exported-openai-key", _exported("OPENAI_API_KEY", OTHER_KEY)),
    Scenario("kimi", "exported-kimi-variables", _exports(KIMI_MODEL_NAME=OTHER, KIMI_API_KEY=OTHER_KEY)),
    Scenario("hermes", "exported-inference-model", _exported("HERMES_INFERENCE_MODEL", OTHER)),
    Scenario("hermes", "exported-key-below-dotenv", _exported("CONDUIT_API_KEY", OTHER_KEY)),
    Scenario("hermes", "dotenv-cwd", _root_file(".env", "cwd", f"HERMES_INFERENCE_MODEL={OTHER}\n"
                                                             f"CONDUIT_API_KEY={OTHER_KEY}\n")),
    Scenario("vibe", "exported-active-model", _exported("VIBE_ACTIVE_MODEL", "other")),
    Scenario("vibe", "exported-key", _exported("CONDUIT_API_KEY", OTHER_KEY)),
    Scenario("vibe", "project-file-cwd-untrusted", _vibe_project("cwd", "")),
    Scenario("vibe", "project-file-cwd-trusted", _vibe_project("cwd", "root")),
    Scenario("vibe", "project-file-root-trusted-from-subfolder", _vibe_project("sub", "root")),
    Scenario("vibe", "project-file-root-from-trusted-subfolder", _vibe_project("sub", "cwd")),
)


@pytest.mark.parametrize("case", SCENARIOS, ids=[f"{s.tool}-{s.name}" for s in SCENARIOS])
def test_doctor_agrees_with_the_binary_more(case: Scenario, temp_home: Path, tmp_path: Path, tool_cache: Path,
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
    # Copilot: the shell after `eval "$(conduit env copilot)"`, then the competing export
    env = {**tool_env(temp_home, tool_path, spec), **session_env(temp_home, case.tool), **extra}
    result = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=env, cwd=cwd, timeout_s=spec.timeout_s))
    model_reqs = [r for r in result.requests if r.path.split("?")[0] in routes(case.tool, MODEL)]
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
    if follows:  # in_sync, or drifted / not synced where the scenario edited conduit's own file
        assert entry["state"] not in BLOCKED, why
    else:
        assert model_reqs or result.exit_code not in (0, None), why
        assert entry["state"] in BLOCKED, why
