"""Gemini CLI adapter: .env lines, JSONC settings.json with comments, and what outranks conduit's files."""

from __future__ import annotations

from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync

from conduit.adapters.base import Env
from conduit.adapters.formats.textformats import dotenv_target, parse_jsonc, read_dotenv, set_dotenv
from conduit.daemon.sync.doctor import doctor


def test_fixture_survives_only_owned_keys_change(temp_home: Path) -> None:
    settings = toolsamples.gemini(temp_home)
    toolsamples.write_gemini_profile(temp_home, "https://gw.example.com/api/v1beta")
    lifecycle(temp_home)
    text = settings.read_text()
    before, after = parse_jsonc(toolsamples.GEMINI_SETTINGS, path=settings), parse_jsonc(text, path=settings)
    assert after["security"]["auth"]["selectedType"] == "gemini-api-key"
    after["security"]["auth"]["selectedType"] = "oauth-personal"
    assert after == before and list(after) == list(before)
    assert "// Gemini CLI user settings" in text and "// was: log in with Google" in text
    env_path = temp_home / ".gemini" / ".env"
    env_text = env_path.read_text()
    assert env_text.splitlines()[:2] == ["# Gemini CLI environment", "GOOGLE_CLOUD_PROJECT=my-project"]
    assert env_text.splitlines()[2] == "GEMINI_MODEL=gemini-2.5-pro"  # replaced in place (same value here)
    assert read_dotenv(env_text) == {"GOOGLE_CLOUD_PROJECT": "my-project", "GEMINI_MODEL": "gemini-2.5-pro",
                                     "GOOGLE_GEMINI_BASE_URL": "https://gw.example.com/api",
                                     "GEMINI_API_KEY": "sk-test-abc"}
    assert env_path.stat().st_mode & 0o777 == 0o600  # it holds the key now (was 0644)


def test_model_switch_rewrites_line_in_place(temp_home: Path) -> None:
    toolsamples.gemini(temp_home)
    toolsamples.write_gemini_profile(temp_home, model="gemini-2.5-flash")
    lifecycle(temp_home)
    lines = (temp_home / ".gemini" / ".env").read_text().splitlines()
    assert lines[2] == "GEMINI_MODEL=gemini-2.5-flash"


def test_flat_settings_format_of_older_versions(temp_home: Path) -> None:
    path = toolsamples.write(temp_home / ".gemini" / "settings.json",
                             '{\n  "theme": "Default",\n  "selectedAuthType": "oauth-personal"\n}\n')
    toolsamples.write_gemini_profile(temp_home)
    lifecycle(temp_home)
    doc = parse_jsonc(path.read_text(), path=path)
    assert doc == {"theme": "Default", "selectedAuthType": "gemini-api-key"}


def test_not_installed(temp_home: Path) -> None:
    toolsamples.write_gemini_profile(temp_home)
    (report,) = run_sync(temp_home).tools
    assert report.status == "not_found" and not (temp_home / ".gemini").exists()


def test_doctor_exported_variable_overrides(temp_home: Path) -> None:
    toolsamples.gemini(temp_home)
    toolsamples.write_gemini_profile(temp_home)
    run_sync(temp_home)
    environ = {"HOME": str(temp_home), "GEMINI_API_KEY": "AIza-exported-000000", "PATH": ""}
    rep = doctor(None, Env(environ, cwd=temp_home))
    eff = rep["tools"]["gemini"]["facts"]["effective"]
    assert eff["GEMINI_API_KEY"]["overrides_conduit"] and eff["GEMINI_API_KEY"]["source"] == "shell environment"
    assert "AIza-exported-000000" not in str(rep)
    assert not eff["GOOGLE_GEMINI_BASE_URL"]["overrides_conduit"]
    assert eff["GOOGLE_GEMINI_BASE_URL"]["value"] == "https://gw.example.com/api"
    assert any(w.startswith("gemini: GEMINI_API_KEY") for w in rep["warnings"])


def test_doctor_project_env_file_hides_ours(temp_home: Path) -> None:
    toolsamples.gemini(temp_home)
    toolsamples.write_gemini_profile(temp_home)
    run_sync(temp_home)
    project = temp_home / "work" / "app"
    toolsamples.write(project.parent / ".env", "GEMINI_MODEL=local-model\n")
    facts = doctor(None, Env({"HOME": str(temp_home), "PATH": ""}, cwd=project))["tools"]["gemini"]["facts"]
    assert facts["env_file_used"] == str(project.parent / ".env")
    assert facts["effective"]["GEMINI_MODEL"]["value"] == "local-model"
    assert facts["effective"]["GEMINI_API_KEY"]["overrides_conduit"]  # the project .env hides ours entirely


def test_dotenv_escaped_quote_reads_back_and_round_trips() -> None:
    text = '# mine\nexport A=1 # keep\nK="q\\"uote"\n'
    assert read_dotenv(text) == {"A": "1", "K": 'q"uote'}  # python-dotenv's reading, escapes understood
    assert set_dotenv(text, {"K": 'q"uote'}) == text  # already right: not a byte changes
    out = set_dotenv(text, {"K": 'new "v\\al', "B": "x y"})
    assert out.startswith('# mine\nexport A=1 # keep\nK="')  # other lines, comments and order kept
    assert read_dotenv(out) == {"A": "1", "K": 'new "v\\al', "B": "x y"}
    assert set_dotenv(out, {"K": None}) == '# mine\nexport A=1 # keep\nB="x y"\n'


def test_dotenv_diff_masks_key_structurally() -> None:
    target = dotenv_target(Path("x/.env"), {}, secret_keys=("GEMINI_API_KEY",))
    masked = target.mask('GEMINI_API_KEY="AIza\\"secret0123456789"\nGEMINI_MODEL=m\n')
    assert "secret0123456789" not in masked and "GEMINI_MODEL=m" in masked


def test_a_trailing_comma_gemini_refuses_is_reported_with_its_line(temp_home: Path) -> None:
    """Gemini CLI reads settings.json with comments but not trailing commas (0.61 exits 52, "Expected
    double-quoted property name in JSON"): such a file is an error with its line, left as it is."""
    bad = toolsamples.GEMINI_SETTINGS.replace('"vimMode": true\n', '"vimMode": true, // mine\n')
    settings = toolsamples.write(temp_home / ".gemini" / "settings.json", bad)
    toolsamples.write_gemini_profile(temp_home)
    (report,) = run_sync(temp_home).tools
    assert report.status == "error", report
    message = report.message or ""
    assert f"{settings}:4: a trailing comma, which Gemini CLI refuses" in message and "remove the comma" in message
    assert settings.read_text() == bad
    assert doctor(temp_home / ".config" / "conduit" / "profile.toml", env=Env())["tools"]["gemini"]["state"] == "error"
    fixed = toolsamples.GEMINI_SETTINGS.replace('"vimMode": true\n', '"vimMode": true // commas in comments, ok\n')
    toolsamples.write(settings, fixed)
    (report,) = run_sync(temp_home).tools
    assert report.status == "changed", report.message
