"""Root causes and the configuration/quantization families of start-up failures (docs/cases.md C27-C30), from
logs in vLLM 0.32's own wording. Each test quotes the source line its message comes from (a file in vLLM's
repository, or the library vLLM calls, and the raise)."""

from __future__ import annotations

import json
from pathlib import Path

from conduit.daemon.vllm.diagnose import diagnose
from conduit.daemon.vllm.rootcause import root_cause

BANNER = "(APIServer pid=70) INFO 12-02 04:00:00 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0\n"
TAIL = (
    "(EngineCore pid=77) ERROR 12-02 04:00:09 [core.py:1120] EngineCore failed to start.\n"
    "(EngineCore pid=77) ERROR 12-02 04:00:09 [core.py:1120] Traceback (most recent call last):\n"
    "(EngineCore pid=77) ERROR 12-02 04:00:09 [core.py:1120]   File \"/v/lib/python3.11/site-packages/vllm/"
    "v1/engine/core.py\", line 1110, in run_engine_core\n"
    "(EngineCore pid=77) ERROR 12-02 04:00:09 [core.py:1120] {cause}\n"
    "(APIServer pid=70) Traceback (most recent call last):\n"
    "(APIServer pid=70)   File \"/v/bin/vllm\", line 8, in <module>\n"
    # vllm/v1/engine/utils.py wait_for_engine_startup: raise RuntimeError("Engine core initialization failed. "
    # "See root cause above. " f"Failed core proc(s): {finished}" ...)
    "(APIServer pid=70) RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {{}}\n"
)


def _log(cause: str) -> str:
    return BANNER + TAIL.format(cause=cause)


def _model(tmp_path: Path, **cfg: object) -> str:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", **cfg}))
    return str(d)


def test_root_cause_skips_the_wrapper_and_prefers_the_engine_core() -> None:
    text = ("(APIServer pid=70) ERROR 12-02 04:00:01 [x.py:1] ValueError: api side complaint\n"
            + _log("ValueError: the engine's own reason"))
    rc = root_cause(text)
    assert rc is not None and rc.process == "EngineCore" and rc.message == "the engine's own reason"
    assert "See root cause above" not in rc.text


def test_validation_error_expands_to_the_value_error_line() -> None:
    # vllm/config/model.py is a pydantic dataclass: a ValueError in __post_init__ prints as
    # "1 validation error for ModelConfig" and "  Value error, <message> [type=value_error, ...]" below it.
    text = ("(APIServer pid=70) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
            "(APIServer pid=70)   Value error, Something specific went wrong. [type=value_error, "
            "input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n")
    rc = root_cause(text)
    assert rc is not None and rc.exception == "ValidationError"
    assert rc.message == "Something specific went wrong."
    d = diagnose(text, exit_code=1)
    assert d.kind == "exited" and "Something specific went wrong." in d.reason
    assert "validation error for" not in d.reason


def test_c27_heads_not_divisible_lists_only_sizes_passing_every_rule(tmp_path: Path) -> None:
    """docs/cases.md C27."""
    model = _model(tmp_path, num_attention_heads=40, num_key_value_heads=8, intermediate_size=27648,
                   hidden_size=5120, num_hidden_layers=64)
    # vllm/config/model.py verify_with_parallel_config: raise ValueError(f"Total number of attention heads
    # ({total_num_attention_heads}) must be divisible by tensor parallel size ({tensor_parallel_size}).")
    d = diagnose(_log("ValueError: Total number of attention heads (40) must be divisible by tensor parallel "
                      "size (3)."), exit_code=1, model=model)
    assert d.kind == "tensor_parallel" and "(40)" in d.reason and "(3)" in d.reason
    valid = [t for t in range(1, 41) if 40 % t == 0 and (8 % t == 0 if t < 8 else t % 8 == 0) and 27648 % t == 0]
    assert valid == [1, 2, 4, 8]
    assert "tensor_parallel_size to one of 1, 2, 4, 8 (" in d.fix  # 5, 10, 20, 40 divide the heads only


def test_heads_rule_without_a_local_config_says_what_is_known() -> None:
    d = diagnose(_log("ValueError: Total number of attention heads (40) must be divisible by tensor parallel "
                      "size (3)."), exit_code=1, model="Qwen/Qwen2.5-32B-Instruct")
    assert d.kind == "tensor_parallel" and "one of 1, 2, 4, 5, 8, 10, 20, 40 (the sizes dividing the 40" in d.fix


