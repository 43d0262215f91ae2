"""The torch.compile cache a vLLM start finds: a cold one takes memory from the first start's KV cache.

vLLM compiles the decoder during the profile run that sizes the KV cache: `Worker.determine_available_memory` runs
`profile_run()` inside `memory_profiling()` in every version read (0.9.2 to 0.33.0, bench/compile_cache/EVIDENCE.md
section 3a), and nothing runs the model before it. On a cold cache, Inductor's autotuning, the AOT export and
JIT-compiled kernels allocate inside that window: vLLM counts the freed part as peak activation and the code that stays
as consumed (non-torch) memory, so the first start gets a smaller KV cache than a restart with the same flags (vLLM
issues #54383, #54122; PR #54479 is open, 0.33.0 unchanged). capacity plans a warm start by default (the steady
state, `--compile-cache warm`); `--compile-cache cold` plans the first start, and `reconcile` takes the state a log's
lines show.

The cache key holds the vLLM version, dtype, quantization, tensor parallelism, `max_num_batched_tokens` and
`max_model_len` (and, from 0.29, `max_num_seqs` through the graph sizes), not `gpu_memory_utilization`
(EVIDENCE.md section 3c): a new version or any of those flags starts cold, and so does every start of a container
whose cache directory (VLLM_CACHE_ROOT, ~/.cache/vllm) is not kept. `--enforce-eager` compiles nothing
(VllmConfig sets CompilationMode.NONE) and `--kv-cache-memory` skips the measurement.

**What a cold compile allocates** (`cold_compile_scratch`). From 0.12.0 vLLM turns on Inductor's combo kernels and
their benchmarking (`benchmark_combo_kernel`, torch >= 2.9). Compiling, Inductor times the kernel that gathers the
token embeddings on fresh copies of its arguments: the whole embedding table of the rank, the [tokens, hidden] output,
and its cache-flush buffer of the GPU's L2 size. The torch peak of a cold first forward is then

    S = vocab_per_rank x hidden x dtype + max_num_batched_tokens x hidden x dtype + L2 size

above what was allocated before it, while little else is live. The first launch of each kernel then autotunes it on
top of the activations live at that moment, with the same flush buffer and copies of what it writes (A =
max_num_batched_tokens x hidden x dtype + L2 size): vLLM's transient peak on a cold start is at least max(warm peak,
S) and at most max(warm peak + A, S), which capacity takes (an upper bound by up to A: A lands on the peak when the
forward's own peak is the warm one, not when a later or larger allocation is). Measured on the H200 (bench/results/h200-compile-cold-warm-2026-12-01: torch 2.11, transformers'
decoders under vLLM 0.33's Inductor options): Qwen3-8B at 2048 and 8192 tokens, Llama-3.1-8B, phi-4 and Qwen3-0.6B
peak within 1.2 MiB of S; with Inductor's default options (no combo benchmarking) the cold peak is the warm one plus
71 MB, and with the embeddings looked up outside the compiled graph plus 89 MB, where A is 80 MB; at 16,384 and 32,768
tokens (Llama-3.1-8B, Qwen3-0.6B), where the warm peak is far above S, cold and warm peaks are equal. The public vLLM pairs agree: Qwen3-32B-AWQ at TP 2 on RTX 4090s (0.28.0) printed cold peaks of 0.80
and 0.82 GiB where S is 0.809 and 0.824; Qwen2.5-3B-AWQ on an RTX 4050 Laptop (0.29.0) 0.67 where S is about 0.61.
Where the compiled model takes embeddings instead of token ids (a multimodal model with an input allowed: MRV2's
`uses_inputs_embeds`), or before 0.12, there is no S: the cold peak is the warm one + A.

A cold start can also leave part of that scratch reserved by the allocator (a split segment empty_cache cannot free:
phi-4 on the H200 kept 0.96 GiB; the RTX 4050 pair 0.53 GiB more "consumed"), which versions without the profile-time
split limit (`_scoped_allocator_max_split` around profile_run, 0.31.0+) count as consumed: not modelled. Nor is a
report of "tens of GiB" on RTX PRO 6000 Blackwell GPUs (a nightly, vllm#54122), which S does not explain.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from capacity.memory.term import ESTIMATED, MemoryTerm
from capacity.units import MiB

if TYPE_CHECKING:  # pragma: no cover - typing only
    from capacity.gpu.catalog import Gpu
    from capacity.model.spec import ModelSpec
    from capacity.serving.config import ServingConfig

# Inductor's flush buffer where the catalog does not know the GPU's L2: the largest L2 of a CUDA GPU it lists (the RTX
# PRO 6000's 128 MiB), an upper bound.
L2_UPPER_BOUND_BYTES = 128 * MiB

@dataclass(frozen=True)
class ColdCompileScratch:
    """What a cold compile adds to the profile's torch peak, by part; bytes on one rank."""

    embedding_bytes: int  # the rank's embedding table, benchmarked at compile time (0: not in the graph, or no benchmark)
    output_bytes: int  # the [max_num_batched_tokens, hidden] output the benchmark and the autotuning write
    flush_bytes: int  # Inductor's cache-flush buffer: the GPU's L2
    flush_known: bool  # False: the catalog does not know the L2, the upper bound stands in

    @property
    def benchmark_bytes(self) -> int:
        """S: the combo-kernel benchmark of the embedding gather, at compile time (0 without it)."""
        return self.embedding_bytes + self.output_bytes + self.flush_bytes if self.embedding_bytes else 0

    @property
    def autotune_bytes(self) -> int:
        """A: a kernel's first launch autotuning it over the live activations."""
        return self.output_bytes + self.flush_bytes

    def cold_peak(self, warm_peak: int) -> int:
        """vLLM's transient peak on a cold start, as an upper bound: max(warm peak + A, S)."""
        return max(warm_peak + self.autotune_bytes, self.benchmark_bytes)

    def extra_bytes(self, activation: MemoryTerm, encoder_cache: MemoryTerm) -> int:
        """What a cold start adds to a warm plan's peak (activation + the encoder outputs held during the decoder pass)."""
        warm = activation.bytes + encoder_cache.bytes
        return self.cold_peak(warm) - warm

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "benchmark_bytes": self.benchmark_bytes, "autotune_bytes": self.autotune_bytes}

    def describe(self) -> str:
        l2 = "the GPU's L2" if self.flush_known else "an L2 upper bound"
        a = f"A = [tokens, hidden] output {self.output_bytes:,} B + flush buffer {self.flush_bytes:,} B ({l2})"
        if not self.embedding_bytes:
            return a
        return f"S = embedding table {self.embedding_bytes:,} B + output + flush buffer = {self.benchmark_bytes:,} B; {a}"


