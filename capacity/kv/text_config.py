"""A model's KV layout read from its text config: one `KVLayer` per decoder layer, as vLLM 0.33 builds them.

One entry point, `kv_layers(text_config, where)`. It reads
- full / sliding-window attention from `layer_types` ("full_attention" / "sliding_attention") or `sliding_window`;
- MLA (DeepSeek-V2/V3, Kimi) from `kv_lora_rank` + `qk_rope_head_dim`;
- hybrid models from `layer_types` with "linear_attention" (Qwen3-Next / Qwen3.5 Gated DeltaNet:
  `linear_num_key_heads`, `linear_num_value_heads`, `linear_key_head_dim`, `linear_value_head_dim`,
  `linear_conv_kernel_dim`; `full_attention_interval` when `layer_types` is absent) or "mamba" / Nemotron-H's
  `hybrid_override_pattern` (Mamba-2: `mamba_num_heads`/`mamba_n_heads`, `mamba_head_dim`/`mamba_d_head`,
  `ssm_state_size`/`mamba_d_state`, `n_groups`/`mamba_n_groups`, `conv_kernel`/`mamba_d_conv`);
- LFM2's short-convolution hybrids from `layer_types` with "conv" (or `full_attn_idxs`, the older configs' list of
  attention layers): `conv_dim` and `conv_L_cache` (default 3, transformers' Lfm2Config);
- KV sharing (Gemma-3n, Gemma-4: the last `num_kv_shared_layers` layers read the last earlier layer of their type);
- chunked local attention (Llama-4: `attention_chunk_size`, `no_rope_layers`: RoPE layers are chunked, NoPE global).
Anything it cannot read fails closed with one line naming the field.
"""

from __future__ import annotations

from typing import Any

from capacity.errors import BadInput
from capacity.kv.layers import (
    DTYPE_BYTES,
    ChunkedLocalAttentionLayer,
    FullAttentionLayer,
    GatedDeltaNetLayer,
    KVLayer,
    Mamba2Layer,
    MLALayer,
    SharedKVLayer,
    ShortConvLayer,
    SlidingWindowLayer,
)

# Config fields of KV layouts vLLM 0.33 has but capacity does not model: planning them silently would be wrong.
UNMODELLED_FIELDS = {
    "index_topk": "DeepSeek-V3.2 sparse attention (its indexer keeps its own KV cache)",
    "linear_attn_config": "Kimi-Linear KDA layers",
    "compress_ratios": "DeepSeek-V4 compressed attention",
    "mamba_d_ssm": "Falcon-H1 parallel attention + Mamba layers",
}
# Nemotron-H's hybrid_override_pattern: M = Mamba-2, * = attention, - = MLP, E = MoE (only M and * keep state).
PATTERN_KINDS = {"M": "mamba", "*": "full_attention", "-": None, "E": None}


def _need(text: dict[str, Any], key: str, where: str) -> Any:
    value = text.get(key)
    if value is None or isinstance(value, bool) or (isinstance(value, (int, float)) and value <= 0):
        raise BadInput(f"config.json ({where}) needs a positive '{key}' to lay out the KV cache (got {value!r})")
    return value


def _first(text: dict[str, Any], keys: tuple[str, ...], where: str) -> Any:
    for key in keys:
        if text.get(key) is not None:
            return _need(text, key, where)
    raise BadInput(f"config.json ({where}) needs '{keys[0]}' (or {', '.join(repr(k) for k in keys[1:])}) to lay out the KV cache")


