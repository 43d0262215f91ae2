"""What the planner needs to know about a model: its `ModelSpec`, built by its family."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.model.family import Family

from capacity.kv.layers import KVLayer


@dataclass(frozen=True)
class Modality:
    """One input modality: tokens of its largest item (what the encoder emits for it)."""

    name: str
    max_tokens_per_item: int
    supported_limit: int | None  # per prompt; None = no model-side limit
    # Videos (Qwen2-VL family): tokens per pair of frames and the frame cap; the item's tokens then
    # depend on max_model_len (see budget.max_tokens_per_item).
    frame_pair_tokens: int | None = None
    max_frames: int | None = None
    # vLLM sizes the largest item by max_model_len itself (Voxtral: get_max_audio_tokens = max_model_len).
    sized_by_max_model_len: bool = False
    # Positions the encoder runs for the largest item when the encoder shape's ratio does not give them (Gemma-4:
    # an image runs 280 x 9 patches, a video 32 frames x 70 x 9); None = EncoderShape.seq_len_for(tokens).
    encoder_positions: int | None = None
    # Embeddings the encoder emits for vLLM's dummy item of this modality, when fewer than max_tokens_per_item
    # (Gemma-4: a 224 x 224 dummy image yields 256 of its 280 soft tokens); None = max_tokens_per_item.
    dummy_output_tokens: int | None = None
    # Videos whose frames fill the sequence (InternVL: get_num_frames_with_most_features): the tokens of one frame;
    # the item holds max((max_model_len - one largest image, when images are in the dummy) // frame_tokens, 1) frames.
    frame_tokens: int | None = None
    # Videos resized by their frame count (GLM-4.1V: get_num_frames_with_most_features): the dummy video's tokens at
    # 1, 2, ... frames; the item takes the most that fit max_model_len - one largest image, else 2 frames' tokens.
    tokens_by_frames: tuple[int, ...] = ()
    # Why vLLM's tokens for this modality's largest item are not modelled ("" = they are): planning is refused
    # (serving.resolve_serving) unless --limit-mm-per-prompt sets the modality to 0, when vLLM budgets none of it.
    unmodelled: str = ""


@dataclass(frozen=True)
class EncoderShape:
    """The encoder run on one max-size item, for activation estimates."""

    seq_len: int  # tokens inside the encoder for one item (before any pooling / merge)
    hidden_size: int
    ffn_size: int
    num_layers: int
    output_hidden_size: int  # width of the embeddings it hands the decoder (encoder-cache entries)
    seq_len_tokens: int = 0  # the output tokens seq_len corresponds to, when items vary (videos); 0 = fixed
    gated_ffn: bool = False  # SwiGLU-style MLP (gate + up)
    # vLLM shards the encoder over the TP ranks (mm_encoder_tp_mode "weights"); False: it runs the tower whole on
    # every rank (Gemma-4: transformers' own vision tower with replicated linears).
    tensor_parallel: bool = True
    # The most encoder positions the model runs in one pass, whatever the items (Ultravox: 16 chunks of 1500, its
    # _MAX_ENCODER_BATCH_SIZE); 0 = all the profiled items at once.
    max_positions_per_pass: int = 0

    def seq_len_for(self, tokens: int) -> int:
        """Encoder sequence length for an item of `tokens` output tokens."""
        return self.seq_len if not self.seq_len_tokens else self.seq_len * tokens // self.seq_len_tokens


@dataclass(frozen=True)
class DecoderShape:
    """The decoder, for activation estimates."""

    hidden_size: int
    ffn_size: int
    gated_ffn: bool  # SwiGLU-style gate+up projection (2 x ffn wide)
    vocab_size: int
    num_layers: int
    # vLLM's LM head holds vocab / TP rows per rank (ParallelLMHead, or tied to a VocabParallelEmbedding); False when
    # it is tied to an embedding vLLM keeps whole (Whisper's nn.Embedding): every rank computes all logits.
    lm_head_sharded: bool = True


@dataclass(frozen=True)
class VllmSupport:
    """How vLLM 0.33 serves this architecture."""

    status: str  # "native" | "plugin" | "removed" | "unsupported"
    detail: str = ""
    # the last release whose own registry serves it (vllm/model_executor/models/registry.py _PREVIOUSLY_SUPPORTED_MODELS
    # in 0.33.0); "" when no release is known to
    served_through: str = ""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: Family  # the family that read the config: builds the module, runs the profiler hooks
    architecture: str
    is_encoder_decoder: bool
    config_dtype: str  # torch_dtype of the checkpoint ("float32" when absent)
    layers: tuple[KVLayer, ...]  # one description per decoder layer that holds (or shares) KV / state
    modalities: tuple[Modality, ...]
    derived_max_model_len: int
    max_len_key: str
    max_source_positions: int | None  # hf_config.max_source_positions, None when absent
    encoder_tokens_per_request: int  # real cross-attention keys of one request (0 for decoder-only)
    num_attention_heads: int  # decoder query heads (TP divisibility)
    decoder: DecoderShape
    encoder: EncoderShape | None
    vllm_support: VllmSupport
    notes: tuple[str, ...] = field(default=())
    # the derived max_model_len of vLLM 0.29 and earlier where it differs (a YaRN RoPE: original x factor);
    # capacity.vllm.versions applies it to those versions (derived_max_model_len_before_0_30 below)
    derived_max_model_len_before_0_30: int | None = None

    def encoder_positions(self, modality: str | None, tokens: int) -> int:
        """Positions the encoder runs for one item of `tokens` tokens of `modality`: the modality's own count for its
        largest item when it gives one, else the encoder shape's ratio."""
        own = next((m.encoder_positions for m in self.modalities if m.name == modality and m.max_tokens_per_item == tokens), None)
        if own is not None:
            return own
        return self.encoder.seq_len_for(tokens) if self.encoder is not None else 0

    def encoder_output_tokens(self, modality: str | None, tokens: int) -> int:
        """Embeddings the encoder emits (encoder-cache rows) for vLLM's dummy item of `tokens` tokens of `modality`."""
        own = next((m.dummy_output_tokens for m in self.modalities if m.name == modality and m.max_tokens_per_item == tokens), None)
        return own if own is not None else tokens

    @property
    def has_cross_attention(self) -> bool:
        return any(layer.reads_encoder_output for layer in self.layers)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the family by its name, each layer with its kind."""
        out = {**asdict(self), "family": self.family.name}
        out["layers"] = [{"kind": layer.kind, **asdict(layer)} for layer in self.layers]
        if self.derived_max_model_len_before_0_30 is None:
            del out["derived_max_model_len_before_0_30"]
        return out


# vLLM: ModelArchConfigConvertorBase.derive_max_model_len_and_key's key list, in its order.
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def derive_max_model_len(text_config: dict[str, Any]) -> tuple[int, str]:
    """The smallest length key present in the text config (vLLM: derive_max_model_len_and_key).

    `model_max_length`, when present, wins outright (Command-R rule). With no key vLLM assumes 2048.
    """
    best: int | None = None
    best_key = "default (no length key in config: vLLM assumes 2048)"
    for key in MAX_LEN_KEYS:
        value = text_config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (best is None or value < best):
            best, best_key = int(value), key
    if isinstance(text_config.get("model_max_length"), int):
        return int(text_config["model_max_length"]), "model_max_length"
    return (best if best is not None else 2048), best_key


# vLLM _get_and_verify_max_len: RoPE types whose max_position_embeddings is already the scaled length.
ROPE_TYPES_ALREADY_SCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def keyed_by_layer_type(params: Any) -> bool:
    """Whether a RoPE setting holds one entry per layer type (transformers 5's `rope_parameters`: every value an object)."""
    return isinstance(params, dict) and bool(params) and all(isinstance(v, dict) for v in params.values())


def rope_entries(text_config: dict[str, Any]) -> list[dict[str, Any]]:
    """The RoPE entries vLLM iterates (iter_rope_parameters): `rope_parameters` (flat, or one per layer type), else the
    legacy `rope_scaling`; [] without either."""
    params = text_config.get("rope_parameters") or text_config.get("rope_scaling")
    if not isinstance(params, dict) or not params:
        return []
    return list(params.values()) if keyed_by_layer_type(params) else [params]


def _rope_type(entry: dict[str, Any]) -> str:
    return entry.get("rope_type", entry.get("type", "default"))


def _last_factor(entries: list[dict[str, Any]], scaled_types: tuple[str, ...]) -> float:
    """The `factor` of the last entry whose type is not in `scaled_types`, else 1.0 (null too: vLLM falls back to 1.0)."""
    factor: Any = 1.0
    for entry in entries:
        if _rope_type(entry) not in scaled_types:
            factor = entry.get("factor", factor)
    return float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) else 1.0


