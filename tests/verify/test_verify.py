"""``conduit verify``: real subprocesses of ``conduit verify`` running stand-in tools (small Python scripts put on
PATH under a tool's binary name, reading the config conduit wrote in $HOME as the real tool does and sending one
HTTP request), a real sandbox and canary gateway, and checksums of the whole temporary HOME before and after.

The test marked ``realtools`` runs the seven real CLIs from the real-tool tier's cache (tests/realtools/).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.paths import TESTS
from helpers.toolfiles import write_profile

from conduit.adapters.base import Root, ToolSettings
from conduit.daemon.verify.gateway import Recorded
from conduit.daemon.verify.runner import Sandbox
from conduit.daemon.verify.verdicts import Expected, judge
from conduit.daemon.verify.verify import canary_settings, expected_prefix

KEY = "sk-verify-0123456789abcdef"
MODEL = "gw-model-1"

# A stand-in Gemini CLI: folder trust from ~/.gemini/trustedFolders.json (exit 41 when untrusted), the first
# .env it finds, an exported variable beating the file, then POST .../v1beta/models/M:generateContent.
FAKE_GEMINI = '''
import json, os, sys, urllib.request
if "--version" in sys.argv:
    print("0.61.0"); sys.exit(0)
home = os.environ.get("GEMINI_CLI_HOME") or os.environ["HOME"]
try:
    trusted = json.load(open(os.path.join(home, ".gemini", "trustedFolders.json")))
except OSError:
    trusted = {}
if trusted.get(os.getcwd()) != "TRUST_FOLDER":
    print("must specify the GEMINI_API_KEY environment variable", file=sys.stderr); sys.exit(41)
env_file, d = os.path.join(home, ".gemini", ".env"), os.getcwd()
while True:  # the real findEnvFile: <dir>/.gemini/.env from the working directory up, then the home one
    if os.path.isfile(os.path.join(d, ".gemini", ".env")):
        env_file = os.path.join(d, ".gemini", ".env"); break
    if os.path.dirname(d) == d:
        break
    d = os.path.dirname(d)
values = {}
for line in open(env_file):
    k, _, v = line.strip().partition("=")
    values[k] = v.strip('"')
get = lambda k: os.environ.get(k) or values.get(k)
url = get("GOOGLE_GEMINI_BASE_URL") + "/v1beta/models/" + get("GEMINI_MODEL") + ":generateContent"
req = urllib.request.Request(url, data=b'{"contents": []}', headers={"x-goog-api-key": get("GEMINI_API_KEY"),
                             "content-type": "application/json"})
urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10).read()
print("ok")
'''

# A stand-in Claude Code: the env object of $CLAUDE_CONFIG_DIR/settings.json (or ~/.claude), beating the shell.
FAKE_CLAUDE = '''
import json, os, sys, urllib.request
if "--version" in sys.argv:
    print("2.1.197 (Claude Code)"); sys.exit(0)
d = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.environ["HOME"], ".claude")
env = {**os.environ, **json.load(open(os.path.join(d, "settings.json"))).get("env", {})}
body = json.dumps({"model": env["ANTHROPIC_MODEL"], "max_tokens": 8,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()
req = urllib.request.Request(env["ANTHROPIC_BASE_URL"] + "/v1/messages?beta=true", data=body,
                             headers={"authorization": "Bearer " + env["ANTHROPIC_AUTH_TOKEN"],
                                      "content-type": "application/json"})
urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10).read()
open(os.path.join(d, "touched-by-claude"), "w").write("the tool writes in its own dir")
'''


def _tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (symlinks by their target text)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def _fake_bin(home: Path) -> Path:
    """A directory (outside HOME) holding the stand-in ``gemini`` and ``claude``."""
    bindir = home.parent / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in (("gemini", FAKE_GEMINI), ("claude", FAKE_CLAUDE)):
        p = bindir / name
        p.write_text(f"#!{sys.executable}\n{textwrap.dedent(body)}")
        p.chmod(0o755)
    return bindir


def _profile(home: Path, tools: tuple[str, ...], extra: str = "") -> Path:
    """The test profile: channel ``gw`` speaking openai, anthropic and gemini; a dirty key file (BOM, ``Bearer``,
    trailing space, CRLF) holding ``KEY``; ``tools`` enabled."""
    path = write_profile(home, "https://gw.example.com/api", key_text=f"\ufeffBearer {KEY} \r\n", tools=tools,
                         model=MODEL, small_model=None, extra=extra)
    path.write_text(path.read_text().replace('protocols = ["openai", "anthropic"]',
                                             'protocols = ["openai", "anthropic", "gemini"]'))
    return path


def _setup(home: Path, *, trusted: bool = True, tools: tuple[str, ...] = ("gemini", "claude_code")) -> Path:
    """Profile, the tools' user dirs, a project folder (trusted by Gemini or not); returns the project."""
    _profile(home, tools)
    project = home / "src" / "proj"
    project.mkdir(parents=True)
    (project / "main.py").write_text("print('hi')\n")
    gem = home / ".gemini"
    gem.mkdir()
    (gem / "settings.json").write_text('{\n  // the user\'s own\n  "ui": {"theme": "dark"}\n}\n')
    (gem / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"} if trusted else {}))
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text('{"env": {"ANTHROPIC_BASE_URL": "https://old.example/x"}}\n')
    return project


def _verify(home: Path, project: Path, *args: str, **env: str) -> tuple[int, str, str]:
    environ = dict(os.environ, HOME=str(home), PATH=f"{_fake_bin(home)}{os.pathsep}{os.environ['PATH']}", **env)
    proc = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "verify", *args], cwd=project,
                          env=environ, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def _by_tool(stdout: str) -> dict[str, dict]:
    return {c["tool"]: c for c in json.loads(stdout)}


