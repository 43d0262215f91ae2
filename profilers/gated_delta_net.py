"""Gated DeltaNet layers profiled as vLLM 0.33 runs them, not as transformers' PyTorch fallback computes them.

transformers' Qwen3-Next / Qwen3.5 Gated DeltaNet modules run `torch_chunk_gated_delta_rule` and a torch causal conv1d
when flash-linear-attention / causal-conv1d are not installed; those hold per-chunk float32 blocks vLLM never
allocates (vLLM runs fused kernels, and in its profile run not even those: capacity/gated_delta_net.py). While the
profiler or the fake-tensor trace runs, each such module's `forward` is replaced by one that allocates, in order and
for as long, the tensors capacity/gated_delta_net.py:profile_run_program lists for its batch, and returns zeros of
the output's shape, as vLLM's profile run does (its core is skipped, so `core_attn_out` stays zeros). **Memory only:
the layer's values are not computed.** Later calls of the same module (capacity's warmup batches, CUDA-graph captures)
allocate the same program without the one-time kernel warmup; vLLM runs its real kernels there, which capacity does
not model (those batches do not set the KV budget).
"""

from __future__ import annotations

import types
from typing import Any

from capacity.gated_delta_net import Alloc, GatedDeltaNetDims, profile_run_program
from capacity.kv_layers import GatedDeltaNetLayer
from capacity.spec import ModelSpec

# transformers' module class -> vLLM's gqa_interleaved_layout for the model that has it
# (vllm/model_executor/models/qwen3_next.py: True; qwen3_5.py, also for qwen3_5_moe: False).
VLLM_LAYOUT_INTERLEAVED = {
    "Qwen3NextGatedDeltaNet": True,
    "Qwen3_5GatedDeltaNet": False,
    "Qwen3_5MoeGatedDeltaNet": False,
}


def modelled_layers_note(count: int) -> str:
    """The words every figure measured with these modules carries (MemoryProfile.modelled_layers)."""
    return (
        f"{count} Gated DeltaNet layers allocate what vLLM 0.33's profile run allocates for them, estimated from vLLM's "
        "source (capacity/gated_delta_net.py: projections, layout copies, zero output, the 64-token kernel warmup; its "
        "core is skipped without attention metadata), not transformers' PyTorch fallback; their values are not computed"
    )


def run_as_vllm(model: Any, spec: ModelSpec) -> int:
    """Replace the forward of every transformers Gated DeltaNet module of `model` with vLLM's profile-run
    allocations; returns how many were replaced (0: the model has none)."""
    layer = next((x for x in spec.layers if isinstance(x, GatedDeltaNetLayer)), None)
    count = 0
    for module in model.modules():
        interleaved = VLLM_LAYOUT_INTERLEAVED.get(type(module).__name__)
        if interleaved is None:
            continue
        module.forward = types.MethodType(_vllm_profile_forward(interleaved, layer.ssm_dtype if layer else None), module)
        count += 1
    return count


def _vllm_profile_forward(interleaved: bool, ssm_dtype: str | None) -> Any:
    called = [False]

    def forward(self: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        dtype = str(hidden_states.dtype).removeprefix("torch.")
        dims = GatedDeltaNetDims(self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim, self.hidden_size, dtype, ssm_dtype or dtype, interleaved)
        *batch, _ = hidden_states.shape
        tokens = 1
        for n in batch:
            tokens *= n
        live: dict[str, Any] = {}
        for step in profile_run_program(dims, tokens, first_call=not called[0]):
            if isinstance(step, Alloc):
                make = torch.zeros if step.name in ("core_attn_out", "output") else torch.empty
                live[step.name] = make(step.shape, dtype=getattr(torch, step.dtype), device=hidden_states.device)
            else:
                del live[step.name]
        called[0] = True
        return live.pop("output").view(*batch, dims.hidden_size)

    return forward
