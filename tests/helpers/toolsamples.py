"""Real-format files for Codex CLI, Gemini CLI, OpenCode, Continue and Aider (Cline's from conduit.daemon.cli.samples),
written where each tool keeps them; ``SAMPLES`` names each by its registry name.

Each sample follows the tool's documented examples (see the adapter docstrings for sources) and carries user
content conduit must keep: comments, other providers, MCP servers, unrelated settings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conduit.daemon.cli.samples import cline_gen_c

CODEX_CONFIG = """\
# Codex user configuration (~/.codex/config.toml)
model = "gpt-5-codex"            # the default model
model_reasoning_effort = "high"
approval_policy = "on-request"

# a local model for offline work
[model_providers.ollama]
name = "Ollama"
base_url = "http://localhost:11434/v1"

[mcp_servers.docs]
command = "npx"
args = ["-y", "mcp-server-docs"]  # keep me
env = { "DOCS_TOKEN" = "value" }

[profiles.fast]
model = "gpt-5-mini"
"""
CODEX_DOTENV = "# my own variables\nHTTPS_PROXY=http://proxy.local:3128\n"

GEMINI_SETTINGS = """\
{
  // Gemini CLI user settings
  "general": {
    "vimMode": true
  },
  "security": {
    "auth": {
      "selectedType": "oauth-personal" // was: log in with Google
    }
  },
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "$GITHUB_TOKEN" }
    }
  },
  "ui": { "theme": "GitHub" }
}
"""
GEMINI_DOTENV = "# Gemini CLI environment\nGOOGLE_CLOUD_PROJECT=my-project\nGEMINI_MODEL=gemini-2.5-pro\n"

OPENCODE_JSONC = """\
{
  "$schema": "https://opencode.ai/config.json",
  // Theme configuration
  "theme": "opencode",
  "model": "anthropic/claude-sonnet-4-5",
  "autoupdate": true,
  "provider": {
    "anthropic": {
      "options": {
        "apiKey": "{env:ANTHROPIC_API_KEY}", /* from the shell */
      },
    },
  },
  "mcp": {
    "jira": {
      "type": "remote",
      "url": "https://jira.example.com/mcp",
      "enabled": true,
    },
  },
}
"""

CONTINUE_YAML = """\
# Continue configuration
name: My Config
version: 0.0.1
schema: v1

models:
  - name: Claude
    provider: anthropic
    model: claude-sonnet-4-5
    apiKey: ${{ secrets.ANTHROPIC_API_KEY }}
    roles:
      - chat
      - edit

  # local autocomplete
  - name: Qwen Coder
    provider: ollama
    model: qwen2.5-coder:1.5b
    roles:
      - autocomplete

context:
  - provider: code
  - provider: docs

mcpServers:
  - name: SQLite
    command: npx
    args:
      - "-y"
      - "mcp-sqlite"
"""

AIDER_YAML = """\
##########################################################
# Sample .aider.conf.yml
# Place in your home dir, or at the root of your git repo.
##########################################################

## Specify the model to use for the main chat
model: gpt-4o

## Enable/disable auto commit of LLM changes (default: True)
auto-commits: false

## Specify a read-only file (can be used multiple times)
read:
  - CONVENTIONS.md
  - docs/style.md

