"""Aider: ``openai-api-base``, ``model`` and the key in ``~/.aider.conf.yml``.

Facts (Aider-AI/aider ``aider/main.py``, ``aider/args.py``; aider.chat docs "YAML config file", "Config with
.env", "OpenAI compatible APIs"):
- Config files, later wins: ``~/.aider.conf.yml``, ``<git root>/.aider.conf.yml``, ``./.aider.conf.yml``
  (YAML; comments kept by ruamel.yaml round-trip). Environment variables ``AIDER_<OPTION>`` outrank every
  config file (configargparse), and ``.env`` files (``~/.env``, git root, cwd, ``--env-file``) are loaded with
  ``override=True``, so an ``AIDER_*`` line in any of them outranks the YAML too.
- An OpenAI-compatible endpoint: ``openai-api-base`` (exported as ``OPENAI_API_BASE`` for litellm, which
  requests ``base + "/chat/completions"``: the version segment is included) and ``model: openai/<model id>``
  (litellm's ``openai/`` prefix routes any model name to that endpoint).
- The key: ``openai-api-key`` in the same YAML (exported as ``OPENAI_API_KEY``, replacing one from the shell
  or a ``.env``). conduit keeps it in Aider's own file (0600) rather than in ``~/.env``, which other programs
  (Gemini CLI among them) read too. ``weak-model`` follows the profile's ``small_model`` when one is set; with
  none set (back from a fallback channel, or removed from the profile), the value conduit wrote goes and the one
  it replaced comes back, while a value the person changed since stays (``conduit.adapters.limits`` records).
- Aider reads its configuration at start-up.
- Model metadata: Aider loads ``~/.aider.model.metadata.json``, then the git root's and the working folder's,
  then ``--model-metadata-file`` (``aider/main.py`` ``register_litellm_models``, ``generate_search_path_list``;
  later wins), JSON5 in litellm's format: ``{"openai/<model>": {"max_input_tokens": N, "max_output_tokens": M,
  "max_tokens": M, "litellm_provider": "openai", "mode": "chat"}}`` (``aider/models.py`` ``ModelInfoManager``).
  ``max_input_tokens`` is what Aider checks a chat against; without an entry it warns "Unknown context window
  size and costs, using sane defaults". conduit owns only the entry of the profile's model.
- ``outranks``: an ``AIDER_*`` variable for an owned key, in the shell or any ``.env`` (home, git root, cwd;
  later wins, and a ``.env`` beats the shell), or a git-root/cwd ``.aider.conf.yml`` with its own value; a
  shortcut switch (``AIDER_SONNET=true``) only where no model is set anywhere (``conduit.adapters.
  aider_precedence``; docs/formats/aider.md). A plain ``OPENAI_API_BASE``/``OPENAI_API_KEY`` does not win:
  Aider sets both from the YAML's values.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from conduit.adapters.aider_precedence import DOTENV_SCOPE, RULES, YAML_SCOPE, shortcut_blockers
from conduit.adapters.base import (
    AdapterDefaults,
    ClientView,
    CreateOptions,
    Effective,
    Env,
    NotFound,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.declarations import (
    OPENAI_FORMS,
    OPENAI_KEY,
    OPENAI_MODEL,
    OPENAI_ROUTES,
    Blocker,
    Competing,
    OneShot,
    Package,
    read_env_quietly,
)
from conduit.adapters.formats.jsonfile import json_target, parse_json_object
from conduit.adapters.formats.masking import shown
from conduit.adapters.formats.textformats import parse_yaml, tool_version, yaml_target
from conduit.adapters.limits import ABSENT, LimitLedger
from conduit.adapters.precedence import Rule
from conduit.errors import ToolFileError

SECRETS = ("openai-api-key",)
ENV_OVERRIDES = {"openai-api-base": "AIDER_OPENAI_API_BASE", "model": "AIDER_MODEL",
                 "openai-api-key": "AIDER_OPENAI_API_KEY", "weak-model": "AIDER_WEAK_MODEL"}


def conf_path(env: Env) -> Path:
    """``~/.aider.conf.yml``."""
    return env.home / ".aider.conf.yml"


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        doc = parse_yaml(path.read_text(encoding="utf-8"), path=path)
    except Exception:
        return {}
    return dict(doc)


class Aider(AdapterDefaults):
    """Adapter for Aider's home YAML config."""

    name: ClassVar[str] = "aider"
    writes_context: ClassVar[bool] = True  # context_window / max_output_tokens land in its files
    display_name: ClassVar[str] = "Aider"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = ("~/.aider.conf.yml: openai-api-base, openai-api-key, model, weak-model",
                                             "~/.aider.model.metadata.json: openai/<model> (conduit's keys; the "
                                             "person's values come back when unknown)")
    restart_hint: ClassVar[str | None] = "restart Aider: it reads its configuration at start-up"
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = tuple(ENV_OVERRIDES.values())

    # AIDER_<OPTION> sets any option (aider/args.py, configargparse auto_env_var_prefix "AIDER_").
    one_shot: ClassVar[OneShot | None] = OneShot(("aider",), ("--message",), ("--yes-always", "--no-git"), opt_outs={
        "AIDER_CHECK_UPDATE": "false", "AIDER_ANALYTICS": "false", "AIDER_SHOW_RELEASE_NOTES": "false"},
        timeout_s=90.0)
    package: ClassVar[Package | None] = Package("pypi", "aider-chat", "0.86.2", ("aider",))
    # AIDER_<OPTION> (shell or any .env) outranks every .aider.conf.yml.
    competing: ClassVar[Competing] = Competing(("AIDER_MODEL", *OPENAI_MODEL), ("AIDER_OPENAI_API_KEY", *OPENAI_KEY),
                                               ("AIDER_OPENAI_API_BASE",), (".aider.conf.yml", ".env"))
    tool_dirs: ClassVar[Mapping[str, str]] = {}
    # it writes its history files in the working directory by default: verify moves them into its HOME
    verify_env: ClassVar[Mapping[str, str]] = {"AIDER_CHAT_HISTORY_FILE": ".aider.chat.history",
                                               "AIDER_INPUT_HISTORY_FILE": ".aider.input.history"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    precedence: ClassVar[tuple[Rule, ...]] = RULES  # conduit.adapters.aider_precedence

    def verify_files(self, env: Env) -> list[Path]:
        """``~/.aider.conf.yml``, ``~/.env``, ``~/.aider.model.settings.yml`` and ``~/.aider.model.metadata.json``."""
        return [conf_path(env), env.home / ".env", env.home / ".aider.model.settings.yml",
                env.home / ".aider.model.metadata.json"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """One YAML target with the owned keys; everything else in the file is kept."""
        opts = settings.options_as(CreateOptions)
        path = conf_path(env)
        if not (path.exists() or (env.home / ".aider").is_dir() or shutil.which("aider") or opts.create):
            raise NotFound(f"Aider not found: no {path}, no ~/.aider and no `aider` on PATH; install Aider, or "
                           "set [tools.aider] create = true")
        wanted: dict[str, Any] = {"openai-api-base": settings.root.openai_base(),
                                  "openai-api-key": settings.key_or_placeholder,
                                  "model": f"openai/{settings.model}"}
        if settings.small_model:
            wanted["weak-model"] = f"openai/{settings.small_model}"

        ledger = settings.limits or LimitLedger()

        def transform(doc: Any) -> None:
            # weak-model is conduit's only while it holds what conduit wrote (conduit.adapters.limits): with no
            # small_model now (back from a fallback channel, or removed), that value goes and the person's comes back
            weak = ledger.settle(path, "weak-model", doc.get("weak-model", ABSENT), wanted.get("weak-model"))
            for k, v in {**wanted, "weak-model": weak}.items():
                if v is ABSENT:
                    doc.pop(k, None)
                elif doc.get(k) != v:
                    doc[k] = v

        conf = yaml_target(path, transform, secret_keys=SECRETS, label=path.name)
        targets: list[Target] = [conf]
        refused = _not_plain_json(metadata_path(env))
        if refused:
            conf.notices = (*conf.notices, refused)
        elif (settings.context_window is not None or settings.max_output_tokens is not None
                or metadata_path(env).exists()):  # limits unknown now: conduit's stale entry is removed
            targets.append(_metadata_target(env, settings))
        return targets

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: owned values and the higher layers (project YAML, AIDER_* in env or .env files)."""
        path = conf_path(env)
        doc = _read_yaml(path)
        dotenvs = {p: read_env_quietly(p) for p in _dotenv_paths(env) if p.exists()}
        project = env.cwd / ".aider.conf.yml"
        pdoc = _read_yaml(project) if project != path and project.exists() else {}
        effective = {key: _effective(key, var, env, dotenvs, (project, pdoc), (path, doc))
                     for key, var in ENV_OVERRIDES.items()}
        details = {"file": str(path), "exists": path.exists(),
                   "mode": oct(path.stat().st_mode & 0o777) if path.exists() else None,
                   "version": tool_version("aider")}
        return ToolFacts(summary=f"{path} ({'found' if path.exists() else 'missing'})", details=details,
                         effective=effective)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """``AIDER_*`` variables (shell or ``.env``) and project ``.aider.conf.yml`` files with other values."""
        wanted = {"openai-api-base": settings.root.openai_base(), "openai-api-key": settings.key_or_placeholder,
                  "model": f"openai/{settings.model}"}
        if settings.small_model:
            wanted["weak-model"] = f"openai/{settings.small_model}"
        dotenvs = [(p, read_env_quietly(p)) for p in _dotenv_paths(env)]
        home = conf_path(env)
        yamls = [(p, _read_yaml(p)) for p in YAML_SCOPE.candidates(env.cwd) if p != home and p.exists()]
        out = shortcut_blockers(dotenvs, env, [*reversed(yamls), (home, _read_yaml(home))], wanted["model"])
        for key, value in wanted.items():
            var, secret = ENV_OVERRIDES[key], key in SECRETS
            hit = next(((str(p), vals[var]) for p, vals in reversed(dotenvs) if var in vals), None)
            if hit is None and env.get(var) is not None:
                hit = ("shell environment", str(env.get(var)))
            if hit is not None:
                if hit[1] != value:
                    where = "in the shell" if hit[0] == "shell environment" else f"in {hit[0]}"
                    fix = (f"unset {var} (and remove its export from your shell's start-up file)"
                           if hit[0] == "shell environment" else f"remove the {var} line from {hit[0]}")
                    out.append(Blocker("overridden", hit[0], f"{var} = {shown(hit[1], secret=secret)} {where} "
                                       f"outranks {key} in every .aider.conf.yml", fix))
                continue
            found: tuple[Path | None, dict[str, Any]] = next(((p, d) for p, d in reversed(yamls) if key in d),
                                                             (None, {}))
            ypath, ydoc = found
            if ypath is not None and str(ydoc[key]) != value:
                out.append(Blocker("overridden", str(ypath), f"{key}: {shown(str(ydoc[key]), secret=secret)} in "
                                   f"{ypath} ranks above ~/.aider.conf.yml", f"remove {key} from {ypath}"))
        return out

    def client_view(self, env: Env) -> ClientView | None:
        """What Aider's litellm client sends: ``openai-api-base``, ``openai-api-key`` and the model after
        litellm's ``openai/`` routing prefix; None unless the model has that prefix."""
        path = conf_path(env)
        doc = _read_yaml(path)
        model = str(doc.get("model") or "")
        if not doc.get("openai-api-base") or not model.startswith("openai/"):
            return None
        return ClientView(str(doc["openai-api-base"]), str(doc.get("openai-api-key") or ""),
                          model.removeprefix("openai/"), key_files=(path,))


def metadata_path(env: Env) -> Path:
    """``~/.aider.model.metadata.json``."""
    return env.home / ".aider.model.metadata.json"


def _not_plain_json(path: Path) -> str | None:
    """A one-line notice when the metadata file exists and is not plain JSON, else None. Aider reads it as JSON5
    (``aider/models.py`` imports ``json5``), so comments, unquoted keys and trailing commas are the person's
    right there; conduit edits plain JSON only (it would lose them) and leaves such a file alone, without
    failing the rest of Aider's sync."""
    try:
        text = path.read_text(encoding="utf-8")
        parse_json_object(text, path=path)
    except (OSError, UnicodeDecodeError):  # missing, or unreadable: the writer says which
        return None
    except ToolFileError:
        return (f"left {path} unchanged: it is not plain JSON (comments, unquoted keys or trailing commas, "
                "which Aider's JSON5 reader accepts), so conduit did not write the model's context limits there; "
                "convert it to plain JSON to let conduit manage limits there")
    return None


_METADATA_FIXED = (("litellm_provider", "openai"), ("mode", "chat"))


def _metadata_target(env: Env, settings: ToolSettings) -> Target:
    """The ``openai/<model>`` entry of the home metadata file with the known limits (litellm's keys; the
    output limit is also ``max_tokens``, litellm's older name); other entries and keys are kept. The input limit
    is the context less the output limit when both are known (the context is prompt + output, and Aider checks
    the prompt against ``max_input_tokens``). Each key conduit writes is a slot of ``settings.limits``
    (``conduit.adapters.limits``): the value it replaced (the person's own entry) comes back when the limits
    become unknown or another model is the profile's, a key conduit added goes then, and an entry emptied so
    goes too; a value the person changed since is kept."""
    ctx, out = settings.context_window, settings.max_output_tokens
    limits: dict[str, int | None] = {"max_input_tokens": ctx if out is None or ctx is None else max(1, ctx - out),
                                     "max_output_tokens": out, "max_tokens": out}
    known = any(v is not None for v in limits.values())
    wanted: dict[str, Any] = {**{k: v if known else None for k, v in _METADATA_FIXED}, **limits}
    ledger = settings.limits or LimitLedger()
    path = metadata_path(env)

    def transform(doc: dict[str, Any]) -> dict[str, Any]:
        ledger.begin(path)
        entries: dict[str, dict[str, Any]] = {f"openai/{settings.model}": dict(wanted)}
        for slot in ledger.owned(path):  # conduit's keys in entries of models no longer the profile's
            entry, _, sub = slot.rpartition(".")
            entries.setdefault(entry, {}).setdefault(sub, None)
        for entry, subs in entries.items():
            got = doc.get(entry)
            if got is not None and not isinstance(got, dict):
                continue  # not an entry litellm reads: left as it is
            new = dict(got or {})
            for sub, value in subs.items():
                ledger.settle_key(path, new, sub, value, f"{entry}.{sub}")
            if new:
                doc[entry] = new
            elif got:
                doc.pop(entry)
        return doc

    return json_target(path, transform, secret_keys=(), mode=0o644, label=path.name)


def _dotenv_paths(env: Env) -> list[Path]:
    """The ``.env`` files Aider loads, in order (later wins): ``~/.env``, the git root's, the working folder's."""
    return list(dict.fromkeys([env.home / ".env", *DOTENV_SCOPE.candidates(env.cwd)]))


def _effective(key: str, var: str, env: Env, dotenvs: dict[Path, dict[str, str]],
               project: tuple[Path, dict[str, Any]], home: tuple[Path, dict[str, Any]]) -> Effective:
    """Where Aider takes ``key`` from: ``var`` in a .env file, then in the shell, then a project YAML."""
    secret = key in SECRETS
    hits = [(str(p), vals[var]) for p, vals in dotenvs.items() if var in vals]
    if hits:
        src, val = hits[-1]
        return Effective(shown(val, secret=secret), src, True, f"{var} in a .env file outranks every .aider.conf.yml")
    if env.get(var) is not None:
        return Effective(shown(env.get(var), secret=secret), "shell environment", True,
                         f"{var} outranks every .aider.conf.yml")
    (ppath, pdoc), (path, doc) = project, home
    if key in pdoc:
        return Effective(shown(str(pdoc[key]), secret=secret), str(ppath), True,
                         "a project .aider.conf.yml ranks above the home one")
    return Effective(shown(str(doc[key]), secret=secret) if key in doc else None, str(path) if key in doc else None,
                     False, "conduit's ~/.aider.conf.yml" if key in doc else "not set")


__all__ = ["Aider", "conf_path", "metadata_path"]