def test_private_repo_401_needs_a_token() -> None:
    # huggingface_hub utils/_http.py hf_raise_for_status: a 401 on a repository raises RepositoryNotFoundError
    # ("Repository Not Found for url: ... If you are trying to access a private or gated repo, make sure you are
    # authenticated. ... Invalid username or password.")
    text = _log("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-x)\n\n"
                "Repository Not Found for url: https://huggingface.co/acme/private-7b/resolve/main/config.json.\n"
                "Please make sure you specified the correct `repo_id` and `repo_type`.\nIf you are trying to "
                "access a private or gated repo, make sure you are authenticated. For more details, see "
                "https://huggingface.co/docs/huggingface_hub/authentication\nInvalid username or password.")
    d = diagnose(text, exit_code=1, model="acme/private-7b")
    assert d.kind == "hub_auth" and "HF_TOKEN" in d.fix and "acme/private-7b" in d.reason


def test_awq_group_size_misalignment_names_valid_sizes(tmp_path: Path) -> None:
    model = _model(tmp_path, num_attention_heads=64, num_key_value_heads=8, intermediate_size=29568,
                   quantization_config={"quant_method": "awq", "group_size": 128, "bits": 4})
    # vllm/model_executor/layers/quantization/auto_awq.py create_weights: raise ValueError("The input size is
    # not aligned with the quantized weight shape. This can be caused by too large tensor parallel size.")
    d = diagnose(_log("ValueError: The input size is not aligned with the quantized weight shape. This can be "
                      "caused by too large tensor parallel size."), exit_code=1, model=model)
    assert d.kind == "tensor_parallel"
    # 29568 = 128 x 231 (231 = 3 x 7 x 11): no power of two above 1 keeps whole groups per GPU
    assert "one of 1 (" in d.fix