dark-mode: true
"""


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` at ``path`` (creating directories) with ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def codex(home: Path) -> Path:
    """``~/.codex/config.toml`` and ``~/.codex/.env``; returns config.toml."""
    write(home / ".codex" / ".env", CODEX_DOTENV, 0o600)
    return write(home / ".codex" / "config.toml", CODEX_CONFIG)


def gemini(home: Path) -> Path:
    """``~/.gemini/settings.json`` and ``~/.gemini/.env``; returns settings.json."""
    write(home / ".gemini" / ".env", GEMINI_DOTENV)
    return write(home / ".gemini" / "settings.json", GEMINI_SETTINGS)


def opencode(home: Path) -> Path:
    """``~/.config/opencode/opencode.jsonc``."""
    return write(home / ".config" / "opencode" / "opencode.jsonc", OPENCODE_JSONC)


def continue_dev(home: Path) -> Path:
    """``~/.continue/config.yaml``."""
    return write(home / ".continue" / "config.yaml", CONTINUE_YAML)


def aider(home: Path) -> Path:
    """``~/.aider.conf.yml``."""
    return write(home / ".aider.conf.yml", AIDER_YAML)


ZED_SETTINGS = """\
// Zed settings
//
// For information on how to configure Zed, see the Zed documentation.
{
  "vim_mode": true,
  "ui_font_size": 16,
  "language_models": {
    "openai_compatible": {
      "my-provider": { // the person's own provider
        "api_url": "https://example.com/v1",
        "available_models": [{ "name": "my-model", "display_name": "My Model", "max_tokens": 128000 }],
      },
    },
  },
  "agent": {
    "default_profile": "write",
    "default_model": { "provider": "my-provider", "model": "my-model" },
  },
}
"""


def zed(home: Path) -> Path:
    """``~/.config/zed/settings.json`` (JSONC)."""
    return write(home / ".config" / "zed" / "settings.json", ZED_SETTINGS)


GOOSE_CONFIG = """\
GOOSE_PROVIDER: anthropic
GOOSE_MODEL: claude-sonnet-4-5
GOOSE_MODE: smart_approve
extensions:
  developer:
    bundled: true
    enabled: true
    name: developer
    timeout: 300
    type: builtin
"""
GOOSE_SECRETS = "ANTHROPIC_API_KEY: sk-ant-person-own\n"


def goose(home: Path) -> Path:
    """``~/.config/goose/config.yaml`` and ``secrets.yaml``; returns config.yaml."""
    write(home / ".config" / "goose" / "secrets.yaml", GOOSE_SECRETS, 0o600)
    return write(home / ".config" / "goose" / "config.yaml", GOOSE_CONFIG)


VSCODE_SETTINGS = """\
{
  // VS Code user settings
  "editor.fontSize": 14,
  "workbench.colorTheme": "Default Dark Modern",
  "roo-cline.allowedCommands": ["npm test", "git log"],
}
"""


ROO_IMPORT = """\
{
  "providerProfiles": {
    "currentApiConfigName": "default",
    "apiConfigs": {
      "default": {"apiProvider": "anthropic", "apiModelId": "claude-sonnet-4-5", "id": "a1b2c3"}
    }
  },
  "globalSettings": {"autoApprovalEnabled": true}
}
"""


def roo(home: Path) -> Path:
    """VS Code's ``~/.config/Code/User/settings.json`` and a Roo Code settings export (its import format) at the
    path conduit's adapter uses; returns the export, the file that names the gateway."""
    write(home / ".config" / "Code" / "User" / "settings.json", VSCODE_SETTINGS)
    return write(home / ".config" / "conduit" / "tool-keys" / "roo-code-settings.json", ROO_IMPORT, 0o600)


def write_gemini_profile(home: Path, base_url: str = "https://gw.example.com/api", *,
                         key_text: str = "sk-test-abc\n", model: str = "gemini-2.5-pro") -> Path:
    """A profile whose channel speaks the Gemini protocol, with ``[tools.gemini]``."""
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True, exist_ok=True)
    (cfg / "keys" / "gw").write_text(key_text)
    (cfg / "keys" / "gw").chmod(0o600)
    path = cfg / "profile.toml"
    path.write_text(f'version = 1\nchannel = "gw"\nmodel = "{model}"\n\n[channels.gw]\nbase_url = "{base_url}"\n'
                    'protocols = ["gemini"]\nkey = { file = "~/.config/conduit/keys/gw" }\n\n[tools.gemini]\n')
    return path


PI_MODELS = """\
{
  // Pi custom models (~/.pi/agent/models.json)
  "providers": {
    "ollama": {
      "baseUrl": "http://localhost:11434/v1",
      "api": "openai-completions",
      "apiKey": "ollama", // Ollama ignores it
      "models": [{ "id": "llama3.1:8b" }],
    },
  },
}
"""
PI_SETTINGS = '{\n  "theme": "dark",\n  "defaultProvider": "ollama",\n  "defaultModel": "llama3.1:8b",\n  "quietStartup": true\n}\n'


