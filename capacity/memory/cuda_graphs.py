"""The CUDA-graph memory vLLM sets aside before it sizes the KV cache (estimated).

What vLLM measures. Both model runners capture the decoder's graphs once, into a throwaway pool, before the KV cache
is sized, and read the drop in free memory (cudaMemGetInfo) as the estimate they subtract from the KV budget:
- PIECEWISE graphs first, largest size first: vLLM splits the compiled decoder at every attention (or mamba / GDN)
  op, so each capture size is `num_layers + 1` graphs. Model Runner V2 (0.29-0.33,
  `cudagraph_utils.profile_cudagraph_memory`) measures every PIECEWISE graph in full; the V1 runner (0.19-0.28,
  `GPUModelRunner.profile_cudagraph_memory`) measures the first two sizes and charges
  `first + (n - 1) x max(second, 1 MiB)`.
- FULL decode graphs (one graph per size up to max_num_seqs) into the same pool: both runners capture the two largest
  and extrapolate `s1 + (n - 1) x max(s2, 1 MiB)` (`_extrapolate_full_graph_memory`). FULL and PIECEWISE share the
  pool, so the V1 runner takes the larger first capture of the two modes, not their sum.
Encoder-decoder models capture FULL decode graphs only (FULL_DECODE_ONLY).

What a capture costs (`GraphCaptureCost`), measured on the H200 (bench/cuda_graph_memory.py,
bench/results/h200-cuda-graph-memory-2026-12-01: torch 2.11, CUDA 13.0, driver 580.159.04) by capturing Qwen3-0.6B,
-8B and -32B-wide decoders piece by piece with Inductor-compiled pieces (vLLM's kernels are not on that machine):
- the first size: torch's cache of the warmup forward plus the pool (43 MiB + 1.38 x the decoder's activations at that
  size: 58, 102 and 156 MiB measured) and a one-time ~70 MiB outside torch when the first graphs are instantiated;
- every further PIECEWISE graph: 140 KiB outside torch (136, 142, 142 KiB per graph measured), the driver's copy of
  the graph; the pool is reused;
- every FULL graph: 40 KiB per decoder layer (37, 35, 40 KiB measured) once the PIECEWISE graphs filled the pool.
Eager pieces (torch's unfused kernels: more nodes) cost 175-180 KiB per graph. vLLM's pieces run fused custom ops
and Inductor kernels, so the compiled figures stand for them. The driver's share depends on the driver and the GPU:
public logs of other GPUs are the check (bench/cuda_graphs/).
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity.memory.activations import decoder_activation_bytes
from capacity.memory.term import ESTIMATED, EXACT, MemoryTerm
from capacity.model.spec import DecoderShape, ModelSpec
from capacity.serving.config import ServingConfig
from capacity.units import KiB, MiB

MIN_GRAPH_BYTES = 1 * MiB  # _extrapolate_full_graph_memory's floor per extra graph (and the V1 runner's)


@dataclass(frozen=True)
class GraphCaptureCost:
    """Free memory one capture takes, by part (H200-measured; see the module docstring)."""

    torch_base_bytes: int = 43 * MiB  # the first size's torch growth at no activations (fit over the three decoders)
    activation_factor: float = 1.38  # warmup cache + graph pool, x decoder_activation_bytes at the largest size
    driver_first_bytes: int = 70 * MiB  # outside torch when the first graphs are instantiated
    piece_graph_bytes: int = 140 * KiB  # each PIECEWISE graph (one piece of one size)
    full_graph_bytes_per_layer: int = 40 * KiB  # each FULL decode graph, per decoder layer
    basis: str = "H200-measured capture costs (capacity/memory/cuda_graphs.py)"

    def first_size_bytes(self, activation_bytes: int, graphs: int) -> int:
        """The first (largest) size's capture: the torch growth, the driver's one-time memory and its graphs."""
        return self.torch_base_bytes + round(self.activation_factor * activation_bytes) + self.driver_first_bytes + graphs * self.piece_graph_bytes

    def full_graph_bytes(self, decoder: DecoderShape) -> int:
        return decoder.num_layers * self.full_graph_bytes_per_layer


H200_CAPTURE = GraphCaptureCost()


def pieces_per_size(decoder: DecoderShape) -> int:
    """vLLM's piecewise split (CompilationConfig.splitting_ops: the attention and mamba-like ops): one graph before
    the first layer's attention, one after each."""
    return decoder.num_layers + 1