def test_both_ok_and_the_user_files_unchanged(temp_home: Path) -> None:
    project = _setup(temp_home)
    before = _tree_digest(temp_home)
    rc, out, err = _verify(temp_home, project, "--json", "--timeout", "30")
    assert rc == 0, (out, err)
    checks = _by_tool(out)
    assert set(checks) == {"gemini", "claude_code"}
    gem, claude = checks["gemini"], checks["claude_code"]
    assert gem["verdict"] == "ok" and claude["verdict"] == "ok"
    assert gem["path"] == f"/api/v1beta/models/{MODEL}:generateContent" and gem["auth_header"] == "x-goog-api-key"
    assert claude["path"] == "/api/v1/messages" and claude["auth_header"] == "authorization"
    assert gem["model"] == claude["model"] == MODEL
    assert gem["key_fingerprint"] == claude["key_fingerprint"] == "sk-...cdef"
    assert gem["version"] == "0.61.0" and claude["version"] == "2.1.197"
    assert KEY not in out and KEY not in err
    assert _tree_digest(temp_home) == before  # the stand-in wrote in ITS ~/.claude: the temporary one


def test_a_file_found_by_walking_up_is_shadowed(temp_home: Path) -> None:
    """Gemini CLI finds ``.gemini/.env`` from the working directory up, so in a project under HOME it reaches the
    user's own ``~/.gemini/.env`` (the real gateway): inside the sandbox the copy is laid over it."""
    if not Sandbox.create().isolated:
        pytest.skip("no mount namespace here (unshare not permitted): the copy cannot be laid over the user's file")
    project = _setup(temp_home, tools=("gemini",))
    real = temp_home / ".gemini" / ".env"
    real.write_text(f"GOOGLE_GEMINI_BASE_URL=https://gw.example.com/api\nGEMINI_API_KEY={KEY}\n"
                    f"GEMINI_MODEL={MODEL}\n")
    before = _tree_digest(temp_home)
    rc, out, err = _verify(temp_home, project, "--json")
    assert rc == 0, (out, err)
    assert _by_tool(out)["gemini"]["verdict"] == "ok"
    assert _tree_digest(temp_home) == before


