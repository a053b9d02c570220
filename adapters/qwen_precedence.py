"""Qwen Code's sources as data (``conduit.adapters.precedence``) and doctor's reading of them: the workspace
``.qwen/settings.json`` (the working folder only), the project ``.env`` found walking up, both gated by folder
trust when it is on, and the order of its model, key and base URL sources.

Read in the npm package ``@qwen-code/qwen-code`` 0.24.4 (its bundled ``chunks/*.js``, which name the sources
cited) and checked with that binary by tests/realtools/test_realtools_precedence_more.py; facts in
docs/formats/qwen.md. A workspace ``model.name`` that no ``modelProviders.openai`` entry offers is not used: Qwen
Code falls back to the first entry, conduit's (the binary sent conduit's model).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.declarations import Blocker
from conduit.adapters.formats import trustedfolders
from conduit.adapters.formats.textformats import parse_jsonc, read_dotenv, read_parsed
from conduit.adapters.precedence import Cite, Order, ProjectScope

REPO = "QwenLM/qwen-code"
CHECKED = "0.24.4"
KEY_VAR = "CONDUIT_API_KEY"
WORKSPACE_SCOPE = ProjectScope(
    (".qwen/settings.json",), "cwd",
    Cite(REPO, "packages/cli/src/config/settings.ts", "loadSettings: <cwd>/.qwen/settings.json unless the working "
         "folder is home; mergeSettings drops it when the workspace is not trusted", CHECKED), trusted=True)
"""The workspace settings: the working folder's only (never a parent's), over the user file, under the system
file; with folder trust on, only in a trusted folder."""
DOTENV_SCOPE = ProjectScope(
    (".env", ".qwen/.env"), "cwd_up",
    Cite(REPO, "packages/cli/src/config/environment.ts", "findEnvFiles: from the working folder up, the first "
         ".qwen/.env or .env, then $QWEN_HOME/.env and ~/.env; canUseEnvFile needs a trusted workspace", CHECKED),
    trusted=True)
"""The project ``.env``: the nearest ``.qwen/.env`` or ``.env`` from the working folder up to (not into) home, read
before ``~/.qwen/.env``; a variable is set only when nothing set it before (the shell, then the first file)."""
MODEL_ORDER = Order(
    "model", ("--model", "model.name", "OPENAI_MODEL", "QWEN_MODEL"),
    Cite(REPO, "packages/cli/src/utils/modelConfigUtils.ts", "resolveCliGenerationConfig: argv.model, else "
         "settings.model.name, else the auth type's model variables", CHECKED),
    note="model.name from the merged settings (system > workspace > user); one that no modelProviders.openai entry "
         "offers falls back to the first entry (packages/core/src/models/modelsConfig.ts syncAfterAuthRefresh)")
"""Where Qwen Code takes its model from, highest first."""
KEY_ORDER = Order(
    "key", ("the selected entry's envKey variable", "--openaiApiKey", "OPENAI_API_KEY", "security.auth.apiKey"),
    Cite(REPO, "packages/core/src/models/modelConfigResolver.ts", "resolveModelConfig: apiKeyLayers", CHECKED),
    note="the envKey variable as exported, else from the first .env file that sets it (project, then ~/.qwen/.env)")
"""Where Qwen Code takes its key from, highest first."""
BASE_ORDER = Order(
    "base_url", ("the selected entry's baseUrl", "--openaiBaseUrl", "OPENAI_BASE_URL", "security.auth.baseUrl"),
    Cite(REPO, "packages/core/src/models/modelConfigResolver.ts", "resolveModelConfig: baseUrlLayers", CHECKED))
"""Where Qwen Code takes its base URL from, highest first: an exported ``OPENAI_BASE_URL`` never beats conduit's
entry."""
RULES = (WORKSPACE_SCOPE, DOTENV_SCOPE, MODEL_ORDER, KEY_ORDER, BASE_ORDER)
"""Qwen Code's precedence rules (``Qwen.precedence``)."""
SYSTEM_VAR = "QWEN_CODE_SYSTEM_SETTINGS_PATH"
DEFAULTS_VAR = "QWEN_CODE_SYSTEM_DEFAULTS_PATH"
FOLDERS_VAR = "QWEN_CODE_TRUSTED_FOLDERS_PATH"

__all__ = ["BASE_ORDER", "DEFAULTS_VAR", "DOTENV_SCOPE", "FOLDERS_VAR", "KEY_ORDER", "MODEL_ORDER", "RULES",
           "WORKSPACE_SCOPE", "folder_trusted", "project_blockers", "system_file"]


def _dig(doc: Any, *keys: str) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def system_file(env: Env) -> Path:
    """``$QWEN_CODE_SYSTEM_SETTINGS_PATH``, else ``/etc/qwen-code/settings.json``: the layer above every other."""
    return Path(env.get(SYSTEM_VAR) or "/etc/qwen-code/settings.json")