@dataclass(frozen=True)
class GraphEstimate:
    """The CUDA-graph estimate a model runner subtracts, by mode."""

    piecewise_sizes: int
    full_sizes: int
    piecewise_bytes: int
    full_bytes: int
    total_bytes: int
    how: str


def mrv2_estimate(decoder: DecoderShape, activation_bytes: int, piecewise_sizes: int, full_sizes: int, cost: GraphCaptureCost = H200_CAPTURE) -> GraphEstimate:
    """Model Runner V2 (cudagraph_utils.profile_cudagraph_memory): every PIECEWISE graph measured, then the FULL graphs
    extrapolated from the two largest, s1 + (n - 1) x max(s2, 1 MiB). `activation_bytes`: the decoder's activations at
    the largest size captured first."""
    pieces = pieces_per_size(decoder)
    full_graph = cost.full_graph_bytes(decoder)
    if piecewise_sizes:
        piecewise = cost.first_size_bytes(activation_bytes, pieces) + (piecewise_sizes - 1) * pieces * cost.piece_graph_bytes
        s1 = full_graph  # the pool already holds the larger PIECEWISE activations
    else:
        piecewise = 0
        s1 = cost.first_size_bytes(activation_bytes, 0) + full_graph  # FULL_DECODE_ONLY: the first FULL graph fills the pool
    full = s1 + (full_sizes - 1) * max(full_graph, MIN_GRAPH_BYTES) if full_sizes else 0
    how = (
        f"MRV2: {piecewise_sizes} PIECEWISE sizes x {pieces} pieces measured in full, {full_sizes} FULL decode graphs "
        f"extrapolated s1 + (n - 1) x max(s2, 1 MiB); {cost.basis}"
    )
    return GraphEstimate(piecewise_sizes, full_sizes, piecewise, full, piecewise + full, how)


def v1_estimate(decoder: DecoderShape, activation_bytes: int, piecewise_sizes: int, full_sizes: int, cost: GraphCaptureCost = H200_CAPTURE) -> GraphEstimate:
    """The V1 model runner (gpu_model_runner.py profile_cudagraph_memory, 0.19-0.28): per mode its first two captures,
    first + (n - 1) x max(second, 1 MiB); the decoder's estimate is the larger first capture + both modes' rest."""
    pieces = pieces_per_size(decoder)
    full_graph = cost.full_graph_bytes(decoder)
    full_rest = (full_sizes - 1) * max(full_graph, MIN_GRAPH_BYTES) if full_sizes else 0
    if piecewise_sizes:
        piecewise = cost.first_size_bytes(activation_bytes, pieces) + (piecewise_sizes - 1) * max(pieces * cost.piece_graph_bytes, MIN_GRAPH_BYTES)
        full = full_rest  # its first capture (full_graph) is below the PIECEWISE one: max() keeps the latter
    else:
        piecewise = 0
        full = cost.first_size_bytes(activation_bytes, 0) + full_graph + full_rest if full_sizes else 0
    how = (
        f"V1 runner: {piecewise_sizes} PIECEWISE sizes x {pieces} pieces and {full_sizes} FULL decode graphs, per mode "
        f"first + (n - 1) x max(second, 1 MiB), the larger first capture once; {cost.basis}"
    )
    return GraphEstimate(piecewise_sizes, full_sizes, piecewise, full, piecewise + full, how)


# --- which sizes vLLM captures -------------------------------------------------------------------------------

# vLLM: MODELS_CONFIG_MAP hooks that preset compilation_config.max_cudagraph_capture_size (when the user set
# neither it nor cudagraph_capture_sizes): GptOssForCausalLMConfig.verify_and_update_config raises it to 1024.
PRESET_MAX_CAPTURE_SIZE = {"GptOssForCausalLM": 1024}


def preset_max_capture_size(architecture: str) -> int | None:
    return PRESET_MAX_CAPTURE_SIZE.get(architecture)