def cold_compile_scratch(spec: ModelSpec, serving: ServingConfig, gpu: Gpu, benchmarks_combo_kernels: bool) -> ColdCompileScratch:
    """The benchmark (S) and autotuning (A) scratch of a cold compile of this model's decoder."""
    from capacity.weights.parallel_layers import pad_vocab_size

    d = spec.decoder
    takes_embeddings = any(serving.limit_mm_per_prompt.get(m.name, 0) > 0 for m in spec.modalities)
    table = 0
    if benchmarks_combo_kernels and not takes_embeddings:
        table = pad_vocab_size(d.vocab_size) // serving.tensor_parallel_size * d.hidden_size * serving.dtype_bytes
    output = serving.max_num_batched_tokens * d.hidden_size * serving.dtype_bytes
    known = gpu.l2_cache_bytes > 0
    return ColdCompileScratch(table, output, gpu.l2_cache_bytes if known else L2_UPPER_BOUND_BYTES, known)


def cold_start_activation(activation: MemoryTerm, encoder_cache: MemoryTerm, scratch: ColdCompileScratch) -> MemoryTerm:
    """The activation term of a cold start: max(warm peak + A, S) less the encoder outputs (the warm peak being
    activation + the encoder outputs held during the decoder pass)."""
    extra = scratch.extra_bytes(activation, encoder_cache)
    how = f"cold compile cache: max(warm peak {activation.bytes + encoder_cache.bytes:,} B + A, S), an upper bound by up to A: {scratch.describe()}"
    return MemoryTerm(activation.bytes + extra, ESTIMATED, f"{activation.method}; {how}")
