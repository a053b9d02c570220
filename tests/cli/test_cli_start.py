"""How much of conduit a command loads: the root group imports a command's module only when it runs, so
``conduit --help`` lists everything from the table without importing a command, and the profile path
(``sync``, ``doctor``, ``use``, ``init``) never loads the agent, vLLM, planner or bench code.

Real processes running the console script's entry point under a temporary HOME; what they imported is their
``sys.modules`` at exit (``-X importtime`` misses modules loaded through ``importlib.import_module``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from helpers.toolfiles import claude_settings, run_sync, write_profile

from conduit.daemon.cli.app import load_command
from conduit.daemon.cli.commands import COMMANDS

HEAVY = re.compile(r"^(conduit\.daemon\.(agent|vllm|plan|bench)|httpx|aiohttp)(\.|$)")
COMMAND_MODULES = {f"conduit.daemon.cli.{e.module}" for e in COMMANDS.values()}


WRAPPER = """import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from conduit.daemon.cli.entry import main
sys.exit(main())
"""


def run_imports(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the console script's entry point with ARGS under ``home``, as ``conduit ARGS`` does; returns the
    process and the names in its ``sys.modules`` when it exited."""
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1")
    out = home.parent / "modules.json"
    r = subprocess.run([sys.executable, "-c", WRAPPER, str(out), *args], capture_output=True, text=True, env=env,
                       timeout=60, cwd=home)
    names = set(json.loads(out.read_text()))
    out.unlink()
    return r, names


def test_help_lists_every_command_without_importing_one(temp_home: Path) -> None:
    r, names = run_imports(temp_home, "--help")
    assert r.returncode == 0, r.stderr[-2000:]
    for name, entry in COMMANDS.items():
        line = re.search(rf"^\W*{re.escape(name)} +(.+?)\W*$", r.stdout, re.M)
        assert line is not None, f"{name} missing from --help:\n{r.stdout}"
        assert entry.help.startswith(line.group(1).strip()), (name, line.group(1))
    assert not names & COMMAND_MODULES, names & COMMAND_MODULES
    assert not {n for n in names if HEAVY.match(n)}


@pytest.mark.parametrize("args", [("sync",), ("sync", "--dry-run"), ("doctor",), ("doctor", "--json"),
                                  ("use", "claude-3-5-haiku-20241022"), ("init", "--print"), ("key", "list"),
                                  ("sync", "--help")])