def capture_sizes(serving: ServingConfig, sm100: bool, preset_max: int | None = None) -> list[int]:
    """vLLM: VllmConfig._set_cudagraph_sizes (no user capture sizes, default performance mode): the PIECEWISE sizes.

    `preset_max`: a model's preset max_cudagraph_capture_size; vLLM then skips the max_num_seqs-based ceiling and
    adds no uniform-decode sizes."""
    q = 1 + serving.num_speculative_tokens
    default_max = 1024 if sm100 else 512
    if preset_max is not None:
        cap = min(preset_max, serving.max_num_batched_tokens)
    else:
        cap = min(serving.max_num_seqs * q * 2, default_max, serving.max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= cap}
    sizes.update(range(8, min(cap + 1, 256), 8))
    sizes.update(range(256, cap + 1, 16))
    if serving.max_num_batched_tokens <= cap:
        sizes.add(serving.max_num_batched_tokens)
    if preset_max is None:  # uniform-decode sizes are added only under vLLM's own ceiling
        if q == 1:
            if serving.max_num_seqs <= cap:
                sizes.add(serving.max_num_seqs)
        else:
            m = min(serving.max_num_seqs, default_max)
            counts = {c for c in (1, 2, 4) if c <= m} | set(range(8, min(m + 1, 256), 8)) | set(range(256, m + 1, 16)) | {m}
            sizes.update(n * q for n in counts if n * q <= cap)
    return sorted(s for s in sizes if s <= serving.max_num_batched_tokens)


def full_decode_graph_sizes(serving: ServingConfig, sizes: list[int]) -> list[int]:
    """MRV2 CudaGraphManager FULL decode descriptors: sizes rounded up to the decode query length."""
    q = 1 + serving.num_speculative_tokens
    cap = max(sizes) if sizes else 0
    out = set()
    for s in sizes:
        r = -(-s // q) * q
        if r <= serving.max_num_seqs * q and r <= cap:
            out.add(r)
    return sorted(out)


# --- the CUDA-graph terms --------------------------------------------------------------------------------


def _graph_sizes(spec: ModelSpec, serving: ServingConfig, sm100: bool) -> tuple[list[int], list[int]]:
    """(PIECEWISE sizes, FULL decode sizes) vLLM captures; encoder-decoder models capture FULL decode graphs only."""
    sizes = capture_sizes(serving, sm100, preset_max_capture_size(spec.architecture))
    full = full_decode_graph_sizes(serving, sizes)
    return ([] if spec.is_encoder_decoder else sizes), full


def graph_estimate(spec: ModelSpec, serving: ServingConfig, sm100: bool, runner: str, cost: GraphCaptureCost = H200_CAPTURE) -> GraphEstimate | None:
    """The estimate of `runner` ("MRV2" or "V1"); None without CUDA graphs (--enforce-eager, no sizes)."""
    piecewise, full = _graph_sizes(spec, serving, sm100)
    if serving.enforce_eager or (not full and not piecewise):
        return None
    largest = max(piecewise or full)
    activations = decoder_activation_bytes(spec.decoder, largest, serving.dtype_bytes, serving.tensor_parallel_size)
    return (mrv2_estimate if runner == "MRV2" else v1_estimate)(spec.decoder, activations, len(piecewise), len(full), cost)


def _graph_term(spec: ModelSpec, serving: ServingConfig, sm100: bool, runner: str, cost: GraphCaptureCost) -> tuple[MemoryTerm, int]:
    if serving.enforce_eager:
        return MemoryTerm(0, EXACT, "--enforce-eager: no CUDA graphs"), 0
    estimate = graph_estimate(spec, serving, sm100, runner, cost)
    if estimate is None:
        return MemoryTerm(0, EXACT, "no CUDA-graph sizes"), 0
    mode = "FULL_DECODE_ONLY" if spec.is_encoder_decoder else "FULL_AND_PIECEWISE"
    return MemoryTerm(estimate.total_bytes, ESTIMATED, f"{mode}; {estimate.how}"), estimate.piecewise_sizes + estimate.full_sizes


def cuda_graph_term(spec: ModelSpec, serving: ServingConfig, sm100: bool, cost: GraphCaptureCost = H200_CAPTURE) -> tuple[MemoryTerm, int]:
    """Model Runner V2's estimate (0.29-0.33): every PIECEWISE graph measured, FULL decode graphs extrapolated."""
    return _graph_term(spec, serving, sm100, "MRV2", cost)


def v1_cuda_graph_term(spec: ModelSpec, serving: ServingConfig, sm100: bool, cost: GraphCaptureCost = H200_CAPTURE) -> tuple[MemoryTerm, int]:
    """The V1 model runner's estimate (0.19-0.28): the first two captures of each mode, extrapolated."""
    return _graph_term(spec, serving, sm100, "V1", cost)
