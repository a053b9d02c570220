"""Goose: its OpenAI provider pointed at the gateway in ``config.yaml``, the key in ``secrets.yaml``; documented
format only.

Goose's command line (``goose run -t PROMPT``) is a Rust binary released outside npm and PyPI, so it is not
installed on these machines: every fact below comes from block/goose's source (``crates/goose``) and the tests
prove conduit's files against that format only (docs/formats/goose.md). ``one_shot`` is declared, so
``conduit verify`` runs a ``goose`` a person has installed.

- Directory: ``$GOOSE_PATH_ROOT/config`` when that variable is an absolute path, else ``$XDG_CONFIG_HOME/goose``
  (default ``~/.config/goose``) (``crates/goose/src/config/paths.rs`` ``Paths::config_dir``).
- ``config.yaml`` (a YAML mapping; Goose itself rewrites it with serde_yaml, without comments):
  ``GOOSE_PROVIDER: openai``, ``GOOSE_MODEL``, ``OPENAI_HOST`` (scheme, host and path prefix) and
  ``OPENAI_BASE_PATH`` (default ``v1/chat/completions``) (``crates/goose/src/providers/openai.rs``
  ``OpenAiProvider::from_env``). The request URL is ``OPENAI_HOST`` with a ``/`` added, joined with
  ``OPENAI_BASE_PATH`` (``crates/goose/src/providers/api_client.rs`` ``build_url``), so conduit writes the root
  as the host and ``<version>/chat/completions`` as the path; the key goes as ``Authorization: Bearer``.
- Every value is first read from the environment variable of the same name, then from ``config.yaml``
  (``crates/goose/src/config/base.rs`` ``get_param``): ``GOOSE_PROVIDER``, ``GOOSE_MODEL``, ``OPENAI_HOST`` and
  ``OPENAI_BASE_PATH`` exported in the shell outrank the file.
- Secrets (``OPENAI_API_KEY``): the environment variable, else the system keyring (service ``goose``), else,
  when ``GOOSE_DISABLE_KEYRING`` is set or no keyring service answers, ``secrets.yaml`` in the same directory
  (``base.rs`` ``get_secret``, ``all_secrets``, ``handle_keyring_fallback_error``). conduit writes the key into
  ``secrets.yaml`` (0600): what Goose reads on a headless machine, or anywhere with
  ``GOOSE_DISABLE_KEYRING=1``; ``inspect`` says so when that variable is not set.
- No context-window key in ``config.yaml`` is read for the main model in every version (``GOOSE_CONTEXT_LIMIT``
  is read from the environment in ``crates/goose/src/model.rs``), so conduit writes none.
- MCP servers: ``extensions`` in the same ``config.yaml`` (``goose_entry``; docs/formats/goose.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from conduit.adapters.base import (
    AdapterDefaults,
    Blocker,
    ClientView,
    CreateOptions,
    Env,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.declarations import OPENAI_FORMS, OPENAI_ROUTES, Competing, OneShot, Package
from conduit.adapters.formats.mcpmap import mcp_secret_keys, merge_server_map, wanted_entries
from conduit.adapters.formats.textformats import parse_yaml, read_parsed, yaml_target
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

CHAT_PATH = "chat/completions"


def config_dir(env: Env) -> Path:
    """``$GOOSE_PATH_ROOT/config`` (an absolute path only), else ``$XDG_CONFIG_HOME/goose`` or
    ``~/.config/goose``."""
    root = env.get("GOOSE_PATH_ROOT")
    if root and Path(root).is_absolute():
        return Path(root) / "config"
    return env.config_home() / "goose"


class Goose(AdapterDefaults):
    """Adapter for Goose's ``config.yaml`` (OpenAI provider, host, path, model) and ``secrets.yaml`` (key)."""

    name: ClassVar[str] = "goose"
    display_name: ClassVar[str] = "Goose"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = (
        "config.yaml: GOOSE_PROVIDER, GOOSE_MODEL, OPENAI_HOST, OPENAI_BASE_PATH",
        "secrets.yaml: OPENAI_API_KEY (read when GOOSE_DISABLE_KEYRING is set or no keyring answers)",
    )
    restart_hint: ClassVar[str | None] = "start a new Goose session: it reads its config when a session starts"
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("GOOSE_PATH_ROOT", "XDG_CONFIG_HOME", "GOOSE_DISABLE_KEYRING",
                                           "GOOSE_PROVIDER", "GOOSE_MODEL", "OPENAI_HOST", "OPENAI_BASE_PATH",
                                           "OPENAI_API_KEY")

    # `goose run -t TEXT` runs one instruction and exits (block/goose's CLI commands guide, `run --text`).
    one_shot: ClassVar[OneShot | None] = OneShot(("goose",), ("run", "-t"), timeout_s=90.0)
    package: ClassVar[Package | None] = None  # released as a binary, not on npm or PyPI: documented format only
    competing: ClassVar[Competing] = Competing(("GOOSE_PROVIDER", "GOOSE_MODEL"), ("OPENAI_API_KEY",),
                                               ("OPENAI_HOST", "OPENAI_BASE_PATH"))
    tool_dirs: ClassVar[Mapping[str, str]] = {"GOOSE_PATH_ROOT": ".goose-root"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.config/goose/config.yaml", key=("extensions",), format="yaml",
        transports=frozenset({"stdio", "http"}), list_argv=None, name_rule=r"^[a-z0-9_-]{1,64}$",
        source="block/goose crates/goose/src/agents/extension.rs (ExtensionConfig, name_to_key) and "
               "crates/goose/src/config/extensions.rs (ExtensionEntry)",
        proven="")

    def mcp_path(self, env: Env) -> Path | None:
        """``config.yaml`` in ``config_dir``: its ``extensions`` mapping."""
        return config_dir(env) / "config.yaml"

    def verify_files(self, env: Env) -> list[Path]:
        """``config_dir`` (copied whole: config.yaml, secrets.yaml)."""
        return [config_dir(env)]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Two YAML targets: the provider keys in ``config.yaml``, the key in ``secrets.yaml`` (0600)."""
        d = config_dir(env)
        self.require_dir(d, settings.options_as(CreateOptions).create)
        owned = {"GOOSE_PROVIDER": "openai", "GOOSE_MODEL": settings.model, "OPENAI_HOST": settings.root.url,
                 "OPENAI_BASE_PATH": f"{settings.root.version}/{CHAT_PATH}"}
        secret = {"OPENAI_API_KEY": settings.key_or_placeholder}
        servers = wanted_entries(settings.mcp, self.mcp, goose_entry) if self.mcp else None
        setter, ledger, path = _setter(owned), settings.mcp_ledger or McpLedger(), d / "config.yaml"

        def config(doc: Any) -> None:
            setter(doc)
            _merge_mcp(doc, servers, ledger, path)

        return [yaml_target(path, config, secret_keys=mcp_secret_keys(settings.mcp), label="config.yaml"),
                yaml_target(d / "secrets.yaml", _setter(secret), secret_keys=("OPENAI_API_KEY",),
                            label="secrets.yaml")]

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: both files, the owned values (key masked), and where Goose takes the key from."""
        d = config_dir(env)
        config, error = _read(d / "config.yaml")
        secrets, secrets_error = _read(d / "secrets.yaml")
        key = secrets.get("OPENAI_API_KEY")
        details = {"file": str(d / "config.yaml"), "exists": (d / "config.yaml").exists(),
                   "parse_error": error or secrets_error, "secrets_file": str(d / "secrets.yaml"),
                   "owned": {k: config.get(k) for k in ("GOOSE_PROVIDER", "GOOSE_MODEL", "OPENAI_HOST",
                                                         "OPENAI_BASE_PATH")}
                   | {"OPENAI_API_KEY": fingerprint(str(key)) if key else None},
                   "keyring_disabled": env.get("GOOSE_DISABLE_KEYRING") is not None,
                   "version": installed_version(("goose",))}
        warnings = () if env.get("GOOSE_DISABLE_KEYRING") is not None or not key else (
            "Goose reads secrets.yaml only when GOOSE_DISABLE_KEYRING is set or no keyring service answers; "
            "on a desktop with a keyring, export GOOSE_DISABLE_KEYRING=1 where Goose starts",)
        return ToolFacts(summary=f"{d / 'config.yaml'} ({'found' if (d / 'config.yaml').exists() else 'missing'})",
                         details=details, effective={}, warnings=warnings)

    def client_view(self, env: Env) -> ClientView | None:
        """What Goose's OpenAI provider sends: ``OPENAI_HOST`` joined with ``OPENAI_BASE_PATH`` (each from the
        environment first, then ``config.yaml``), the key from ``OPENAI_API_KEY`` or ``secrets.yaml``;
        None unless the provider is ``openai`` with a host."""
        d = config_dir(env)
        config, _ = _read(d / "config.yaml")
        secrets, _ = _read(d / "secrets.yaml")

        def value(name: str, doc: dict[str, Any]) -> str:
            return env.get(name) or str(doc.get(name) or "")

        host, path = value("OPENAI_HOST", config), value("OPENAI_BASE_PATH", config) or f"v1/{CHAT_PATH}"
        if value("GOOSE_PROVIDER", config) != "openai" or not host or not path.rstrip("/").endswith(CHAT_PATH):
            return None
        base = host.rstrip("/") + "/" + path.strip("/")[:-len(CHAT_PATH)].strip("/")
        key_files = () if env.get("OPENAI_API_KEY") else (d / "secrets.yaml",)
        return ClientView(base.rstrip("/"), value("OPENAI_API_KEY", secrets), value("GOOSE_MODEL", config),
                          key_files=key_files)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Exported ``GOOSE_PROVIDER``/``GOOSE_MODEL``/``OPENAI_*`` variables (Goose reads the environment
        before ``config.yaml`` and ``secrets.yaml``: ``crates/goose/src/config/base.rs`` ``get_param``,
        ``get_secret``)."""
        return self.competing.blockers(env.environ, env.cwd)


def goose_entry(server: McpServer) -> dict[str, Any]:
    """Goose's ``extensions.NAME`` (an ``ExtensionEntry``: ``enabled`` plus the ``ExtensionConfig`` tagged by
    ``type``): ``{"enabled": true, "type": "stdio", "name", "cmd", "args", "envs", "env_keys": [], "description":
    "", "timeout": 300, "cwd"}`` or ``{"enabled": true, "type": "streamable_http", "name", "uri", "envs": {},
    "env_keys": [], "headers", "description": "", "timeout": 300}``; values as they are."""
    common = {"enabled": True, "name": server.name, "env_keys": [], "description": "", "timeout": 300}
    if server.transport == "stdio":
        cwd = {"cwd": server.cwd} if server.cwd is not None else {}
        return {**common, "type": "stdio", "cmd": server.command, "args": list(server.args),
                "envs": dict(server.env), **cwd}
    return {**common, "type": "streamable_http", "uri": server.url, "envs": {}, "headers": server.all_headers()}


def _merge_mcp(doc: Any, wanted: Mapping[str, Any] | None, ledger: McpLedger, path: Path) -> None:
    """Merge ``wanted`` into ``doc["extensions"]`` (created only when there is a server to write).

    Raises:
        ToolFileError: ``extensions`` is not a mapping.
    """
    if wanted is None:
        return
    extensions = doc.get("extensions")
    if extensions is None and not wanted:
        ledger.begin(path)
        return
    if extensions is None:
        from ruamel.yaml.comments import CommentedMap

        extensions = doc["extensions"] = CommentedMap()
    if not isinstance(extensions, dict):
        raise ToolFileError(f"{path}: extensions is not a mapping",
                            "make extensions a mapping (name: settings); conduit left the file unchanged")
    merge_server_map(extensions, wanted, ledger, path)


def _setter(owned: Mapping[str, str]) -> Any:
    """A YAML transform setting ``owned`` top-level keys (only those that differ), keeping the rest."""

    def transform(doc: Any) -> None:
        for k, v in owned.items():
            if doc.get(k) != v:
                doc[k] = v

    return transform


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """A YAML mapping and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    doc, error = read_parsed(path, parse_yaml)
    return dict(doc) if error is None else doc, error


__all__ = ["Goose", "config_dir"]
