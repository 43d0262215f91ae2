"""What the planner needs to know about a model: its `ModelSpec`, built by its family."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.family import Family

# Attention layer kinds, as vLLM's KV-cache specs name them.
FULL = "full"  # FullAttentionSpec (decoder self-attention)
SLIDING = "sliding_window"  # SlidingWindowSpec
CROSS = "cross"  # CrossAttentionSpec (encoder-decoder cross-attention)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class AttentionLayer:
    """One decoder attention layer that holds KV cache (totals before tensor parallelism)."""

    kind: str
    num_kv_heads: int
    head_size: int
    sliding_window: int | None = None


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


@dataclass(frozen=True)
class VllmSupport:
    """How vLLM 0.33 serves this architecture."""

    status: str  # "native" | "plugin" | "removed" | "unsupported"
    detail: str = ""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: Family  # the family that read the config: builds the module, runs the profiler hooks
    architecture: str
    is_encoder_decoder: bool
    config_dtype: str  # torch_dtype of the checkpoint ("float32" when absent)
    layers: tuple[AttentionLayer, ...]
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

    @property
    def has_cross_attention(self) -> bool:
        return any(layer.kind == CROSS for layer in self.layers)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the family by its name."""
        return {**asdict(self), "family": self.family.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        """The inverse of `to_dict`; a spec saved before families were objects (with `arch_builder`) loads too."""
        from capacity.families import family_named

        encoder = data.get("encoder")
        return cls(
            name=data["name"],
            family=family_named(data["family"]),
            architecture=data["architecture"],
            is_encoder_decoder=bool(data["is_encoder_decoder"]),
            config_dtype=data["config_dtype"],
            layers=tuple(AttentionLayer(**layer) for layer in data["layers"]),
            modalities=tuple(Modality(**m) for m in data["modalities"]),
            derived_max_model_len=int(data["derived_max_model_len"]),
            max_len_key=data["max_len_key"],
            max_source_positions=data.get("max_source_positions"),
            encoder_tokens_per_request=int(data["encoder_tokens_per_request"]),
            num_attention_heads=int(data["num_attention_heads"]),
            decoder=DecoderShape(**data["decoder"]),
            encoder=None if encoder is None else EncoderShape(**encoder),
            vllm_support=VllmSupport(**data["vllm_support"]),
            notes=tuple(data.get("notes", ())),
        )


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