def test_c28_kv_cache_error_under_the_wrapper_gets_numbers() -> None:
    """docs/cases.md C28: the wrapper is the last line, the ValueError further up."""
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory: raise ValueError(f"To serve at least one
    # request with the model's max seq len ({max_model_len}), ({format_gib(needed_memory)} GiB KV cache is
    # needed, which is larger than the available KV cache memory ({format_gib(available_memory)} GiB). "
    # f"{estimated_msg}Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing
    # the engine. ...")
    cause = ("ValueError: To serve at least one request with the model's max seq len (131072), (16.00 GiB KV "
             "cache is needed, which is larger than the available KV cache memory (6.50 GiB). Based on the "
             "available memory, the estimated maximum model length is 53248. Try increasing "
             "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    text = _log(cause)
    assert text.rstrip().splitlines()[-1].endswith("Failed core proc(s): {}")
    d = diagnose(text, exit_code=1)
    assert d.kind == "kv_cache_max_len" and "53248" in d.reason and "131072" in d.reason
    assert "max_model_len = 49152" in d.fix and "gpu_memory_utilization" in d.fix
    # the V0 wording of the same case (vllm/worker/worker.py raise_if_cache_size_invalid)
    v0 = _log("ValueError: The model's max seq len (8192) is larger than the maximum number of tokens that can "
              "be stored in KV cache (5120). Try increasing `gpu_memory_utilization` or decreasing "
              "`max_model_len` when initializing the engine.")
    d0 = diagnose(v0, exit_code=1)
    assert d0.kind == "kv_cache_max_len" and "max_model_len = 4096" in d0.fix


def test_c29_unknown_model_type_needs_a_newer_vllm() -> None:
    """docs/cases.md C29."""
    # transformers models/auto/configuration_auto.py AutoConfig.from_pretrained: raise ValueError(f"The
    # checkpoint you are trying to load has model type `{config_dict['model_type']}` but Transformers does not
    # recognize this architecture. ..."), inside vllm/config/model.py's pydantic validation.
    text = BANNER + (
        "(APIServer pid=70) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "(APIServer pid=70)   Value error, The checkpoint you are trying to load has model type `gemma4` but "
        "Transformers does not recognize this architecture. This could be because of an issue with the "
        "checkpoint, or because your version of Transformers is out of date. [type=value_error, "
        "input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]\n")
    rc = root_cause(text)
    assert rc is not None and rc.message.startswith("The checkpoint you are trying to load has model type `gemma4`")
    d = diagnose(text, exit_code=1)
    assert d.kind == "unknown_model_type" and "'gemma4'" in d.reason
    assert "vLLM 0.32.0 is too old" in d.fix and "[vllm].python" in d.fix


def test_unknown_architecture_in_vllms_registry() -> None:
    # vllm/model_executor/models/registry.py _raise_for_unsupported: raise ValueError(f"Model architectures
    # {architectures} are not supported for now. Supported architectures: {all_supported_archs}")
    d = diagnose(_log("ValueError: Model architectures ['Gemma4ForCausalLM'] are not supported for now. "
                      "Supported architectures: dict_keys(['LlamaForCausalLM'])"), exit_code=1)
    assert d.kind == "unknown_model_type" and "Gemma4ForCausalLM" in d.reason and "0.32.0" in d.fix


def test_c30_bfloat16_below_compute_capability_8() -> None:
    """docs/cases.md C30."""
    # vllm/platforms/cuda.py check_if_supports_dtype: raise ValueError("Bfloat16 is only supported on GPUs
    # with compute capability of at least 8.0. " f"Your {gpu_name} GPU {compute_str}. " "You can use float16
    # instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.")
    d = diagnose(_log("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
                      "Your Tesla V100-SXM2-16GB GPU has compute capability 7.0. You can use float16 instead by "
                      "explicitly setting the `dtype` flag in CLI, for example: --dtype=half."), exit_code=1)
    assert d.kind == "bfloat16" and "Tesla V100-SXM2-16GB" in d.reason and "7.0" in d.reason
    assert d.fix == 'set [vllm].dtype = "float16"'


def test_quantization_method_mismatch_names_the_checkpoints_method() -> None:
    # vllm/config/model.py _verify_quantization: raise ValueError("Quantization method specified in the model
    # config ({quant_method}) does not match the quantization method specified in the `quantization` argument
    # ({self.quantization}).")
    d = diagnose(_log("ValueError: Quantization method specified in the model config (awq) does not match the "
                      "quantization method specified in the `quantization` argument (gptq)."), exit_code=1)
    assert d.kind == "quantization_mismatch" and 'quantization = "awq"' in d.fix and "gptq" in d.fix


def test_quantization_below_the_minimum_capability() -> None:
    # vllm/config/vllm.py _get_quantization_config: raise ValueError(f"The quantization method
    # {model_config.quantization} is not supported for the current GPU. Minimum capability:
    # {quant_config.get_min_capability()}. Current capability: {capability}.")
    d = diagnose(_log("ValueError: The quantization method awq is not supported for the current GPU. Minimum "
                      "capability: 75. Current capability: 70."), exit_code=1)
    assert d.kind == "quantization_capability"
    assert "needs compute capability 7.5" in d.reason and "has 7.0" in d.reason
    assert "gptq" in d.fix and "awq" not in d.fix.split("(")[1].split(")")[0].split(", ")


def test_gated_repo_needs_hf_token() -> None:
    # huggingface_hub utils/_http.py hf_raise_for_status: message = f"{response.status_code} Client Error." +
    # "\n\n" + f"Cannot access gated repo for url {response.url}." -> raise GatedRepoError(message, response)
    text = _log("huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-abc)\n\n"
                "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/"
                "config.json.\nAccess to model meta-llama/Llama-3.1-8B is restricted. You must have access to it "
                "and be authenticated to access it. Please log in.")
    d = diagnose(text, exit_code=1, model="meta-llama/Llama-3.1-8B")
    assert d.kind == "hub_auth" and "meta-llama/Llama-3.1-8B" in d.reason and "HF_TOKEN" in d.fix


def test_cuda_driver_error_out_of_memory_is_an_oom() -> None:
    # torch c10/cuda/CUDACachingAllocator.cpp: C10_CUDA_DRIVER_CHECK -> "CUDA driver error: out of memory"
    d = diagnose(_log("RuntimeError: CUDA driver error: out of memory"), exit_code=1)
    assert d.kind == "cuda_oom" and "max_num_seqs" in d.fix


def test_cannot_find_lcuda_means_enforce_eager() -> None:
    # ld, run by Triton's build step (triton/runtime/build.py) while torch.compile compiles a kernel
    text = _log("/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
                "collect2: error: ld returned 1 exit status\n"
                "torch._inductor.exc.InductorError: CalledProcessError: Command '['/usr/bin/gcc', ...]' returned "
                "non-zero exit status 1.")
    d = diagnose(text, exit_code=1)
    assert d.kind == "compile_link" and "enforce_eager = true" in d.fix


def test_a_table_message_names_its_key() -> None:
    # vllm/config/scheduler.py SchedulerConfig.verify_max_model_len: raise ValueError(f"max_num_batched_tokens
    # ({self.max_num_batched_tokens}) must be greater than or equal to max_num_seqs ({self.max_num_seqs}).")
    d = diagnose(_log("ValueError: max_num_batched_tokens (128) must be greater than or equal to max_num_seqs "
                      "(256)."), exit_code=1)
    assert d.kind == "vllm_config" and "(128)" in d.reason and "[vllm].max_num_batched_tokens" in d.fix
