"""The table of ``conduit`` commands: each top-level name, the module under ``conduit.daemon.cli`` that
defines it, and its one help line for ``conduit --help``.

Nothing here imports a command module: the root group (``conduit.daemon.cli.app.LazyGroup``) imports a module
only when one of its commands runs (or its own ``--help`` is asked for), so ``conduit sync`` never loads the
bench, the agent, vLLM or the planner. A module that adds commands defines ``commands = typer.Typer()`` and
decorates its functions on it; a new top-level command needs one line here. Each help line must be the first
paragraph of the command's own help (its docstring, or its sub-app's ``help=``): tests/cli/test_cli_start.py
checks every line against the loaded command.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    """Where a top-level command lives (a module name under ``conduit.daemon.cli``) and its help line."""

    module: str
    help: str


# In the order ``conduit --help`` lists them.
COMMANDS: dict[str, Entry] = {
    "agent": Entry("agent", "Run the agent in the foreground: status API on a Unix socket, channel probes, GPU "
                            "sampling."),
    "status": Entry("agent", "Show channels, GPUs, vLLM and tools as the agent sees them. Exit 2 when the agent "
                             "does not answer."),
    "wait": Entry("agent", "Wait until conditions hold. Exit 0 ready, 1 timed out, 2 agent unreachable, 3 bad "
                           "arguments."),
    "bench": Entry("bench", "Load-test a channel with streaming requests over levels (concurrency or request "
                            "rate); find the saturation point."),
    "daemon": Entry("daemon", "Watch the profile, its key files and the tools' files; keep every tool in sync "
                              "(runs until stopped)."),
    "plan": Entry("plan", "Work out vLLM's memory ledger: weights, KV cache per token, capacity, concurrency, "
                          "and a verdict."),
    "init": Entry("init", "Write a starter profile (or one proposed from the tools already configured)."),
    "sync": Entry("sync", "Rewrite every tool's config from the profile (merge, never clobber). Shows a diff "
                          "per tool."),
    "doctor": Entry("sync", "Per tool: file found, version, in sync or drifted, higher-precedence overrides, "
                            "restart needs."),
    "models": Entry("models", "List the models a channel serves, with each one's context length where the server "
                              "says."),
    "use": Entry("sync", "Switch the model (and optionally the channel) in the profile, keeping its comments, "
                         "then sync."),
    "restore": Entry("sync", "Restore a tool's files from conduit's backups (the restore itself is backed up, so "
                             "it can be undone)."),
    "demo": Entry("sync", "Run the main job end to end in a throwaway HOME (real-format configs of all three "
                          "tools)."),
    "verify": Entry("verify", "Run each installed tool once against a loopback canary with conduit's config; "
                              "report what it sent."),
    "run": Entry("run", "Start a tool with the profile's settings for this session only; its own files are left "
                        "as they are."),
    "env": Entry("run", "Print the shell lines that give a tool the profile's settings: eval \"$(conduit env "
                        "copilot --show-key)\"."),
    "mcp": Entry("mcp", "List, add and remove the MCP servers the profile gives the tools (conduit mcp list "
                        "shows, per tool, whether it will load each one)."),
    "key": Entry("key", "Store, list and remove keys in conduit's secrets file (~/.config/conduit/secrets.toml, "
                        "mode 0600) or, with --keyring, in the OS keychain."),
    "service": Entry("daemon", "Install conduit's systemd user units."),
    "vllm": Entry("vllm", "Supervise the local vLLM server described by the profile's vllm table."),
}