def test_without_namespaces_a_walk_up_to_the_real_file_is_not_run(temp_home: Path) -> None:
    """Without a mount namespace the copy cannot be laid over ``~/.gemini/.env``: Gemini CLI would send the key
    to the real gateway, so verify does not run it and says why."""
    project = _setup(temp_home, tools=("gemini",))
    (temp_home / ".gemini" / ".env").write_text(f"GOOGLE_GEMINI_BASE_URL=https://gw.example.com/api\n"
                                                f"GEMINI_API_KEY={KEY}\nGEMINI_MODEL={MODEL}\n")
    rc, out, err = _verify(temp_home, project, "--json", CONDUIT_VERIFY_ISOLATION="none")
    assert rc == 1, (out, err)
    gem = _by_tool(out)["gemini"]
    assert gem["verdict"] == "not_run" and ".gemini/.env" in gem["detail"] and gem["seconds"] is None


def test_without_namespaces_an_exported_base_url_is_not_run(temp_home: Path) -> None:
    """With the network open, an exported base URL could take the real key to the real gateway (a review
    finding): verify does not run that tool and names the variable; the other tool still runs."""
    project = _setup(temp_home, tools=("gemini", "claude_code"))
    rc, out, err = _verify(temp_home, project, "--json", CONDUIT_VERIFY_ISOLATION="none",
                           GOOGLE_GEMINI_BASE_URL="https://real.example.com")
    gem, claude = _by_tool(out)["gemini"], _by_tool(out)["claude_code"]
    assert rc == 1 and gem["verdict"] == "not_run" and "GOOGLE_GEMINI_BASE_URL" in gem["detail"], (out, err)
    assert claude["verdict"] == "ok", claude


def test_table_output_and_remapped_tool_dir(temp_home: Path, tmp_path: Path) -> None:
    """An exported CLAUDE_CONFIG_DIR outside HOME is copied and remapped; the table names each tool."""
    project = _setup(temp_home, tools=("claude_code",))
    cfg = tmp_path / "claude-cfg"
    cfg.mkdir()
    (cfg / "settings.json").write_text('{"permissions": {}}\n')
    before = _tree_digest(tmp_path)
    rc, out, err = _verify(temp_home, project, "claude_code", CLAUDE_CONFIG_DIR=str(cfg))
    assert rc == 0, (out, err)
    assert "Claude Code" in out and "ok" in out and "/api/v1/messages" in out
    assert KEY not in out
    after = _tree_digest(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("bin")} == \
        {k: v for k, v in before.items() if not k.startswith("bin")}


def test_an_exported_model_wins_and_is_named(temp_home: Path) -> None:
    project = _setup(temp_home, tools=("gemini",))
    rc, out, err = _verify(temp_home, project, "--json", GEMINI_MODEL="gemini-2.5-pro")
    assert rc == 1, (out, err)
    gem = _by_tool(out)["gemini"]
    assert gem["verdict"] == "wrong_model" and gem["model"] == "gemini-2.5-pro"
    assert "GEMINI_MODEL" in gem["detail"] and gem["outranking"] == ["exported GEMINI_MODEL"]


def test_an_exported_key_wins_and_is_named_by_fingerprint_only(temp_home: Path) -> None:
    project = _setup(temp_home, tools=("gemini",))
    other = "sk-other-key-9876543210zz"
    rc, out, err = _verify(temp_home, project, "--json", GEMINI_API_KEY=other)
    assert rc == 1, (out, err)
    gem = _by_tool(out)["gemini"]
    assert gem["verdict"] == "wrong_key" and gem["key_fingerprint"] == "sk-...10zz"
    assert "GEMINI_API_KEY" in gem["detail"] and other not in out and KEY not in out


def test_gemini_in_an_untrusted_folder(temp_home: Path) -> None:
    project = _setup(temp_home, trusted=False, tools=("gemini",))
    rc, out, err = _verify(temp_home, project, "--json")
    assert rc == 1, (out, err)
    gem = _by_tool(out)["gemini"]
    assert gem["verdict"] == "untrusted_folder" and gem["exit_code"] == 41
    assert "[tools.gemini] trust" in gem["detail"]


