"""MiniCPM-Llama3-V 2.5's modules, composed from transformers' parts: the Hub's MiniCPMV is remote code, and vLLM's
MiniCPMV2_5 (vllm/model_executor/models/minicpmv.py, layers/resampler.py) is an Idefics2 vision tower, a perceiver
resampler and a Llama LLM.

- `vpm`: transformers' Idefics2VisionTransformer from `vision_config` (its last layer dropped when
  drop_vision_last_layer, as vLLM builds it);
- `resampler`: Resampler2_5: `query_num` learned queries attend the slice's patches (kv_proj to the LLM width,
  LayerNorms on queries and keys, nn.MultiheadAttention with the patches' 2-D position embedding added to the keys,
  a LayerNorm and the output projection);
- `llm`: LlamaForCausalLM from config.json itself (build_causal_lm).

No torch / transformers import at module level (package layering rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capacity.model.arch.hf import build_causal_lm, build_context, resolve_dtype

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn


def build_minicpmv(
    vision: dict[str, Any],
    llm: dict[str, Any],
    *,
    vision_layers: int,
    query_num: int,
    device: str = "meta",
    dtype: str | Any = "bfloat16",
    init_weights: bool | None = None,
    attn_implementation: str | None = None,
) -> nn.Module:
    """The composed MiniCPM-V 2.5 model (attributes vpm, resampler, llm)."""
    from torch import nn
    from transformers.models.idefics2.configuration_idefics2 import Idefics2VisionConfig
    from transformers.models.idefics2.modeling_idefics2 import Idefics2VisionTransformer

    torch_dtype = resolve_dtype(dtype, llm)
    if init_weights is None:
        init_weights = device != "meta"
    language_model = build_causal_lm(llm, device=device, dtype=torch_dtype, init_weights=init_weights, attn_implementation=attn_implementation)
    width = int(language_model.config.hidden_size)
    with build_context(device, torch_dtype, init_weights=init_weights):
        raw = {k: v for k, v in vision.items() if k != "model_type"}
        tower_config = Idefics2VisionConfig(**{**raw, "num_hidden_layers": vision_layers})
        tower_config._attn_implementation = attn_implementation or "sdpa"
        tower = Idefics2VisionTransformer(tower_config)
        resampler = _resampler_class()(query_num, width, int(tower_config.hidden_size))
    model = nn.Module()
    model.vpm = tower
    model.resampler = resampler
    model.llm = language_model
    return model


def _resampler_class() -> type:
    import torch
    from torch import nn

    class Resampler(nn.Module):
        """Resampler2_5 (vLLM layers/resampler.py): heads of 128 channels, keys projected when the tower is narrower."""

        def __init__(self, queries: int, width: int, kv_width: int) -> None:
            super().__init__()
            self.query = nn.Parameter(torch.empty(queries, width))
            self.kv_proj = nn.Linear(kv_width, width, bias=False) if kv_width != width else nn.Identity()
            self.attn = nn.MultiheadAttention(width, width // 128)
            self.ln_q, self.ln_kv, self.ln_post = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
            self.proj = nn.Parameter(torch.empty(width, width))

        def forward(self, patches: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
            """patches (slices, positions, kv_width), padding (slices, positions) True where padded -> (slices, queries, width)."""
            keys = self.ln_kv(self.kv_proj(patches)).permute(1, 0, 2)  # (positions, slices, width)
            positions = torch.zeros_like(keys)  # the 2-D sin/cos embedding of each patch's place (get_2d_sincos_pos_embed)
            queries = self.ln_q(self.query).unsqueeze(1).expand(-1, keys.shape[1], -1)
            out = self.attn(queries, keys + positions, keys, key_padding_mask=padding, need_weights=False)[0]
            return self.ln_post(out.permute(1, 0, 2)) @ self.proj

    return Resampler
