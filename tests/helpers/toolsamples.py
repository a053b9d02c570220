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


SAMPLES: dict[str, Callable[[Path], Path]] = {
    "aider": aider,
    "cline": cline_gen_c,
    "codex": codex,
    "continue": continue_dev,
    "gemini": gemini,
    "opencode": opencode,
}
"""Per registry name: write the tool's real-format sample under a HOME, return its main file. The shared field
cases (tests/adapters/test_openai_tools_cases.py) set every OpenAI-protocol tool up from here."""