def layer_kinds(text: dict[str, Any], where: str) -> list[str]:
    """One kind name per decoder layer that keeps KV or state, in layer order."""
    n = _need(text, "num_hidden_layers", where)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        unknown = sorted(set(pattern) - set(PATTERN_KINDS))
        if unknown:
            raise BadInput(f"config.json ({where}) hybrid_override_pattern has {unknown}; capacity reads M, *, - and E")
        return [kind for kind in (PATTERN_KINDS[c] for c in pattern) if kind is not None]
    blocks = text.get("layers_block_type")  # transformers 5's NemotronHConfig: one entry per layer, MLP / MoE ones included
    if isinstance(blocks, list):
        return [{"mamba": "mamba", "linear_attention": "mamba", "attention": "full_attention", "full_attention": "full_attention"}.get(b, "") for b in blocks if b not in ("mlp", "moe")]
    types = text.get("layer_types")
    if types is None and text.get("linear_num_value_heads") and text.get("full_attention_interval"):
        interval = _need(text, "full_attention_interval", where)  # Qwen3-Next: layer i is full iff (i + 1) % interval == 0
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    attention_idxs = text.get("full_attn_idxs")
    if types is None and isinstance(attention_idxs, list):  # LFM2 before layer_types (transformers' Lfm2Config builds them so)
        types = ["full_attention" if i in attention_idxs else "conv" for i in range(n)]
    if types is None and text.get("attention_chunk_size"):
        nope = text.get("no_rope_layers")
        if not isinstance(nope, list) or len(nope) < n:
            raise BadInput(f"config.json ({where}) has attention_chunk_size but no 'no_rope_layers' list of {n} entries (Llama-4 marks NoPE layers with 0)")
        types = ["full_attention" if nope[i] == 0 else "chunked_attention" for i in range(n)]
    if types is None:
        window = text.get("sliding_window")
        uses_window = bool(window) and text.get("use_sliding_window", True) is not False
        types = ["sliding_attention" if uses_window else "full_attention"] * n
    if not isinstance(types, list) or len(types) < n:
        raise BadInput(f"config.json ({where}) layer_types must list {n} layer types, got {types!r}")
    return [{"attention": "full_attention"}.get(t, t) for t in types[:n]]


def _attention(text: dict[str, Any], where: str, kind: str) -> tuple[int, int]:
    """(KV heads, head size) of the model's attention layers of one kind.

    Gemma-4's full-attention layers are wider: `global_head_dim` (default 512), and `num_global_key_value_heads`
    when the config has `attention_k_eq_v` (transformers' Gemma4TextConfig per_layer_config, which vLLM reads).
    """
    if text.get("per_layer_config") is not None:
        raise BadInput(f"config.json ({where}) has an explicit 'per_layer_config', whose per-layer KV shapes capacity does not read")
    heads = _need(text, "num_attention_heads", where)
    kv_heads = text.get("num_key_value_heads") or heads
    head_size = text.get("head_dim") or text.get("attention_head_dim") or _need(text, "hidden_size", where) // heads  # Nemotron-H: attention_head_dim
    if kind == "full_attention" and str(text.get("model_type", "")).startswith("gemma4"):
        head_size = text.get("global_head_dim") or 512
        if text.get("attention_k_eq_v", True) and text.get("num_global_key_value_heads"):
            kv_heads = text["num_global_key_value_heads"]
    return kv_heads, head_size


def _mla(text: dict[str, Any], where: str) -> MLALayer:
    return MLALayer(_need(text, "kv_lora_rank", where), _need(text, "qk_rope_head_dim", where), _need(text, "qk_nope_head_dim", where))


def _gated_delta_net(text: dict[str, Any], where: str) -> GatedDeltaNetLayer:
    ssm_dtype = text.get("mamba_ssm_dtype")
    if ssm_dtype is not None and ssm_dtype not in DTYPE_BYTES:
        raise BadInput(f"config.json ({where}) mamba_ssm_dtype {ssm_dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    return GatedDeltaNetLayer(
        num_k_heads=_need(text, "linear_num_key_heads", where),
        num_v_heads=_need(text, "linear_num_value_heads", where),
        head_k_dim=_need(text, "linear_key_head_dim", where),
        head_v_dim=_need(text, "linear_value_head_dim", where),
        conv_kernel=_need(text, "linear_conv_kernel_dim", where),
        ssm_dtype=ssm_dtype,
    )


def _mamba2(text: dict[str, Any], where: str) -> Mamba2Layer:
    heads = _first(text, ("mamba_num_heads", "mamba_n_heads"), where)
    head_dim = _first(text, ("mamba_head_dim", "mamba_d_head"), where)
    # vLLM NemotronHForCausalLMConfig: the SSM state in the config's mamba_ssm_cache_dtype, else float32.
    ssm_dtype = text.get("mamba_ssm_cache_dtype") or ("float32" if text.get("model_type") == "nemotron_h" else None)
    if ssm_dtype is not None and ssm_dtype not in DTYPE_BYTES:
        raise BadInput(f"config.json ({where}) mamba_ssm_cache_dtype {ssm_dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    return Mamba2Layer(
        num_heads=heads,
        head_dim=head_dim,
        state_size=_first(text, ("ssm_state_size", "mamba_d_state"), where),
        n_groups=_first(text, ("n_groups", "mamba_n_groups"), where),
        conv_kernel=_first(text, ("conv_kernel", "mamba_d_conv"), where),
        # vLLM: mamba_num_heads x mamba_head_dim (Nemotron-H), mamba_expand x hidden_size (Granite-4)
        intermediate_size=int(text["mamba_expand"] * _need(text, "hidden_size", where)) if text.get("mamba_expand") else heads * head_dim,
        ssm_dtype=ssm_dtype,
    )