def test_profile_path_loads_no_agent_vllm_plan_or_bench(temp_home: Path, args: tuple[str, ...]) -> None:
    write_profile(temp_home, tools=("claude_code",))
    claude_settings(temp_home, {"permissions": {"allow": ["Bash"]}})
    if args[0] == "doctor":
        run_sync(temp_home)  # in sync, so doctor exits 0
    r, names = run_imports(temp_home, *args)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert sorted(n for n in names if HEAVY.match(n)) == []
    if args == ("sync",):  # it really synced
        env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
        assert env["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"
        assert names & COMMAND_MODULES == {"conduit.daemon.cli.sync"}


# What the commands a person waits on must not load (bench/cli.py measures them): rich's help formatter
# (typer.rich_utils: rich's markdown, traceback and pygments) anywhere; for `--help`, rich and pydantic at all; for
# a sync of one tool, the other tools' adapter modules and the file formats only they use (ruamel.yaml: Continue,
# Aider; psutil: CC Switch), the [vllm] models of a profile without [vllm], httpx, and ctypes (a no-op writes nothing).
RICH_HELP = re.compile(r"^(typer\.rich_utils|rich\.markdown|markdown_it|pygments)(\.|$)")
ONE_TOOL_SYNC = re.compile(r"^(conduit\.adapters\.(aider|cc_switch|cline|codex|continue_dev|gemini|"
                           r"opencode)|ruamel|psutil|conduit\.daemon\.config\.(vllm|cluster)|httpx|ctypes)(\.|$)")


def test_help_is_plain_and_loads_neither_rich_nor_pydantic(temp_home: Path) -> None:
    r, names = run_imports(temp_home, "--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: conduit [OPTIONS] COMMAND"), r.stdout[:500]
    assert sorted(n for n in names if re.match(r"^(rich|pydantic|pydantic_core)(\.|$)", n)) == []
    r, names = run_imports(temp_home, "sync", "--help")  # a command's own help: plain too, no rich formatter
    assert r.returncode == 0 and "--dry-run" in r.stdout and "\u256d" not in r.stdout, r.stdout[:500]
    assert sorted(n for n in names if RICH_HELP.match(n)) == []


def test_sync_of_one_tool_loads_only_that_adapter(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    claude_settings(temp_home, {"permissions": {"allow": ["Bash"]}})
    run_sync(temp_home)  # the measured case: nothing left to change
    r, names = run_imports(temp_home, "sync")
    assert r.returncode == 0 and "unchanged" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert "conduit.adapters.claude_code" in names
    assert sorted(n for n in names if ONE_TOOL_SYNC.match(n) or RICH_HELP.match(n)) == []


def test_lazy_registry_table_matches_its_type_checked_twin() -> None:
    """adapters/registry.py names each adapter twice: ``_TABLE`` (imported lazily) and ``_CHECKED`` (what mypy
    checks against the Adapter protocol); both list the same tools, and each ``module:Class`` is that class."""
    import ast

    from conduit.adapters import registry

    tree = ast.parse(Path(registry.__file__).read_text())
    checked = next(n.value for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)
                   and isinstance(n.target, ast.Name) and n.target.id == "_CHECKED")
    assert isinstance(checked, ast.Dict)
    pairs = {ast.literal_eval(k): v.func.id for k, v in zip(checked.keys, checked.values, strict=True)
             if k is not None and isinstance(v, ast.Call) and isinstance(v.func, ast.Name)}
    assert pairs == {name: spec.split(":")[1] for name, spec in registry._TABLE.items()}


def test_a_command_loads_its_own_module(temp_home: Path) -> None:
    """The lazy group does import what runs: `plan --help` loads the planner's CLI module (and no other)."""
    r, names = run_imports(temp_home, "plan", "--help")
    assert r.returncode == 0 and "--gpu-memory" in r.stdout, r.stderr[-2000:]
    assert names & COMMAND_MODULES == {"conduit.daemon.cli.plan"}


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").split("\n\n")[0].split())


def test_table_matches_the_commands_the_modules_define() -> None:
    """Every line of COMMANDS is a command its module defines, with that command's own help line; every
    top-level command a module defines is in the table."""
    for name, entry in COMMANDS.items():
        assert _first_paragraph(load_command(name, entry).help) == _first_paragraph(entry.help), name
    for module in {e.module for e in COMMANDS.values()}:
        defined = typer.main.get_group(importlib.import_module(f"conduit.daemon.cli.{module}").commands).commands
        assert {n for n, e in COMMANDS.items() if e.module == module} == set(defined), module


def test_typo_suggests_a_lazy_command(temp_home: Path) -> None:
    r, _ = run_imports(temp_home, "snyc")
    assert r.returncode == 3
    assert "Did you mean 'sync'?" in r.stderr


def test_root_option_reaches_a_lazy_command(temp_home: Path) -> None:
    """`--profile` given before a lazily loaded command still reaches it."""
    other = write_profile(temp_home, tools=("claude_code",)).rename(temp_home / "other.toml")
    r, _ = run_imports(temp_home, "--profile", str(other), "doctor", "--json")
    assert json.loads(r.stdout)["profile"]["path"] == str(other), r.stderr[-2000:]


@pytest.mark.parametrize("argv", [("vllm", "statsu"), ("key", "lst"), ("mcp", "lst"), ("service", "instal")])
def test_a_mistyped_subcommand_is_suggested_once(temp_home: Path, argv: tuple[str, ...]) -> None:
    """click suggests the subcommand itself; typer's own suggestion, inherited by the sub-apps, said it again."""
    r, _ = run_imports(temp_home, *argv)
    assert r.returncode != 0
    assert r.stderr.count("Did you mean") == 1, r.stderr