def rope_scaling_factor(text_config: dict[str, Any]) -> float:
    """The factor vLLM multiplies the derived max_model_len by (vLLM: _get_and_verify_max_len, over
    iter_rope_parameters): the `factor` of the last RoPE entry whose type is not already scaled, else 1.0.

    Reads `rope_parameters` (transformers 5: flat, or one entry per layer type), else the legacy `rope_scaling`.
    vLLM skips the factor for Gemma-3 (its length is already scaled); callers of other families decide that."""
    return _last_factor(rope_entries(text_config), ROPE_TYPES_ALREADY_SCALED)


def vllm_max_model_len(text_config: dict[str, Any], model_type: str) -> tuple[int, str]:
    """vLLM's derived max_model_len and its key: the derived length x the RoPE factor, except for Gemma-3, whose length
    vLLM takes as already scaled."""
    if "gemma3" in model_type:
        return derive_max_model_len(text_config)
    max_len, key, _factor = scaled_max_model_len(text_config)
    return max_len, key


def derived_max_model_len_before_0_30(text_config: dict[str, Any], model_type: str, now: int) -> int | None:
    """vLLM 0.29 and earlier (_get_and_verify_max_len, read in 0.10.0, 0.15.1, 0.20.0, 0.25.0, 0.28.0 and 0.29.0): every
    RoPE type but su / longrope / llama3 applies its factor, and a YaRN entry first sets the length to its
    original_max_position_embeddings (from 0.30.0 YaRN's length counts as already scaled). None where this gives
    `now` (the 0.30+ length), or for Gemma-3 (skipped by both)."""
    entries = rope_entries(text_config)
    if "gemma3" in model_type or not entries:
        return None
    originals = [e["original_max_position_embeddings"] for e in entries if _rope_type(e) == "yarn" and isinstance(e.get("original_max_position_embeddings"), int)]
    length = originals[-1] if originals else derive_max_model_len(text_config)[0]
    before = int(length * _last_factor(entries, ("su", "longrope", "llama3")))
    return None if before == now else before


def scaled_max_model_len(text_config: dict[str, Any]) -> tuple[int, str, float]:
    """vLLM _get_and_verify_max_len without a user value: the derived length x the RoPE factor.

    Returns (max_model_len, the key it came from (naming the factor when there is one), the factor)."""
    base, key = derive_max_model_len(text_config)
    factor = rope_scaling_factor(text_config)
    return int(base * factor), (key if factor == 1.0 else f"{key} x RoPE factor {factor:g}"), factor