def folder_trusted(folder: Path, env: Env, qwen_dir: Path) -> bool:
    """Whether Qwen Code trusts ``folder``: always while folder trust is off (``security.folderTrust.enabled``,
    default false, from the system file, else the user's, else the system defaults); with it on, when the
    deciding rule of ``trustedFolders.json`` (``$QWEN_CODE_TRUSTED_FOLDERS_PATH``, else beside the user settings;
    Gemini CLI's format, read by ``conduit.adapters.formats.trustedfolders``) trusts it. Never raises.

    Source: QwenLM/qwen-code ``packages/cli/src/config/trustedFolders.ts`` (``isFolderTrustEnabled``,
    ``getWorkspaceTrustStatus``: no rule means untrusted)."""
    defaults = Path(env.get(DEFAULTS_VAR) or "/etc/qwen-code/system-defaults.json")
    enabled = None
    for path in (system_file(env), qwen_dir / "settings.json", defaults):  # highest first
        value = _dig(read_parsed(path, parse_jsonc)[0], "security", "folderTrust", "enabled")
        if isinstance(value, bool):
            enabled = value
            break
    if not enabled:
        return True
    rules, error = trustedfolders.read_rules(env.path_from(FOLDERS_VAR, qwen_dir / "trustedFolders.json"))
    rule = None if error else trustedfolders.deciding_rule(folder, rules)
    return rule is not None and rule[1] != "DO_NOT_TRUST"


def _read_env(path: Path) -> dict[str, str]:
    try:
        return read_dotenv(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}


def _workspace(env: Env, qwen_dir: Path) -> list[Path]:
    """The workspace settings Qwen Code applies from ``env.cwd`` (none when the working folder is home)."""
    cwd = env.cwd.resolve() if env.cwd.exists() else env.cwd
    home = env.home.resolve() if env.home.exists() else env.home
    if cwd == home:
        return []
    return WORKSPACE_SCOPE.applied(env.cwd, env.environ, lambda f: folder_trusted(f, env, qwen_dir),
                                   skip=qwen_dir / "settings.json")


def _offered(layers: list[dict[str, Any]], name: Any, base: Any = None) -> bool:
    """Whether the ``modelProviders.openai`` list in force (the highest layer's that has one: it replaces the
    others whole) holds an entry with id ``name`` (and ``baseUrl`` ``base`` when given)."""
    lists = [_dig(doc, "modelProviders", "openai") for doc in layers if "modelProviders" in doc]
    entries = lists[-1] if lists and isinstance(lists[-1], list) else []
    return any(isinstance(e, dict) and e.get("id") == name and (base is None or e.get("baseUrl") == base)
               for e in entries)


def project_blockers(env: Env, qwen_dir: Path, wanted: Mapping[str, Any], shell_key: str | None,
                     ours: Any) -> list[Blocker]:
    """``overridden`` blockers for the sources above conduit's user settings that Qwen Code really applies from
    ``env.cwd``: the project ``.env`` setting ``CONDUIT_API_KEY`` (when the shell does not), and the workspace
    (trusted) and system settings replacing ``wanted`` (``security.auth.selectedType``, ``model.name``,
    ``model.baseUrl`` -> conduit's value) or the provider list. ``ours(entry)`` says whether a provider entry is
    conduit's. A ``model.name`` (or ``model.baseUrl``) is reported only where the list in force offers it."""
    out: list[Blocker] = []
    trust = lambda f: folder_trusted(f, env, qwen_dir)  # noqa: E731
    project_env = DOTENV_SCOPE.applied(env.cwd, env.environ, trust, home=env.home)
    if shell_key is None and project_env and KEY_VAR in _read_env(project_env[0]):
        out.append(Blocker("overridden", str(project_env[0]), f"{project_env[0]} is read before ~/.qwen/.env and "
                           f"sets {KEY_VAR}", f"remove {KEY_VAR} from {project_env[0]}"))
    user_doc = read_parsed(qwen_dir / "settings.json", parse_jsonc)[0]
    above = [("workspace", p) for p in _workspace(env, qwen_dir)]
    above += [("system", system_file(env))] if system_file(env).is_file() else []
    docs = [user_doc, *(read_parsed(p, parse_jsonc)[0] for _, p in above)]
    name = next((_dig(d, "model", "name") for d in reversed(docs) if _dig(d, "model", "name") is not None), None)
    for (label, layer), doc in zip(above, docs[1:], strict=True):
        for dotted, value in wanted.items():
            got = _dig(doc, *dotted.split("."))
            if got is None or got == value:
                continue
            if dotted == "model.name" and not _offered(docs, got):
                continue  # Qwen Code falls back to the first entry of the list in force
            if dotted == "model.baseUrl" and not _offered(docs, name, got):
                continue  # no entry of that id has this baseUrl: the first id match is used
            out.append(Blocker("overridden", str(layer), f"{dotted} = \"{got}\" in the {label} "
                               f"settings ranks above {qwen_dir / 'settings.json'} (conduit's \"{value}\")",
                               f"remove {dotted} from {layer}"))
        entries = _dig(doc, "modelProviders", "openai")
        if "modelProviders" in doc and not any(ours(e) for e in (entries if isinstance(entries, list) else [])):
            out.append(Blocker("overridden", str(layer), f"modelProviders in the {label} settings replaces the "
                               "user's whole list, conduit's entry included", f"remove modelProviders from {layer}"))
    return out