MAMBA2_FIELDS = ("mamba_num_heads", "mamba_n_heads")


LFM2_CONV_KERNEL_DEFAULT = 3  # transformers' Lfm2Config.conv_L_cache


def _short_conv(text: dict[str, Any], where: str) -> ShortConvLayer:
    """vLLM's ShortConv reads config.conv_dim (no transformers default: vLLM fails without it) and conv_L_cache."""
    kernel = text.get("conv_L_cache", LFM2_CONV_KERNEL_DEFAULT)
    if not isinstance(kernel, int) or isinstance(kernel, bool) or kernel < 1:
        raise BadInput(f"config.json ({where}) conv_L_cache must be a positive integer (got {kernel!r})")
    return ShortConvLayer(conv_dim=_need(text, "conv_dim", where), conv_kernel=kernel)


def _layer(kind: str, text: dict[str, Any], where: str) -> KVLayer:
    # "linear_attention" is Gated DeltaNet in Qwen3-Next / Qwen3.5 and Mamba-2 in transformers' Granite-4 configs.
    if kind == "linear_attention" and text.get("linear_num_value_heads") is not None:
        return _gated_delta_net(text, where)
    if kind in ("mamba", "linear_attention") and any(text.get(k) is not None for k in MAMBA2_FIELDS):
        return _mamba2(text, where)
    if kind == "conv":
        return _short_conv(text, where)
    if kind == "linear_attention":
        raise BadInput(f"config.json ({where}) has linear_attention layers but neither 'linear_num_value_heads' (Gated DeltaNet) nor 'mamba_n_heads' (Mamba-2)")
    if text.get("kv_lora_rank"):
        if kind != "full_attention":
            raise BadInput(f"config.json ({where}) mixes MLA (kv_lora_rank) with {kind!r} layers, which capacity does not model")
        return _mla(text, where)
    kv_heads, head_size = _attention(text, where, kind)
    if kind == "full_attention":
        return FullAttentionLayer(kv_heads, head_size)
    if kind == "sliding_attention":
        return SlidingWindowLayer(kv_heads, head_size, int(_need(text, "sliding_window", where)))
    if kind == "chunked_attention":
        return ChunkedLocalAttentionLayer(kv_heads, head_size, int(_need(text, "attention_chunk_size", where)))
    raise BadInput(f"config.json ({where}) layer_types has {kind!r}; capacity reads full_attention, sliding_attention, linear_attention, mamba and conv")


def _share_kv(layers: list[KVLayer], kinds: list[str], shared: int, where: str) -> list[KVLayer]:
    """The last `shared` layers read the KV of the last earlier layer of their kind (Gemma-3n / Gemma-4)."""
    first = len(layers) - shared
    if first <= 0:
        raise BadInput(f"config.json ({where}) num_kv_shared_layers {shared} leaves no layer to share from")
    out = layers[:first]
    for i in range(first, len(layers)):
        targets = [j for j in range(first) if kinds[j] == kinds[i]]
        if not targets:
            raise BadInput(f"config.json ({where}) layer {i} ({kinds[i]}) shares KV but no earlier {kinds[i]} layer exists")
        target = layers[targets[-1]]
        out.append(SharedKVLayer(targets[-1], target.kv_heads() or 0, getattr(target, "head_size", 0)))
    return out


def kv_layers(text_config: dict[str, Any], where: str) -> tuple[KVLayer, ...]:
    """The decoder's KV layout, one description per layer that keeps (or shares) KV or state."""
    for key, what in UNMODELLED_FIELDS.items():
        if text_config.get(key) is not None:
            raise BadInput(f"config.json ({where}) has '{key}': {what}, whose KV layout capacity does not model yet")
    kinds = layer_kinds(text_config, where)
    layers = [_layer(kind, text_config, where) for kind in kinds]
    shared = text_config.get("num_kv_shared_layers") or 0
    if shared:
        layers = _share_kv(layers, kinds, int(shared), where)
    return tuple(layers)
