"""Whisper (WhisperForConditionalGeneration): audio encoder, decoder with self + cross attention."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.model.families.common import config_dtype, need, self_and_cross_layers
from capacity.model.family import EncoderInput, Family
from capacity.model.shard_rules import ShardRules
from capacity.model.spec import (
    DecoderShape,
    EncoderShape,
    Modality,
    ModelSpec,
    VllmSupport,
    derive_max_model_len,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from capacity.source.resolve import ModelSource


class WhisperFamily(Family):
    name = "whisper"
    model_types = ("whisper",)
    hf_class = "WhisperForConditionalGeneration"
    verify_decoder_path = ("model", "decoder")
    # vLLM whisper.py: WhisperDecoder.embed_tokens is an nn.Embedding (unsharded); proj_out is a ParallelLMHead tied to it.
    vllm_unsharded_modules = (r"(^|\.)decoder\.embed_tokens$",)
    # vLLM whisper.py builds qkv_proj and the cross-attention kv_proj with bias=True: the K projections get a zero bias
    # the checkpoint lacks (checked against vLLM's own model on the meta device: bench/vllm_weights_reference.py).
    vllm_added_biases = (r"\.k_proj$",)
    # vLLM whisper.py: QKVParallelLinear / RowParallelLinear out_proj, fc1/fc2 Column/Row; decoder.embed_tokens is a
    # plain nn.Embedding; proj_out is a ParallelLMHead tied to it.
    tensor_parallel_rules = ShardRules(
        column=r"\.(q_proj|k_proj|v_proj|fc1)$",
        row=r"\.(out_proj|fc2)$",
        vocab_embedding="",
        lm_head=r"^proj_out$",
        encoder=r"^model\.encoder\.",
    )

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        d_model = need(config, "d_model", "whisper")
        heads = need(config, "decoder_attention_heads", "whisper")
        n_dec = need(config, "decoder_layers", "whisper")
        # vLLM: WhisperProcessingInfo.get_num_audio_tokens = max_source_positions (1500 for 30 s).
        source_positions = need(config, "max_source_positions", "whisper")
        head_size = d_model // heads
        layers = self_and_cross_layers(n_dec, heads, head_size)
        max_len, key = derive_max_model_len(config)
        return ModelSpec(
            name=name,
            family=self,
            architecture="WhisperForConditionalGeneration",
            is_encoder_decoder=True,
            config_dtype=config_dtype(config),
            layers=layers,
            modalities=(Modality("audio", source_positions, 1),),
            derived_max_model_len=max_len,
            max_len_key=key,
            max_source_positions=source_positions,
            encoder_tokens_per_request=source_positions,
            num_attention_heads=heads,
            # vllm/model_executor/models/whisper.py: proj_out is tied to decoder.embed_tokens, a whole nn.Embedding
            decoder=DecoderShape(d_model, need(config, "decoder_ffn_dim", "whisper"), False, need(config, "vocab_size", "whisper"), n_dec, lm_head_sharded=False),
            encoder=EncoderShape(
                seq_len=source_positions,
                hidden_size=d_model,
                ffn_size=need(config, "encoder_ffn_dim", "whisper"),
                num_layers=need(config, "encoder_layers", "whisper"),
                output_hidden_size=d_model,
            ),
            vllm_support=VllmSupport("native", "WhisperForConditionalGeneration (vllm/model_executor/models/whisper.py)"),
            notes=("30 s of 16 kHz audio -> 3000 mel frames -> 1500 encoder positions per item",),
        )

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """The real feature extractor on 30 s of 16 kHz audio -> (mel bins, 3000) frames."""
        import numpy as np
        from transformers import WhisperFeatureExtractor

        pre = dict(source.preprocessor or {})
        mel = int(source.config.get("num_mel_bins", 80))
        extractor = WhisperFeatureExtractor(feature_size=pre.get("feature_size", mel), sampling_rate=pre.get("sampling_rate", 16000))
        seconds = extractor.chunk_length
        audio = np.random.default_rng(0).standard_normal(seconds * extractor.sampling_rate).astype(np.float32) * 0.1
        feats = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="pt").input_features
        return EncoderInput(
            {"input_features": feats.to(device=device, dtype=dtype)},
            f"WhisperFeatureExtractor on {seconds} s of {extractor.sampling_rate} Hz audio -> {tuple(feats.shape[1:])} log-mel frames",
        )

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        feats = item.tensors["input_features"].expand(count, -1, -1).contiguous()
        out = model.model.encoder(input_features=feats).last_hidden_state
        return list(out.unbind(0))

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        return model.model.decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, use_cache=False).last_hidden_state

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.proj_out(hidden)


FAMILY = WhisperFamily()