def pi(home: Path) -> Path:
    """``~/.pi/agent/models.json`` and ``settings.json``; returns models.json."""
    write(home / ".pi" / "agent" / "settings.json", PI_SETTINGS)
    return write(home / ".pi" / "agent" / "models.json", PI_MODELS)


QWEN_SETTINGS = """\
{
  // Qwen Code user settings
  "ui": { "theme": "GitHub" },
  "security": {
    "auth": { "selectedType": "qwen-oauth" } // was: log in
  },
  "model": { "name": "qwen3-coder-plus" },
  "modelProviders": {
    "openai": [
      {
        "id": "qwen3-coder-plus",
        "name": "qwen3-coder-plus (Coding Plan)",
        "envKey": "BAILIAN_CODING_PLAN_API_KEY",
        "baseUrl": "https://coding.dashscope.aliyuncs.com/v1"
      }
    ]
  },
  "mcpServers": {
    "docs": { "command": "npx", "args": ["-y", "mcp-server-docs"] }
  },
  "$version": 4
}
"""
QWEN_DOTENV = "# Qwen Code environment\nBAILIAN_CODING_PLAN_API_KEY=sk-bailian-own\n"


def qwen(home: Path) -> Path:
    """``~/.qwen/settings.json`` and ``~/.qwen/.env``; returns settings.json."""
    write(home / ".qwen" / ".env", QWEN_DOTENV, 0o600)
    return write(home / ".qwen" / "settings.json", QWEN_SETTINGS)


KIMI_CONFIG = """\
# Kimi CLI configuration (~/.kimi/config.toml)
default_model = "kimi-for-coding"
default_thinking = false
theme = "dark"

[providers.kimi-for-coding]
type = "kimi"
base_url = "https://api.kimi.com/coding/v1"
api_key = "sk-kimi-person-own"

[models.kimi-for-coding]
provider = "kimi-for-coding"
model = "kimi-for-coding"
max_context_size = 262144
capabilities = ["thinking", "image_in"]

[loop_control]
max_steps_per_turn = 100  # keep me
"""


def kimi(home: Path) -> Path:
    """``~/.kimi/config.toml``."""
    return write(home / ".kimi" / "config.toml", KIMI_CONFIG, 0o600)


HERMES_CONFIG = """\
# Hermes Agent configuration (~/.hermes/config.yaml)
model:
  default: anthropic/claude-opus-4.6
  provider: openrouter
toolsets:
  - hermes-cli
agent:
  max_turns: 60  # fewer turns than the default
providers:
  local:
    name: Local vLLM
    base_url: http://localhost:8000/v1
    key_env: LOCAL_API_KEY
mcp_servers:
  github:
    command: npx
    args: ["-y", "@modelcontextprotocol/server-github"]
"""
HERMES_DOTENV = "# Hermes secrets\nOPENROUTER_API_KEY=sk-or-person-own\n"


def hermes(home: Path) -> Path:
    """``~/.hermes/config.yaml`` and ``~/.hermes/.env``; returns config.yaml."""
    write(home / ".hermes" / ".env", HERMES_DOTENV, 0o600)
    return write(home / ".hermes" / "config.yaml", HERMES_CONFIG)


VIBE_CONFIG = """\
# Mistral Vibe configuration (~/.vibe/config.toml)
active_model = "my-local-model"
theme = "auto"
enable_update_checks = true

[[providers]]
name = "llamacpp"
api_base = "http://127.0.0.1:8080/v1"
api_key_env_var = ""

[[models]]
# a local model served by llama.cpp
name = "devstral"
provider = "llamacpp"
alias = "my-local-model"

[session_logging]
enabled = true  # keep me
"""
VIBE_DOTENV = "MISTRAL_API_KEY=sk-mistral-person-own\n"


def vibe(home: Path) -> Path:
    """``~/.vibe/config.toml`` and ``~/.vibe/.env``; returns config.toml."""
    write(home / ".vibe" / ".env", VIBE_DOTENV, 0o600)
    return write(home / ".vibe" / "config.toml", VIBE_CONFIG)


