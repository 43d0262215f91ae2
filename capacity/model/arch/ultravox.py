"""Ultravox's modules, composed from transformers' parts: the Hub's UltravoxModel is remote code, and vLLM's
(vllm/model_executor/models/ultravox.py) is a Whisper encoder, a feed-forward projector and an LLM.

- `audio_tower`: transformers' WhisperEncoder from `audio_config`, its K projections given the bias vLLM's fused
  qkv_proj allocates (QKVParallelLinear(bias=True)) and the checkpoint lacks;
- `multi_modal_projector`: UltravoxFeedForwardProjector: stack `stack_factor` frames (padding the last), RMSNorm,
  linear_1, SwiGLU (halves the width) or another activation, RMSNorm (ln_mid, or ln_post after linear_2), linear_2;
- `language_model`: the LLM's *ForCausalLM built from its config (build_causal_lm).

No torch / transformers import at module level (package layering rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.model.arch.hf import build_causal_lm, build_context, resolve_dtype

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn


def build_ultravox(
    audio: dict[str, Any],
    llm: dict[str, Any],
    *,
    stack_factor: int,
    projector_hidden: int,
    projector_act: str,
    ln_mid: bool,
    device: str = "meta",
    dtype: str | Any = "bfloat16",
    init_weights: bool | None = None,
    attn_implementation: str | None = None,
) -> nn.Module:
    """The composed Ultravox model (attributes audio_tower, multi_modal_projector, language_model)."""
    from torch import nn
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch_dtype = resolve_dtype(dtype, llm)
    if init_weights is None:
        init_weights = device != "meta"
    language_model = build_causal_lm(llm, device=device, dtype=torch_dtype, init_weights=init_weights, attn_implementation=attn_implementation)
    llm_hidden = int(language_model.config.hidden_size)
    with build_context(device, torch_dtype, init_weights=init_weights):
        raw = {k: v for k, v in audio.items() if k != "model_type"}
        tower_config = WhisperConfig(**raw)
        tower_config._attn_implementation = attn_implementation or "sdpa"
        tower = WhisperEncoder(tower_config)
        for layer in tower.layers:
            d = layer.self_attn.k_proj.in_features
            layer.self_attn.k_proj = nn.Linear(d, layer.self_attn.k_proj.out_features, bias=True)
        projector = _projector_class()(tower_config.d_model * stack_factor, projector_hidden, llm_hidden, stack_factor, projector_act, ln_mid)
    model = nn.Module()
    model.audio_tower = tower
    model.multi_modal_projector = projector
    model.language_model = language_model
    return model


def _projector_class() -> type:
    import torch
    from torch import nn

    class Projector(nn.Module):
        """UltravoxFeedForwardProjector (vLLM ultravox.py), with StackAudioFrames before it."""

        def __init__(self, stacked: int, hidden: int, out: int, stack: int, act: str, ln_mid: bool) -> None:
            super().__init__()
            self.stack = stack
            self.swiglu = act == "swiglu"
            mid = hidden // 2 if self.swiglu else hidden
            self.ln_pre = nn.RMSNorm(stacked)
            self.linear_1 = nn.Linear(stacked, hidden, bias=False)
            self.ln_mid = nn.RMSNorm(mid) if ln_mid else nn.Identity()
            self.linear_2 = nn.Linear(mid, out, bias=False)
            self.ln_post = nn.Identity() if ln_mid else nn.RMSNorm(out)

        def forward(self, frames: torch.Tensor) -> torch.Tensor:
            batch, length, width = frames.shape
            padded = -(-length // self.stack) * self.stack
            frames = nn.functional.pad(frames, (0, 0, 0, padded - length))
            x = self.ln_pre(frames.reshape(batch, padded // self.stack, width * self.stack))
            x = self.linear_1(x)
            if self.swiglu:
                gate, up = x.chunk(2, dim=-1)
                x = nn.functional.silu(gate) * up
            else:
                x = nn.functional.gelu(x)
            return self.ln_post(self.linear_2(self.ln_mid(x)))

    return Projector
