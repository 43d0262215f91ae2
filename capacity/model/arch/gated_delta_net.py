"""What vLLM 0.33's Qwen Gated DeltaNet layer allocates, as an allocation program (pure arithmetic, no torch).

vLLM runs these layers (Qwen3-Next, Qwen3.5, `QwenGatedDeltaNetAttention` in
vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py) with its own fused kernels, never transformers'
PyTorch fallbacks (`torch_chunk_gated_delta_rule`, the torch `causal_conv1d_fn`), which materialise per-chunk
float32 blocks ([B, H, n_chunks, 64, 64] masks, decays, attention) and pad every request to a multiple of 64 tokens.

**The profile run does not run the layer's core.** MRV2's `profile_run` calls `_dummy_run(max_num_batched_tokens,
skip_attn=True)` (vllm/v1/worker/gpu/model_runner.py), which builds no attention metadata, so `_forward_core` finds
`attn_metadata is None`, warms the prefill kernels up once per layer on 64 dummy tokens
(`_warmup_prefill_kernels`) and returns: no causal conv1d, no chunked delta rule on the batch, and
`core_attn_out` stays the zeros `forward_cuda` made. What the layer allocates then is `profile_run_program`:

  forward_cuda (T tokens; Hk key heads, Hv value heads, K, V head sizes, D hidden, all per rank; d = model dtype)
    mixed_qkvz   [T, 2 Hk K + 2 Hv V] d     in_proj_qkvz (MergedColumnParallelLinear)
    ba           [T, 2 Hv] d                in_proj_ba
    Qwen3-Next (gqa_interleaved_layout): fix_query_key_value_ordering's reshapes of strided views copy
    value [T, Hv, V] d, z [T, Hv, V] d, b [T, Hv] d, a [T, Hv] d; rearrange "l p d -> l (p d)" copies
    query [T, Hk K] d and key [T, Hk K] d (value is contiguous by then: a view); torch.cat gives
    mixed_qkv [T, 2 Hk K + Hv V] d. All are forward_cuda's locals: alive until it returns.
    Qwen3.5 (flat layout): mixed_qkv, z, b, a are views of the projections; the custom op's arguments
    b.contiguous() and a.contiguous() copy [T, Hv] d each, dropped when the op returns.
    core_attn_out [T, Hv, V] d              torch.zeros
    _forward_core -> _warmup_prefill_kernels, the first call of each layer only (`warmup_program`, freed)
    norm output  [T, Hv, V] d               RMSNormGated: a CustomOp that vLLM's default compilation
                                            (custom_ops "none") runs as forward_native, compiled by Inductor
                                            into one kernel: its float32 temporaries are not materialised
    output       [T, D] d                   out_proj (RowParallelLinear)

Lifetimes are those of that Python source run eagerly. vLLM compiles the ops around its custom op with Inductor by
default, which can free mixed_qkvz and ba once the copies exist and fuse Qwen3-Next's query / key / value copies into
the cat: for the layer an upper bound, by up to those tensors. With one key head per rank the Qwen3-Next reshapes are
views, not copies; the program keeps them (the trace builds the whole model, with every key head).

`warmup_program` is `_warmup_prefill_kernels` at T = FLA_CHUNK_SIZE = 64: its dummy inputs, fused_post_conv_prep's
q/k/v/g/beta, a zero initial state, then the chunked delta rule (`chunk_program`, the Triton/FLA path). On compute
capability 9.0 (and 10.x / 12.x with CUDA 13) vLLM 0.33 picks FlashInfer's GDN prefill instead, whose allocations
inside FlashInfer are not read here: the Triton/FLA path stands in for them (64 tokens: a few MiB at most).

`chunk_program` is the Triton/FLA chunked path (vllm/third_party/flash_linear_attention/ops/chunk.py:
chunk_gated_delta_rule_fwd) for T packed tokens in N sequences and NT chunks of 64 (NT = sum of cdiv(len, 64));
every tensor is linear in T or NT, none is padded per request, none is [n_chunks, 64, 64] per sequence:
    g_cumsum [1, T, Hv] f32       cumsum.py:chunk_local_cumsum (output_dtype float)
    A        [1, T, Hv, 64] f32   chunk_scaled_dot_kkt.py:chunk_scaled_dot_kkt_fwd (output_dtype float32)
    Ai       [1, T, Hv, 64] d     solve_tril.py:solve_tril (zeros_like, output_dtype k.dtype); A is then dropped
    u        [1, T, Hv, V] d      wy_fast.py:recompute_w_u_fwd (empty_like(v))
    w        [1, T, Hv, K] d      wy_fast.py:recompute_w_u_fwd (k.new_empty)
    h        [1, NT, Hv, V, K] d  chunk_delta_h.py:chunk_gated_delta_rule_fwd_h (k.new_empty)
    final    [N, Hv, V, K] f32    chunk_delta_h.py (output_final_state)
    v_new    [1, T, Hv, V] d      chunk_delta_h.py (empty_like(u))
    o        [1, T, Hv, V] d      chunk_o.py:chunk_fwd_o (empty_like(v), unless core_attn_out is passed)
Left out: `prepare_chunk_indices` / `prepare_chunk_offsets` (2 NT and N + 1 int32 per call, one 512-byte block each).

Outside the profile run (warmup_kernels, serving) vLLM also runs the conv path
(vllm/model_executor/layers/mamba/ops/causal_conv1d.py:causal_conv1d_fn: `out = torch.empty_like(x)`, [conv dim, T] d)
and fused_post_conv_prep (q, k [T, Hk, K] d, v [T, Hv, V] d, g, beta [T, Hv] f32) before `chunk_program`; those
batches do not set vLLM's KV budget, so capacity does not model them.

`run_as_vllm` makes transformers' modules allocate `profile_run_program` while the profiler or the fake-tensor trace
runs them (the `Family.run_layers_as_vllm` hook; torch imported inside).

Sizes here are per module as built: the fake-tensor trace builds the whole model (TP 1) and the planner turns its
terms into one rank's (capacity/memory/rank_scaling.py RankScaling).
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Any

from capacity.kv.layers import DTYPE_BYTES, GatedDeltaNetLayer

BYTES = {**DTYPE_BYTES, "int32": 4}  # the dtypes the programs use

FLA_CHUNK_SIZE = 64  # vllm/third_party/flash_linear_attention/ops/utils.py: FLA_CHUNK_SIZE
ALLOCATOR_BLOCK = 512  # CUDA caching allocator: every allocation is a multiple of kMinBlockSize


@dataclass(frozen=True)
class Alloc:
    """One tensor vLLM allocates: its name (unique within a program), shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def bytes(self) -> int:
        n = BYTES[self.dtype]
        for s in self.shape:
            n *= s
        return n

    @property
    def allocator_bytes(self) -> int:
        """What the CUDA caching allocator takes for it: rounded up to 512 B (at least one block)."""
        return max(ALLOCATOR_BLOCK, -(-self.bytes // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK)


@dataclass(frozen=True)
class Free:
    """The last reference to an earlier allocation is dropped."""

    name: str


Step = Alloc | Free


@dataclass(frozen=True)
class GatedDeltaNetDims:
    """The sizes the layer's tensors are made of, per module as built (whole model in the trace)."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    hidden_size: int
    dtype: str  # the model dtype
    state_dtype: str  # the recurrent state's (vLLM gated_delta_net_state_dtype: mamba_ssm_dtype, else the model's)
    interleaved: bool  # vLLM's gqa_interleaved_layout: True for Qwen3-Next, False for Qwen3.5

    @classmethod
    def of(cls, layer: GatedDeltaNetLayer, hidden_size: int, dtype: str, interleaved: bool) -> GatedDeltaNetDims:
        return cls(layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim, hidden_size, dtype, layer.ssm_dtype or dtype, interleaved)

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


def chunk_program(d: GatedDeltaNetDims, tokens: int, sequences: int, chunks: int) -> tuple[Step, ...]:
    """chunk.py:chunk_gated_delta_rule_fwd (Triton/FLA) on `tokens` packed tokens of `sequences` sequences in `chunks`
    chunks of 64, use_qk_l2norm_in_kernel=False, output_final_state=True, no core_attn_out; everything it made is
    dropped at the end (the warmup keeps nothing)."""
    t, hv, k, v = tokens, d.num_v_heads, d.head_k_dim, d.head_v_dim
    made = (
        Alloc("g_cumsum", (1, t, hv), "float32"),  # chunk_local_cumsum
        Alloc("A", (1, t, hv, FLA_CHUNK_SIZE), "float32"),  # chunk_scaled_dot_kkt_fwd
        Alloc("Ai", (1, t, hv, FLA_CHUNK_SIZE), d.dtype),  # solve_tril
    )
    made_after = (
        Alloc("u", (1, t, hv, v), d.dtype),  # recompute_w_u_fwd
        Alloc("w", (1, t, hv, k), d.dtype),
        Alloc("h", (1, chunks, hv, v, k), d.dtype),  # chunk_gated_delta_rule_fwd_h
        Alloc("final_state", (sequences, hv, v, k), "float32"),
        Alloc("v_new", (1, t, hv, v), d.dtype),
        Alloc("o", (1, t, hv, v), d.dtype),  # chunk_fwd_o
    )
    # `A = solve_tril(A=A, ...)` drops the float32 A once Ai exists.
    return (*made, Free("A"), *made_after, *(Free(a.name) for a in (made[0], made[2], *made_after)))


def warmup_program(d: GatedDeltaNetDims) -> tuple[Step, ...]:
    """QwenGatedDeltaNetAttention._warmup_prefill_kernels: 64 dummy tokens through fused_post_conv_prep and the
    chunked delta rule; all of it dropped before the layer goes on."""
    t, hk, hv = FLA_CHUNK_SIZE, d.num_k_heads, d.num_v_heads
    inputs = (
        Alloc("dummy_mixed_qkv", (t, d.conv_dim), d.dtype),  # torch.randn
        Alloc("dummy_a", (t, hv), d.dtype),
        Alloc("dummy_b", (t, hv), d.dtype),
        Alloc("q", (t, hk, d.head_k_dim), d.dtype),  # fused_post_conv_prep
        Alloc("k", (t, hk, d.head_k_dim), d.dtype),
        Alloc("v", (t, hv, d.head_v_dim), d.dtype),
        Alloc("g", (t, hv), "float32"),
        Alloc("beta", (t, hv), "float32"),
        Alloc("state", (1, hv, d.head_v_dim, d.head_k_dim), d.state_dtype),  # torch.zeros, get_state_dtype()
        Alloc("cu_seqlens", (2,), "int32"),
    )
    return (*inputs, *chunk_program(d, t, 1, 1), *(Free(a.name) for a in inputs))


def profile_run_program(d: GatedDeltaNetDims, tokens: int, *, first_call: bool) -> tuple[Step, ...]:
    """QwenGatedDeltaNetAttention.forward_cuda with no attention metadata (MRV2 profile_run, skip_attn=True) on
    `tokens` tokens; `first_call`: the layer's kernel warmup runs (once per layer). Ends with `output` alive."""
    t, hv = tokens, d.num_v_heads
    steps: list[Step] = [
        Alloc("mixed_qkvz", (t, 2 * d.key_dim + 2 * d.value_dim), d.dtype),  # in_proj_qkvz
        Alloc("ba", (t, 2 * hv), d.dtype),  # in_proj_ba
    ]
    if d.interleaved:  # fix_query_key_value_ordering, rearrange, torch.cat
        steps += [
            Alloc("value", (t, hv, d.head_v_dim), d.dtype),
            Alloc("z", (t, hv, d.head_v_dim), d.dtype),
            Alloc("b", (t, hv), d.dtype),
            Alloc("a", (t, hv), d.dtype),
            Alloc("query", (t, d.key_dim), d.dtype),
            Alloc("key", (t, d.key_dim), d.dtype),
            Alloc("mixed_qkv", (t, d.conv_dim), d.dtype),
        ]
    steps.append(Alloc("core_attn_out", (t, hv, d.head_v_dim), d.dtype))  # torch.zeros
    if not d.interleaved:  # b.contiguous(), a.contiguous() of ba's chunks, passed to the custom op
        steps += [Alloc("b_contiguous", (t, hv), d.dtype), Alloc("a_contiguous", (t, hv), d.dtype)]
    if first_call:
        steps += warmup_program(d)
    if not d.interleaved:
        steps += [Free("b_contiguous"), Free("a_contiguous")]
    steps += [
        Alloc("normed", (t, hv, d.head_v_dim), d.dtype),  # self.norm(core_attn_out, z)
        Alloc("output", (t, d.hidden_size), d.dtype),  # out_proj
    ]
    held = [s.name for s in steps if isinstance(s, Alloc)]
    freed = {s.name for s in steps if isinstance(s, Free)}
    steps += [Free(name) for name in held if name not in freed and name != "output"]
    return tuple(steps)


def held_after_each_step(program: tuple[Step, ...]) -> list[int]:
    """The bytes the program holds after each step, each allocation as the CUDA caching allocator rounds it."""
    live: dict[str, int] = {}
    held = []
    for step in program:
        if isinstance(step, Alloc):
            live[step.name] = step.allocator_bytes
        else:
            del live[step.name]
        held.append(sum(live.values()))
    return held


def peak_bytes(program: tuple[Step, ...]) -> int:
    """The most the program holds at once."""
    return max(held_after_each_step(program), default=0)


def held_bytes(program: tuple[Step, ...]) -> int:
    """What the program still holds at its end (the layer's output)."""
    held = held_after_each_step(program)
    return held[-1] if held else 0


# --- transformers' modules made to allocate this (the profiler and the fake-tensor trace; torch inside) -----------

# transformers' module class -> vLLM's gqa_interleaved_layout for the model that has it
# (vllm/model_executor/models/qwen3_next.py: True; qwen3_5.py, which Qwen3.5-MoE uses too: False).
VLLM_LAYOUT_INTERLEAVED = {
    "Qwen3NextGatedDeltaNet": True,
    "Qwen3_5GatedDeltaNet": False,
    "Qwen3_5MoeGatedDeltaNet": False,
}


def run_as_vllm(model: Any, layer: GatedDeltaNetLayer | None) -> str:
    """Replace the `forward` of every transformers Gated DeltaNet module of `model` by one that allocates, in order
    and for as long, the tensors `profile_run_program` lists for its batch, and returns zeros of the output's shape
    as vLLM's profile run does (its core is skipped, so `core_attn_out` stays zeros). Memory only: the layer's values
    are not computed. Later calls of a module (capacity's warmup batches, CUDA-graph captures) allocate the same
    program without the one-time kernel warmup. Returns the words every figure measured so carries; "" for none."""
    count = 0
    for module in model.modules():
        interleaved = VLLM_LAYOUT_INTERLEAVED.get(type(module).__name__)
        if interleaved is not None:
            module.forward = types.MethodType(_profile_run_forward(interleaved, layer.ssm_dtype if layer else None), module)
            count += 1
    if not count:
        return ""
    return (
        f"{count} Gated DeltaNet layers allocate what vLLM 0.33's profile run allocates for them, estimated from vLLM's "
        "source (capacity/model/arch/gated_delta_net.py: projections, layout copies, zero output, the 64-token kernel warmup; its "
        "core is skipped without attention metadata), not transformers' PyTorch fallback; their values are not computed"
    )


def _profile_run_forward(interleaved: bool, ssm_dtype: str | None) -> Any:
    called = [False]

    def forward(self: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        dtype = str(hidden_states.dtype).removeprefix("torch.")
        dims = GatedDeltaNetDims(self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim, self.hidden_size, dtype, ssm_dtype or dtype, interleaved)
        *batch, _ = hidden_states.shape
        live: dict[str, Any] = {}
        for step in profile_run_program(dims, math.prod(batch), first_call=not called[0]):
            if isinstance(step, Alloc):
                make = torch.zeros if step.name in ("core_attn_out", "output") else torch.empty
                live[step.name] = make(step.shape, dtype=getattr(torch, step.dtype), device=hidden_states.device)
            else:
                del live[step.name]
        called[0] = True
        return live.pop("output").view(*batch, dims.hidden_size)

    return forward