KILO_JSONC = """\
{
  "$schema": "https://app.kilo.ai/config.json",
  // Kilo CLI global config
  "provider": {
    "ollama": {
      "npm": "@ai-sdk/openai-compatible",
      "options": { "baseURL": "http://localhost:11434/v1" }, // local models
      "models": { "llama3.1:8b": {} },
    },
  },
  "model": "ollama/llama3.1:8b",
  "permission": {
    "bash": "allow"
  },
}
"""


def kilo(home: Path) -> Path:
    """``~/.config/kilo/kilo.jsonc`` (as Kilo CLI 7.7 leaves it after its first start, plus a provider)."""
    return write(home / ".config" / "kilo" / "kilo.jsonc", KILO_JSONC)


DROID_SETTINGS = """\
{
  // Factory Droid user settings
  "diffMode": "github",
  "sessionDefaultSettings": {
    "model": "claude-sonnet-4-5-20250929",
    "autonomyMode": "auto-low"
  },
  "customModels": [
    {
      "model": "qwen2.5-coder:7b", // local Ollama
      "displayName": "Qwen local",
      "baseUrl": "http://localhost:11434/v1",
      "apiKey": "not-needed",
      "provider": "generic-chat-completion-api",
      "maxOutputTokens": 8192
    }
  ],
  "enableCompletionBell": true
}
"""


def droid(home: Path) -> Path:
    """``~/.factory/settings.json`` with a custom model of the person's own."""
    return write(home / ".factory" / "settings.json", DROID_SETTINGS)


OPENCLAW_JSON = """\
{
  // OpenClaw config (~/.openclaw/openclaw.json); JSON5 allows comments
  "models": {
    "mode": "merge",
    "providers": {
      "litellm": {
        "baseUrl": "http://localhost:4000/v1",
        "apiKey": "sk-litellm-local",
        "api": "openai-completions",
        "models": [{ "id": "llama-3.1-8b", "name": "Llama 3.1 8B", "contextWindow": 128000 }]
      }
    }
  },
  "agents": {
    "defaults": {
      "workspace": "~/.openclaw/workspace",
      "model": { "primary": "litellm/llama-3.1-8b", "fallbacks": ["litellm/llama-3.1-8b"] },
      "timeoutSeconds": 600
    }
  },
  "channels": { "whatsapp": { "allowFrom": ["+15555550123"] } },
  "meta": { "lastTouchedVersion": "2026.9.6" }
}
"""


def openclaw(home: Path) -> Path:
    """``~/.openclaw/openclaw.json`` (mode 0600, as OpenClaw writes it)."""
    return write(home / ".openclaw" / "openclaw.json", OPENCLAW_JSON, 0o600)


CRUSH_JSON = """\
{
  "$schema": "https://charm.land/crush.json",
  "providers": {
    "deepseek": {
      "type": "openai-compat",
      "base_url": "https://api.deepseek.com/v1",
      "api_key": "sk-deepseek-own",
      "models": [{ "id": "deepseek-chat", "name": "Deepseek V3", "context_window": 64000, "default_max_tokens": 5000 }]
    }
  },
  "models": { "large": { "model": "deepseek-chat", "provider": "deepseek", "max_tokens": 4000 } },
  "lsp": { "go": { "command": "gopls" } },
  "options": { "debug": false, "context_paths": ["CRUSH.md"] }
}
"""


def crush(home: Path) -> Path:
    """``~/.config/crush/crush.json``."""
    return write(home / ".config" / "crush" / "crush.json", CRUSH_JSON)


SAMPLES: dict[str, Callable[[Path], Path]] = {
    "aider": aider,
    "cline": cline_gen_c,
    "codex": codex,
    "continue": continue_dev,
    "crush": crush,
    "droid": droid,
    "gemini": gemini,
    "goose": goose,
    "hermes": hermes,
    "kilo": kilo,
    "kimi": kimi,
    "openclaw": openclaw,
    "opencode": opencode,
    "pi": pi,
    "qwen": qwen,
    "roo": roo,
    "vibe": vibe,
    "zed": zed,
}
"""Per registry name: write the tool's real-format sample under a HOME, return its main file. The shared field
cases (tests/adapters/test_openai_tools_cases.py) set every OpenAI-protocol tool up from here."""
