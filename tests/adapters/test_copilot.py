"""GitHub Copilot CLI: configured by environment only. ``plan`` writes nothing, ``run_env`` gives one session the
profile's provider variables, doctor says how it is configured and which exported variables compete."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.toolfiles import run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.copilot import Copilot
from conduit.daemon.sync.doctor import doctor

KEY = "sk-copilot-0123456789abcdef"


def settings(**kw: object) -> ToolSettings:
    base = {"tool": "copilot", "channel": "gw", "root": Root("https://gw.example.com/api"), "key": KEY,
            "model": "m1"}
    return ToolSettings(**{**base, **kw})  # type: ignore[arg-type]


def env(**environ: str) -> Env:
    return Env({"HOME": os.environ["HOME"], **environ})


def test_plan_writes_nothing_and_run_env_says_everything(temp_home: Path) -> None:
    a = Copilot()
    assert a.configured_by == "environment" and a.plan(settings(), env()) == []
    assert a.run_env(settings(), env()) == {
        "COPILOT_PROVIDER_BASE_URL": "https://gw.example.com/api/v1",  # the CLI appends /chat/completions
        "COPILOT_PROVIDER_TYPE": "openai", "COPILOT_PROVIDER_API_KEY": KEY, "COPILOT_MODEL": "m1",
        "COPILOT_PROVIDER_BEARER_TOKEN": None, "COPILOT_PROVIDER_API_KEY_COMMAND": None,
        "COPILOT_PROVIDER_MODEL_ID": None, "COPILOT_PROVIDER_WIRE_MODEL": None,
        "COPILOT_PROVIDER_MAX_PROMPT_TOKENS": None, "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS": None}


def test_run_env_limits_version_and_no_key() -> None:
    got = Copilot().run_env(settings(root=Root("http://127.0.0.1:8000", "v4"), key=None, context_window=131072,
                                     max_output_tokens=8192), env())
    assert got["COPILOT_PROVIDER_BASE_URL"] == "http://127.0.0.1:8000/v4"
    assert got["COPILOT_PROVIDER_API_KEY"] == "no-key-needed"
    assert (got["COPILOT_PROVIDER_MAX_PROMPT_TOKENS"], got["COPILOT_PROVIDER_MAX_OUTPUT_TOKENS"]) == ("131072", "8192")


def test_outranks_names_exported_variables_that_differ() -> None:
    a = Copilot()
    same = {k: v for k, v in a.run_env(settings(), env()).items() if v is not None}
    assert a.outranks(settings(), env(**same)) == []  # after eval "$(conduit env copilot --show-key)"
    found = a.outranks(settings(), env(COPILOT_MODEL="other", COPILOT_PROVIDER_BEARER_TOKEN="t0k3n-secret-value"))
    assert [b.fix.split(",")[0] for b in found] == ["unset COPILOT_PROVIDER_BEARER_TOKEN", "unset COPILOT_MODEL"]
    assert all(b.state == "overridden" and "t0k3n" not in b.why + b.fix for b in found)


def test_inspect_says_environment_only_and_masks_keys() -> None:
    facts = Copilot().inspect(env(COPILOT_PROVIDER_API_KEY=KEY, COPILOT_MODEL="m9"))
    assert "conduit run copilot" in facts.summary
    assert facts.details["configured_by"] == "environment"
    assert facts.details["exported"] == {"COPILOT_PROVIDER_API_KEY": "sk-...cdef", "COPILOT_MODEL": "m9"}
    assert KEY not in json.dumps(facts.as_dict())


def test_sync_writes_nothing_and_doctor_reports_competing(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_profile(temp_home, tools=("copilot",))
    before = sorted(p for p in temp_home.rglob("*") if p.is_file())
    report = run_sync(temp_home)
    assert [t.status for t in report.tools] == ["unchanged"] and not report.tools[0].results
    assert sorted(p for p in temp_home.rglob("*") if p.is_file() and "conduit" not in p.parts) == \
        [p for p in before if "conduit" not in p.parts]
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", "https://elsewhere.example.com/v1")
    entry = doctor(env=Env())["tools"]["copilot"]
    assert entry["state"] == "overridden" and "COPILOT_PROVIDER_BASE_URL" in entry["why"]
    assert "conduit run copilot" in entry["fix"]
