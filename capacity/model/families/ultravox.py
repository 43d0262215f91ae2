"""Ultravox (UltravoxModel, model_type `ultravox`): Hub remote code that vLLM 0.33 serves natively (ultravox.py).

A Whisper encoder (`audio_config`), a projector that stacks `stack_factor` encoder frames per LLM token, and an LLM
whose config is another repository's (`text_model_id`, resolved as `--model` is: the catalog first) or `text_config`.
What vLLM does, read from vllm/model_executor/models/ultravox.py and the published ultravox_processing.py (the
processor vLLM loads with trust_remote_code):
- the dummy audio is `chunk_length x sampling_rate x 16` samples (480 s); the processor cuts its mel frames
  (`length / hop_length`) into chunks of `audio_context_size` (3000) frames, and each chunk gives
  `ceil(frames / (encoder_ds_factor x stack_factor))` tokens: 16 x ceil(3000 / 16) = 3,008 tokens per audio;
- the tower runs `_MAX_ENCODER_BATCH_SIZE` (16) chunks of `max_source_positions` (1500) positions per pass;
- weights: the Whisper encoder (vLLM's fused qkv_proj allocates a K bias the checkpoint lacks), the feed-forward
  projector (RMSNorm, ReplicatedLinear, SwiGLU, RMSNorm, ReplicatedLinear: whole on every rank), the LLM built from
  its config on the meta device;
- the profiler and the fake-tensor trace run the same modules composed from transformers' parts
  (capacity/model/arch/ultravox.py), which allocate exactly the parameters listed here.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.kv.text_config import kv_layers
from capacity.model.families.common import config_dtype, need, sub
from capacity.model.families.decoder_only import decoder_shape
from capacity.model.family import EncoderInput, Family
from capacity.model.spec import EncoderShape, Modality, ModelSpec, VllmSupport, scaled_max_model_len

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

    from capacity.source.resolve import ModelSource

WHERE = "ultravox"
MAX_ENCODER_BATCH_SIZE = 16  # ultravox.py _MAX_ENCODER_BATCH_SIZE: chunks per tower pass, and the dummy audio's 30 s chunks
# WhisperFeatureExtractor's (the published whisper-large-v3-turbo preprocessor_config.json has the same values).
CHUNK_SECONDS, SAMPLING_RATE, HOP_LENGTH = 30, 16_000, 160
# UltravoxProcessor.__init__ defaults; its from_pretrained (what vLLM calls) passes only stack_factor from config.json.
ENCODER_DS_FACTOR, AUDIO_CONTEXT_SIZE = 2, 3000


@lru_cache(maxsize=8)
def _resolved_text_config(text_model_id: str) -> str:
    from capacity.source.resolve import resolve_model

    try:
        source = resolve_model(text_model_id)
    except BadInput as exc:
        raise BadInput(f"config.json (ultravox) text_model_id {text_model_id!r} cannot be resolved (the LLM's config lives there): {exc}") from exc
    return json.dumps(source.config)


def llm_config(config: dict[str, Any]) -> dict[str, Any]:
    """The LLM's config as vLLM's UltravoxConfig reads it: `text_model_id`'s config.json, else `text_config`
    (model_type llama by default), with transformers' defaults filled."""
    from capacity.model.hf_config import materialized

    text_model_id = config.get("text_model_id")
    if text_model_id is not None:
        if not isinstance(text_model_id, str) or not text_model_id:
            raise BadInput(f"config.json (ultravox) text_model_id {text_model_id!r} is not a model id")
        raw = json.loads(_resolved_text_config(text_model_id))
    else:
        raw = {"model_type": "llama", **sub(config, "text_config", WHERE)}
    if any(isinstance(raw.get(key), dict) for key in ("text_config", "vision_config", "audio_config")):
        raise BadInput("config.json (ultravox) wraps a multimodal LLM (its config has sub-configs): vLLM builds all of it; not modelled")
    try:
        return materialized(raw)
    except BadInput as exc:
        raise BadInput(f"config.json (ultravox) text model: {exc}") from exc


def audio_config(config: dict[str, Any]) -> dict[str, Any]:
    if config.get("audio_model_id") is not None:
        raise BadInput(f"config.json (ultravox) audio_model_id {config['audio_model_id']!r}: the encoder's config lives in another repository; not modelled")
    audio = sub(config, "audio_config", WHERE)
    if audio.get("model_type", "whisper") != "whisper":
        raise BadInput(f"config.json (ultravox) audio_config.model_type {audio.get('model_type')!r}: vLLM's Ultravox runs a Whisper encoder")
    return audio


def stack_factor(config: dict[str, Any]) -> int:
    return int(config.get("stack_factor", 8))  # UltravoxConfig default


