"""Field cases (docs/cases.md) for every OpenAI-protocol adapter, through the shared code.

The tools come from the registry (every adapter with ``protocol = "openai"``), their sample files from
``toolsamples.SAMPLES``, and what each tool will send from the adapter's own ``client_view``: a new OpenAI tool
runs every case here without editing this file. Each case runs for each of them: base URLs (C02-C05, C13, /v4),
keys (C06, C07, C08, C14), file modes (new key files 0600, C17-style tightening), symlinks, the lifecycle
(second sync writes nothing), and the real-client test: the ``openai`` SDK, configured only from what the
adapter's files say, reaches a loopback gateway under ``/api`` at the path the tool would request.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from helpers import toolsamples
from helpers.gateways import COMPLETION, RESPONSE, Gateway
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Adapter, ClientView, Env
from conduit.adapters.registry import ADAPTERS


@dataclass(frozen=True)
class Tool:
    """One OpenAI-protocol adapter and its sample files."""

    name: str
    adapter: Adapter

    def setup(self, home: Path) -> Path:
        """Write the tool's sample files under ``home``; returns its main file."""
        assert self.name in toolsamples.SAMPLES, f"add a sample for {self.name} to tests/helpers/toolsamples.py SAMPLES"
        return toolsamples.SAMPLES[self.name](home)

    def read(self, home: Path) -> ClientView:
        """What the tool will send, from its files under ``home`` (the adapter's ``client_view``)."""
        view = self.adapter.client_view(Env(dict(os.environ, HOME=str(home)), cwd=home))
        assert view is not None, f"{self.name}: client_view found no OpenAI client settings after a sync"
        return view

    def key_files(self, home: Path) -> tuple[Path, ...]:
        """The files that hold the key after a sync."""
        return self.read(home).key_files


# A tool configured only by its environment (Copilot) has no file to set up: tests/adapters/test_copilot.py.
TOOLS = [Tool(name, a) for name, a in ADAPTERS.items() if a.protocol == "openai" and a.configured_by == "files"]
ids = [t.name for t in TOOLS]


def setup_sync(home: Path, tool: Tool, base_url: str = "https://gw.example.com/api", **kw) -> ClientView:
    tool.setup(home)
    write_profile(home, base_url, tools=(tool.name,), **kw)
    lifecycle(home)
    return tool.read(home)


# ---------------------------------------------------------------------------------------------- base URLs

URL_CASES = [
    ("C02 root gets /v1", "https://GW.example.com/api", "https://gw.example.com/api/v1"),
    ("already /v1", "https://gw.example.com/api/v1", "https://gw.example.com/api/v1"),
    ("C03 pasted endpoint", "https://gw.example.com/v1/chat/completions", "https://gw.example.com/v1"),
    ("C04 trailing slash", "https://gw.example.com/api/v1/", "https://gw.example.com/api/v1"),
    ("C04 double slash", "https://gw.example.com/api//", "https://gw.example.com/api/v1"),
    ("C05 trailing space", "https://gw.example.com/api ", "https://gw.example.com/api/v1"),
    ("C13 query dropped", "https://gw.example.com/api?utm_source=blog&utm_medium=x", "https://gw.example.com/api/v1"),
    ("v4 kept", "https://gw.example.com/api/v4", "https://gw.example.com/api/v4"),
]


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
@pytest.mark.parametrize(("case", "raw", "expected"), URL_CASES, ids=[c[0] for c in URL_CASES])
def test_base_url_cases(temp_home: Path, tool: Tool, case: str, raw: str, expected: str) -> None:
    wrote = setup_sync(temp_home, tool, raw)
    assert wrote.base_url.rstrip("/") == expected
    assert "//" not in wrote.base_url.split("://", 1)[1]
    assert "?" not in wrote.base_url and " " not in wrote.base_url


# --------------------------------------------------------------------------------------------------- keys


def skip_key_from_environment(tool: Tool, wrote: ClientView) -> None:
    """Skip a key case for a tool whose client reads its key from an environment variable or keychain, never
    from a file (``ClientView.key_env``: Zed), so conduit delivers no key to it."""
    if wrote.key_env:
        pytest.skip(f"{tool.name} reads its key from ${wrote.key_env} or its keychain: conduit writes no key")


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
@pytest.mark.parametrize(("case", "key_text"), [("C06 newline", "sk-test-abc\n"), ("C14 bearer", "Bearer sk-test-abc")])
def test_key_cleaned(temp_home: Path, tool: Tool, case: str, key_text: str) -> None:
    wrote = setup_sync(temp_home, tool, key_text=key_text)
    skip_key_from_environment(tool, wrote)
    assert wrote.key == "sk-test-abc"


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
@pytest.mark.parametrize("key_text", ["sk-test-ab\ncd", "sk-test-abc\u2211def"], ids=["C07", "C08"])
def test_bad_key_writes_nothing(temp_home: Path, tool: Tool, key_text: str) -> None:
    tool.setup(temp_home)
    write_profile(temp_home, tools=(tool.name,), key_text=key_text)
    before = {p: p.read_bytes() for p in temp_home.rglob("*") if p.is_file()}
    (report,) = run_sync(temp_home).tools
    assert report.status == "error"
    assert "sk-test-ab" not in (report.message or "")
    after = {p: p.read_bytes() for p in temp_home.rglob("*") if p.is_file()}
    assert before == after