def test_the_trust_option_counts_before_any_sync(temp_home: Path) -> None:
    """``[tools.gemini] trust = ["~/src/proj"]`` is what the next sync would write; in T, ``~`` still means the
    user's HOME (found by a new user: verify said "add it to trust" when it was there)."""
    project = _setup(temp_home, trusted=False, tools=("gemini",))
    p = temp_home / ".config" / "conduit" / "profile.toml"
    p.write_text(p.read_text().replace("[tools.gemini]", '[tools.gemini]\ntrust = ["~/src/proj"]'))
    before = (temp_home / ".gemini" / "trustedFolders.json").read_bytes()
    rc, out, err = _verify(temp_home, project, "--json")
    assert rc == 0, (out, err)
    assert _by_tool(out)["gemini"]["verdict"] == "ok"
    assert (temp_home / ".gemini" / "trustedFolders.json").read_bytes() == before  # only T got the trust


def test_a_named_tool_not_installed_fails(temp_home: Path) -> None:
    project = _setup(temp_home, tools=("gemini", "codex"))
    rc, out, err = _verify(temp_home, project, "codex", "--json")
    assert rc == 1, (out, err)
    assert _by_tool(out)["codex"]["verdict"] == "not_installed"


def test_bad_names_exit_3_and_a_bad_profile_exits_1_as_everywhere(temp_home: Path) -> None:
    project = _setup(temp_home, tools=("gemini",))
    assert _verify(temp_home, project, "nosuch")[0] == 3
    assert _verify(temp_home, project, "cc_switch")[0] == 3
    rc, _, err = _verify(temp_home, project, "aider")
    assert rc == 3 and "not enabled" in err
    (temp_home / ".config" / "conduit" / "profile.toml").write_text("version = [\n")
    rc, _, err = _verify(temp_home, project)
    assert rc == 1 and "profile.toml" in err


def test_canary_keeps_the_path_and_version() -> None:
    s = ToolSettings("codex", "gw", Root("https://taotoken.net/api", "v4"), KEY, model=MODEL)
    c = canary_settings(s, "http://127.0.0.1:47823")
    assert c.root.url == "http://127.0.0.1:47823/api" and c.root.openai_base().endswith("/api/v4")
    assert expected_prefix("codex", c) == "/api/v4/"
    assert expected_prefix("claude_code", c) == "/api/v1/"


REALTOOLS_SCRIPT = TESTS / "realtools" / "ensure_tools.sh"
# Decided at import time, before the autouse fixture points HOME at a temporary directory (as tests/realtools/
# and tests/vllm/ do): the tools' cache is the developer's, reused across runs.
TOOLS_ENV = {k: v for k, v in {"XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"),
                               "CONDUIT_TOOLS_CACHE": os.environ.get("CONDUIT_TOOLS_CACHE")}.items() if v}