def audio_tokens(config: dict[str, Any]) -> tuple[int, int, int]:
    """(chunks, tokens per chunk, tokens) of vLLM's dummy audio: 16 x 30 s at 16 kHz = 48,000 mel frames (hop 160),
    in chunks of 3000 frames, each ceil(frames / (encoder_ds_factor x stack_factor)) tokens (ultravox_processing.py)."""
    frames = MAX_ENCODER_BATCH_SIZE * CHUNK_SECONDS * SAMPLING_RATE // HOP_LENGTH
    chunks = -(-frames // AUDIO_CONTEXT_SIZE)
    per_chunk = -(-AUDIO_CONTEXT_SIZE // (ENCODER_DS_FACTOR * stack_factor(config)))  # every chunk is full here
    return chunks, per_chunk, chunks * per_chunk


def tower_tensors(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """UltravoxWhisperEncoder (vLLM WhisperEncoder) as vLLM allocates it, under the checkpoint's names."""
    audio = audio_config(config)
    d = need(audio, "d_model", WHERE)
    ffn = need(audio, "encoder_ffn_dim", WHERE)
    mels = need(audio, "num_mel_bins", WHERE)
    p = "audio_tower"
    out: list[tuple[str, tuple[int, ...]]] = [
        (f"{p}.conv1.weight", (d, mels, 3)),
        (f"{p}.conv1.bias", (d,)),
        (f"{p}.conv2.weight", (d, d, 3)),
        (f"{p}.conv2.bias", (d,)),
        (f"{p}.embed_positions.weight", (need(audio, "max_source_positions", WHERE), d)),  # nn.Embedding
    ]
    for i in range(need(audio, "encoder_layers", WHERE)):
        layer = f"{p}.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj"):  # QKVParallelLinear(bias=True): the K bias too
            out += [(f"{layer}.self_attn.{proj}.weight", (d, d)), (f"{layer}.self_attn.{proj}.bias", (d,))]
        out += [
            (f"{layer}.self_attn.out_proj.weight", (d, d)),
            (f"{layer}.self_attn.out_proj.bias", (d,)),
            (f"{layer}.self_attn_layer_norm.weight", (d,)),
            (f"{layer}.self_attn_layer_norm.bias", (d,)),
            (f"{layer}.fc1.weight", (ffn, d)),
            (f"{layer}.fc1.bias", (ffn,)),
            (f"{layer}.fc2.weight", (d, ffn)),
            (f"{layer}.fc2.bias", (d,)),
            (f"{layer}.final_layer_norm.weight", (d,)),
            (f"{layer}.final_layer_norm.bias", (d,)),
        ]
    out += [(f"{p}.layer_norm.weight", (d,)), (f"{p}.layer_norm.bias", (d,))]
    return out


def projector_tensors(config: dict[str, Any], llm_hidden: int) -> list[tuple[str, tuple[int, ...]]]:
    """UltravoxFeedForwardProjector: RMSNorm(d x stack), linear_1 (no bias) to hidden_size, SwiGLU halves it,
    RMSNorm mid (projector_ln_mid) or post, linear_2 (no bias) to the LLM width."""
    if config.get("num_projector_layers", 0):
        raise BadInput("config.json (ultravox) num_projector_layers > 0: the transformer projector is not modelled")
    d = need(audio_config(config), "d_model", WHERE)
    hidden = int(config.get("hidden_size", 4096))  # UltravoxConfig default
    act = config.get("projector_act", "swiglu")
    mid = hidden // 2 if act == "swiglu" else hidden
    p = "multi_modal_projector"
    ln = (f"{p}.ln_mid.weight", (mid,)) if config.get("projector_ln_mid", False) else (f"{p}.ln_post.weight", (llm_hidden,))
    return [
        (f"{p}.ln_pre.weight", (d * stack_factor(config),)),
        (f"{p}.linear_1.weight", (hidden, d * stack_factor(config))),
        ln,
        (f"{p}.linear_2.weight", (llm_hidden, mid)),
    ]


class UltravoxFamily(Family):
    name = "ultravox"
    model_types = ("ultravox",)
    parameters_source: ClassVar[str] = (
        "listed from config.json as vLLM's UltravoxModel allocates them (Whisper encoder and projector by hand from "
        "ultravox.py / whisper.py; the LLM built from its config on the meta device)"
    )
    # ultravox.py: the projector's linears are ReplicatedLinear, its norms RMSNorm: whole on every rank.
    vllm_unsharded_modules: ClassVar[tuple[str, ...]] = (r"^multi_modal_projector\.",)

    def text_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return llm_config(config)

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        if config.get("quantization_config"):
            raise BadInput("config.json (ultravox) has a quantization_config: quantized Ultravox checkpoints are not modelled")
        audio = audio_config(config)
        llm = llm_config(config)
        tower_tensors(config)  # fields checked now, not when the weights are counted
        projector_tensors(config, need(llm, "hidden_size", WHERE))
        chunks, per_chunk, tokens = audio_tokens(config)
        positions = need(audio, "max_source_positions", WHERE)
        notes = [
            f"ultravox: {tokens} tokens per audio = {chunks} chunks of {AUDIO_CONTEXT_SIZE} mel frames (vLLM's dummy audio: "
            f"{MAX_ENCODER_BATCH_SIZE} x {CHUNK_SECONDS} s) x ceil({AUDIO_CONTEXT_SIZE} / ({ENCODER_DS_FACTOR} x stack_factor "
            f"{stack_factor(config)})) = {per_chunk}",
            f"ultravox: LLM config from {('text_model_id ' + repr(config['text_model_id'])) if config.get('text_model_id') else 'text_config'}",
        ]
        if processor and any(processor.get(k) not in (None, v) for k, v in (("encoder_ds_factor", ENCODER_DS_FACTOR), ("audio_context_size", AUDIO_CONTEXT_SIZE))):
            notes.append("ultravox: processor_config.json differs from UltravoxProcessor's defaults, which vLLM uses (from_pretrained passes stack_factor only)")
        max_len, key, _factor = scaled_max_model_len(llm)
        return ModelSpec(
            name=name,
            family=self,
            architecture=str((config.get("architectures") or ["UltravoxModel"])[0]),
            is_encoder_decoder=False,
            config_dtype=config_dtype(config, llm),
            layers=kv_layers(llm, "ultravox text model"),
            modalities=(Modality("audio", tokens, None),),
            derived_max_model_len=max_len,
            max_len_key=f"text model {key}",
            max_source_positions=None,
            encoder_tokens_per_request=0,
            num_attention_heads=need(llm, "num_attention_heads", WHERE),
            decoder=decoder_shape(llm, "ultravox text model"),
            encoder=EncoderShape(
                seq_len=positions,  # per chunk: 3000 mel frames through the stride-2 convolution
                hidden_size=need(audio, "d_model", WHERE),
                ffn_size=need(audio, "encoder_ffn_dim", WHERE),
                num_layers=need(audio, "encoder_layers", WHERE),
                output_hidden_size=need(llm, "hidden_size", WHERE),
                seq_len_tokens=per_chunk,
                max_positions_per_pass=MAX_ENCODER_BATCH_SIZE * positions,
            ),
            vllm_support=VllmSupport("native", "UltravoxModel (vllm/model_executor/models/ultravox.py)"),
            notes=tuple(notes),
        )

    def parameter_shapes(self, config: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The Whisper encoder and projector listed from the config; the LLM's parameters from its class on the meta device."""
        from capacity.model.family import family_named

        llm = llm_config(config)
        text = family_named("decoder_only").parameter_shapes(llm)
        return (*tower_tensors(config), *projector_tensors(config, need(llm, "hidden_size", WHERE)), *((f"language_model.{n}", s) for n, s in text))

    def build_module(
        self, config: dict[str, Any], *, device: str = "meta", dtype: str = "bfloat16", init_weights: bool | None = None, attn_implementation: str | None = None
    ) -> nn.Module:
        from capacity.model.arch.ultravox import build_ultravox

        projector_tensors(config, 1)  # refuses the projectors vLLM builds otherwise (num_projector_layers)
        return build_ultravox(
            audio_config(config),
            llm_config(config),
            stack_factor=stack_factor(config),
            projector_hidden=int(config.get("hidden_size", 4096)),
            projector_act=str(config.get("projector_act", "swiglu")),
            ln_mid=bool(config.get("projector_ln_mid", False)),
            device=device,
            dtype=dtype,
            init_weights=init_weights,
            attn_implementation=attn_implementation,
        )

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """vLLM's dummy audio as the processor hands it over: `tokens` / tokens-per-chunk chunks of 3000 log-mel frames."""
        import torch

        _, per_chunk, _ = audio_tokens(source.config)
        chunks = max(1, -(-tokens // per_chunk))
        mels = need(audio_config(source.config), "num_mel_bins", WHERE)
        features = torch.zeros(chunks, mels, AUDIO_CONTEXT_SIZE, device=device, dtype=dtype)
        return EncoderInput(
            {"input_features": features},
            f"processed-shape log-mel chunks ({chunks}, {mels}, {AUDIO_CONTEXT_SIZE}): {chunks} x {CHUNK_SECONDS} s, {per_chunk} tokens each",
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """The Whisper encoder on every chunk of `count` items, MAX_ENCODER_BATCH_SIZE chunks per pass as vLLM runs it
        (ultravox.py _audio_features_to_embeddings), then the projector; each item's embeddings in one tensor."""
        import torch

        features = item.tensors["input_features"]
        chunks = features.shape[0]
        batch = torch.cat([features] * count) if count > 1 else features
        embedded = [
            model.multi_modal_projector(model.audio_tower(input_features=part).last_hidden_state)
            for part in batch.split(MAX_ENCODER_BATCH_SIZE)
        ]
        out = torch.cat(embedded)  # (count x chunks, tokens per chunk, LLM hidden)
        return list(out.reshape(count, chunks * out.shape[1], out.shape[2]).unbind(0))

    def cached_text_model(self, model: Any) -> Any:
        return model.language_model.model

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.language_model.lm_head(hidden)


FAMILY = UltravoxFamily()