# ------------------------------------------------------------------------------------ file modes, symlinks


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
def test_key_files_are_0600(temp_home: Path, tool: Tool) -> None:
    skip_key_from_environment(tool, setup_sync(temp_home, tool))
    assert tool.key_files(temp_home), f"{tool.name}: client_view names no file holding the key"
    for path in tool.key_files(temp_home):
        assert "sk-test-abc" in path.read_text()
        assert path.stat().st_mode & 0o777 == 0o600, path


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
def test_loose_key_file_tightened(temp_home: Path, tool: Tool) -> None:
    tool.setup(temp_home)
    write_profile(temp_home, tools=(tool.name,))
    run_sync(temp_home)
    for path in tool.key_files(temp_home):
        path.chmod(0o644)
    write_profile(temp_home, tools=(tool.name,), key_text="sk-test-rotated")  # rotation rewrites key files
    run_sync(temp_home)
    for path in tool.key_files(temp_home):
        assert "sk-test-rotated" in path.read_text()
        assert path.stat().st_mode & 0o777 == 0o600, path


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
def test_symlinked_file_written_through(temp_home: Path, tool: Tool) -> None:
    main = tool.setup(temp_home)
    assert isinstance(main, Path)
    dotfiles = temp_home / "dotfiles" / main.name
    dotfiles.parent.mkdir()
    os.replace(main, dotfiles)
    main.symlink_to(dotfiles)
    write_profile(temp_home, tools=(tool.name,))
    lifecycle(temp_home)
    assert main.is_symlink() and main.resolve() == dotfiles.resolve()
    assert "gw.example.com" in dotfiles.read_text()
    assert tool.read(temp_home).base_url.rstrip("/") == "https://gw.example.com/api/v1"


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
def test_model_change_moves_only_model(temp_home: Path, tool: Tool) -> None:
    setup_sync(temp_home, tool)
    write_profile(temp_home, tools=(tool.name,), model="glm-4.6")
    lifecycle(temp_home)
    assert tool.read(temp_home).model == "glm-4.6"


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
def test_dry_run_writes_nothing_and_masks_key(temp_home: Path, tool: Tool) -> None:
    from conduit.adapters.base import Env
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.sync.engine import sync

    tool.setup(temp_home)
    write_profile(temp_home, tools=(tool.name,))
    before = {p: p.read_bytes() for p in temp_home.rglob("*") if p.is_file()}
    report = sync(load_profile(temp_home / ".config/conduit/profile.toml"), dry_run=True, env=Env())
    (tr,) = report.tools
    assert tr.status == "changed"
    diff = "".join(r.diff for r in tr.results)
    assert diff and "sk-test-abc" not in diff
    assert before == {p: p.read_bytes() for p in temp_home.rglob("*") if p.is_file()}


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
def test_not_installed_is_reported_not_created(temp_home: Path, tool: Tool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(temp_home / "empty-bin"))  # no `aider` on PATH
    write_profile(temp_home, tools=(tool.name,))
    (report,) = run_sync(temp_home).tools
    assert report.status == "not_found" and f"[tools.{tool.name}]" in (report.message or "")


# ------------------------------------------------------------------------------------------ real clients

@pytest.fixture
def gateway_factory() -> Iterator[Callable[[str], Gateway]]:
    made: list[Gateway] = []

    def make(version: str) -> Gateway:
        made.append(Gateway({f"/api/{version}/chat/completions": COMPLETION, f"/api/{version}/responses": RESPONSE}))
        return made[-1]

    yield make
    for gw in made:
        gw.close()


REAL_INPUTS = [("{}/api", "v1"), ("{}/api/v1", "v1"), ("{}/api/", "v1"), ("{}/api/v1/", "v1"),
               ("{}/api/v4", "v4"), ("{}/api/v4/", "v4")]


@pytest.mark.parametrize("tool", TOOLS, ids=ids)
@pytest.mark.parametrize(("raw", "version"), REAL_INPUTS, ids=[r[0][2:] + "-" + r[1] for r in REAL_INPUTS])
def test_real_openai_client_reaches_gateway(temp_home: Path, gateway_factory, tool: Tool, raw: str,
                                            version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    gw = gateway_factory(version)
    wrote = setup_sync(temp_home, tool, raw.format(gw.url))
    if wrote.key_env:  # the tool reads its key from the environment (Zed): give it one, as a person would
        monkeypatch.setenv(wrote.key_env, "sk-test-abc")
        wrote = tool.read(temp_home)
    client = openai.OpenAI(base_url=wrote.base_url, api_key=wrote.key, max_retries=0)
    if wrote.endpoint == "responses":
        client.responses.create(model=wrote.model, input="x")
    else:
        client.chat.completions.create(model=wrote.model, messages=[{"role": "user", "content": "x"}])
    assert gw.calls() == [("POST", f"/api/{version}/{wrote.endpoint}", "Bearer sk-test-abc")]