def _real_tools_bin() -> Path:
    """The real-tool tier's cache (tests/realtools/ensure_tools.sh: installed or reused) -> its ``bin``; SKIPPED
    loudly when no package registry answers (exit 3), as the tier does."""
    proc = subprocess.run(["bash", str(REALTOOLS_SCRIPT)], capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, **TOOLS_ENV, CONDUIT_PYTHON=sys.executable))
    if proc.returncode == 3:
        pytest.skip(f"SKIPPED real tools: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Path(proc.stdout.strip().splitlines()[-1]) / "bin"


@pytest.mark.realtools
def test_verify_the_seven_real_tools(temp_home: Path) -> None:
    """Seven tools installed, Aider overridden by an exported AIDER_MODEL, Gemini in an
    untrusted folder: ``conduit verify --json`` reports each correctly and the user's files are unchanged."""
    bindir = _real_tools_bin()
    _profile(temp_home, (), extra=(
        "[tools.claude_code]\n[tools.codex]\ncreate = true\n[tools.gemini]\ncreate = true\n"
        "[tools.opencode]\ncreate = true\n[tools.continue]\ncreate = true\n[tools.cline]\n"
        'generation = "C"\n[tools.aider]\ncreate = true\n'))
    environ = dict(os.environ, HOME=str(temp_home), PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    synced = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], env=environ, capture_output=True,
                            text=True, timeout=120)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    project = temp_home / "src" / "untrusted"
    project.mkdir(parents=True)
    (project / "README.md").write_text("a project\n")
    before = _tree_digest(temp_home)
    proc = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "verify", "--json", "--timeout", "90"],
                          cwd=project, env=dict(environ, AIDER_MODEL="openai/exported-model"),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = _by_tool(proc.stdout)
    summary = {t: (c["verdict"], c["version"], c["path"], c["model"], c["seconds"]) for t, c in checks.items()}
    print(json.dumps(summary, indent=1))
    assert set(checks) == {"claude_code", "codex", "gemini", "opencode", "continue", "cline", "aider"}, summary
    for tool in ("claude_code", "codex", "opencode", "continue", "cline"):
        c = checks[tool]
        assert c["verdict"] == "ok", (tool, c)
        assert c["key_fingerprint"] == "sk-...cdef" and c["model"] == MODEL and c["version"], (tool, c)
    assert checks["claude_code"]["path"] == "/api/v1/messages"
    assert checks["codex"]["path"] == "/api/v1/responses"
    for tool in ("opencode", "continue", "cline"):
        assert checks[tool]["path"] == "/api/v1/chat/completions", checks[tool]
    aider = checks["aider"]
    assert aider["verdict"] == "wrong_model" and aider["model"] == "exported-model", aider
    assert "AIDER_MODEL" in aider["detail"]
    gem = checks["gemini"]
    assert gem["verdict"] == "untrusted_folder" and gem["exit_code"] in (41, 55), gem
    assert KEY not in proc.stdout and KEY not in proc.stderr
    assert _tree_digest(temp_home) == before


def _rec(path: str, model: str | None = MODEL, key: str | None = KEY) -> Recorded:
    return Recorded("POST", path, {}, {"model": model}, model, "authorization", key)


def test_judge_names_what_won(tmp_path: Path) -> None:
    """The verdicts that need no tool: a host named by an exported variable, a pasted path, a project file."""
    want = Expected("/api/v1/", KEY, MODEL)
    env = {"ANTHROPIC_BASE_URL": "https://other-gw.example.net/x"}
    v = judge("claude_code", want, [], exit_code=1, timed_out=False, stderr_tail="",
              dns_names=["api.anthropic.com", "other-gw.example.net"], environ=env, cwd=tmp_path)
    assert v.verdict == "went_elsewhere" and "other-gw.example.net" in v.detail and "ANTHROPIC_BASE_URL" in v.detail
    v = judge("claude_code", want, [], exit_code=1, timed_out=False, stderr_tail=f"401 bad key {KEY}",
              dns_names=["api.anthropic.com"], environ={}, cwd=tmp_path)
    assert v.verdict == "no_request" and KEY not in v.detail and "sk-...cdef" in v.detail
    v = judge("codex", want, [_rec("/api/v1/v1/responses")], exit_code=0, timed_out=False, stderr_tail="",
              dns_names=[], environ={}, cwd=tmp_path)
    assert v.verdict == "ok"  # the prefix holds; a doubled segment below it is the tool's own route
    v = judge("codex", want, [_rec("/v1/responses")], exit_code=0, timed_out=False, stderr_tail="",
              dns_names=[], environ={}, cwd=tmp_path)
    assert v.verdict == "wrong_path"
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text('model = "project-model"\n')
    v = judge("codex", want, [_rec("/api/v1/responses", model="project-model")], exit_code=0, timed_out=False,
              stderr_tail="", dns_names=[], environ={"OPENAI_MODEL": "x"}, cwd=tmp_path)
    assert v.verdict == "wrong_model" and ".codex/config.toml" in v.detail
    v = judge("codex", want, [], exit_code=None, timed_out=True, stderr_tail="", dns_names=[], environ={},
              cwd=tmp_path)
    assert v.verdict == "timeout"
