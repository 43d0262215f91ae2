"""gpt-oss's MXFP4 experts as vLLM 0.33 allocates them on one rank, for the MoE backend it picks on the GPU.

A gpt-oss checkpoint (`quant_method: mxfp4`, `model_type: gpt_oss`) is served by vLLM's GptOssMxfp4Config: only the
routed experts are MXFP4 (`modules_to_not_convert` keeps attention, router, embedding and LM head in bf16; vLLM's
get_quant_method gives every linear layer UnquantizedLinearMethod anyway). Each MoE layer's GptOssMxfp4MoEMethod
(vllm/model_executor/layers/quantization/mxfp4.py) creates, with E local experts, hidden size H and intermediate
size per partition I both rounded up for the backend (maybe_roundup_sizes ->
mxfp4_round_up_hidden_size_and_intermediate_size):

    w13_weight        uint8 [E, 2 I, H / 2]     two fp4 values a byte
    w13_weight_scale  uint8 [E, 2 I, H / 32]    one e8m0 scale per 32 values
    w2_weight         uint8 [E, H, I / 2]
    w2_weight_scale   uint8 [E, H, I / 32]
    w13_bias          bf16  [E, 2 I]
    w2_bias           bf16  [E, H]              whole on every rank

I = intermediate_size / TP (FusedMoEConfig: intermediate_size // tp_size); with --enable-expert-parallel the MoE TP is
1 and E = the rank's share of the experts (determine_expert_map). process_weights_after_loading then converts the
tensors to the backend's kernel format (convert_gpt_oss_weight_to_mxfp4_moe_kernel_format), which changes what stays
resident (what "Model loading took" measures): each backend below says how.

The backend comes from select_mxfp4_moe_backend's gpt-oss priority list, filtered by each kernel's
is_supported_config on the GPU (BF16-activation variants only, the default):

- compute capability 9.x (Hopper): FLASHINFER_TRTLLM needs SM100, AITER ROCm, so TRITON (OAI triton_kernels, shipped
  in vllm/third_party/triton_kernels; needs 9.0 <= cc < 13);
- 10.x (data-centre Blackwell): FLASHINFER_TRTLLM_MXFP4_BF16 (needs flashinfer, which vLLM's CUDA wheel installs);
- 8.x (Ampere, Ada) and 12.x (consumer Blackwell, where vLLM moves TRITON after MARLIN): TRITON needs >= 9.0 or
  comes later, FLASHINFER_CUTLASS_MXFP4_BF16 needs exactly 9.0, so MARLIN;
- below 8.0 vLLM refuses MXFP4 (Mxfp4Config.get_min_capability = 80); ROCm picks among AITER / Triton variants by
  environment and gfx version, which capacity does not model: both are refused.

Pure Python: no torch.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.weights.stored_tensor import StoredTensor

MXFP4_BLOCK = 32  # OCP_MX_BLOCK_SIZE: values per e8m0 scale
BF16_BYTES = 2
FP32_BYTES = 4
# GptOssMxfp4MoEMethod.create_weights' parameters, and the leaf that marks a layer's load-time conversion
MXFP4_EXPERT_LEAVES = ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale", "w13_bias", "w2_bias")
MXFP4_CONVERSION_LEAF = "kernel_format"


def round_up(value: int, multiple: int) -> int:
    """vllm.utils.math_utils.round_up."""
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class ExpertShapes:
    """One rank's MXFP4 expert tensors' sizes: local experts, padded hidden and intermediate-per-partition sizes."""

    experts: int
    hidden: int
    intermediate: int

    def created(self) -> dict[str, int]:
        """Bytes of each tensor GptOssMxfp4MoEMethod.create_weights registers."""
        e, h, i = self.experts, self.hidden, self.intermediate
        return {
            "w13_weight": e * 2 * i * (h // 2),
            "w13_weight_scale": e * 2 * i * (h // MXFP4_BLOCK),
            "w2_weight": e * h * (i // 2),
            "w2_weight_scale": e * h * (i // MXFP4_BLOCK),
            "w13_bias": e * 2 * i * BF16_BYTES,
            "w2_bias": e * h * BF16_BYTES,
        }

    @property
    def bias_elements(self) -> int:
        return self.experts * (2 * self.intermediate + self.hidden)


class Mxfp4Backend(ABC):
    """One of vLLM 0.33's Mxfp4MoeBackend values: its size rounding and its load-time conversion."""

    name: str
    hidden_align: int = 1
    intermediate_align: int = 1

    def padded(self, hidden: int, intermediate: int) -> tuple[int, int]:
        """mxfp4_round_up_hidden_size_and_intermediate_size for this backend."""
        return round_up(hidden, self.hidden_align), round_up(intermediate, self.intermediate_align)

    @abstractmethod
    def conversion_bytes(self, shapes: ExpertShapes) -> int:
        """Bytes one MoE layer's process_weights_after_loading adds to (or takes from) the created tensors."""

    @abstractmethod
    def conversion(self) -> str:
        """What the load-time conversion does, for the weights term's method."""


class TritonHopper(Mxfp4Backend):
    """TRITON on SM90: intermediate rounded up to 64 (the CUDA `else` branch), hidden kept. _swizzle_mxfp4 pads the
    scale groups to 0 mod 4, then triton_kernels' HopperMXValueLayout (rows to 16, packed bytes to 32) and
    HopperMXScaleLayout (8 warps: rows to 256, groups to 2) swizzle weights and scales; the checkpoint-layout ones are
    deleted; the biases become float32. (Below torch 2.8.1 vLLM skips the swizzle; vLLM 0.33 runs on a newer torch.)"""

    name = "TRITON"
    intermediate_align = 64

    @staticmethod
    def _swizzled(experts: int, rows: int, k: int) -> tuple[int, int]:
        """(value bytes, scale bytes) of one swizzled weight of `rows` x `k` fp4 values."""
        value = experts * round_up(rows, 16) * round_up(k // 2, 32)
        scale = experts * round_up(rows, 256) * round_up(round_up(k // MXFP4_BLOCK, 4), 2)
        return value, scale

    def conversion_bytes(self, shapes: ExpertShapes) -> int:
        e, h, i = shapes.experts, shapes.hidden, shapes.intermediate
        created = shapes.created()
        swizzled = sum(self._swizzled(e, 2 * i, h)) + sum(self._swizzled(e, h, i))
        before = created["w13_weight"] + created["w13_weight_scale"] + created["w2_weight"] + created["w2_weight_scale"]
        return swizzled - before + shapes.bias_elements * (FP32_BYTES - BF16_BYTES)

    def conversion(self) -> str:
        return "at load, scales padded and swizzled by triton_kernels' Hopper layouts (rows to 256, groups to 0 mod 4), biases to float32"


class TrtllmBf16(Mxfp4Backend):
    """FLASHINFER_TRTLLM_MXFP4_BF16 on SM100: hidden rounded up to 256, intermediate to 128. The conversion permutes
    weights and scales into tensors of their own sizes, casts the biases to float32, and the expert kernel
    (TrtLlmMxfp4ExpertsBase) adds gemm1_alpha, gemm1_beta and gemm1_clamp_limit, float32 [local experts] each."""

    name = "FLASHINFER_TRTLLM_MXFP4_BF16"
    hidden_align = 256
    intermediate_align = 128

    def conversion_bytes(self, shapes: ExpertShapes) -> int:
        return shapes.bias_elements * (FP32_BYTES - BF16_BYTES) + 3 * shapes.experts * FP32_BYTES

    def conversion(self) -> str:
        return "at load, biases to float32 and 3 float32 vectors of local experts (gemm1 alpha, beta, clamp limit)"


class Marlin(Mxfp4Backend):
    """MARLIN: hidden rounded up to 256, intermediate to 128. prepare_moe_mxfp4_layer_for_marlin repacks the weights
    (gptq_marlin_repack: size_k x size_n / 8 int32, the same bytes), permutes the e8m0 scales (one byte each) and the
    biases (params dtype): the sizes do not change."""

    name = "MARLIN"
    hidden_align = 256
    intermediate_align = 128

    def conversion_bytes(self, shapes: ExpertShapes) -> int:
        return 0

    def conversion(self) -> str:
        return "Marlin's load-time repack keeps the sizes"


TRITON, TRTLLM_BF16, MARLIN = TritonHopper(), TrtllmBf16(), Marlin()


def backend_for(gpu: Gpu) -> tuple[Mxfp4Backend, str]:
    """The backend vLLM 0.33 picks for gpt-oss on `gpu` (select_mxfp4_moe_backend), and why; BadInput where it cannot
    be told or vLLM refuses MXFP4."""
    if gpu.platform != "cuda":
        raise BadInput(
            f"gpt-oss MXFP4 on {gpu.name} ({gpu.platform}): vLLM 0.33 picks an AITER or Triton MoE backend by environment and gfx version, "
            "whose padding capacity does not model: plan on an NVIDIA GPU"
        )
    if gpu.source == "size":
        raise BadInput(
            f"gpt-oss MXFP4 on a GPU given by its size ({gpu.name}): vLLM 0.33's MoE backend, and so the padded expert sizes, depend on the "
            "compute capability: name the GPU (--gpu H100-80GB, L40S, B200)"
        )
    major = gpu.compute_capability_major
    if major == 9:
        return TRITON, "compute capability 9.x: TRITON (FLASHINFER_TRTLLM needs SM100)"
    if major == 10:
        return TRTLLM_BF16, "compute capability 10.x: FLASHINFER_TRTLLM_MXFP4_BF16 (assumes flashinfer, which vLLM's CUDA wheel installs)"
    if major in (8, 12):
        return MARLIN, f"compute capability {major}.x: MARLIN (TRITON needs 9.0 or comes after Marlin on 12.x, FLASHINFER_CUTLASS_MXFP4_BF16 needs 9.0)"
    if 0 < major < 8:
        raise BadInput(f"gpt-oss MXFP4 on {gpu.name} (compute capability {major}.x): vLLM 0.33 refuses MXFP4 below 8.0 (Mxfp4Config.get_min_capability 80)")
    raise BadInput(f"gpt-oss MXFP4 on {gpu.name} (compute capability {major}.x): which MoE backend vLLM 0.33 picks there is not modelled")


@dataclass(frozen=True)
class GptOssMxfp4:
    """The config facts and the backend that fix a gpt-oss rank's MXFP4 experts."""

    hidden_size: int
    intermediate_size: int
    num_experts: int
    backend: Mxfp4Backend
    why: str

    def shapes(self, tensor_parallel_size: int, enable_expert_parallel: bool, rank: int = 0) -> ExpertShapes:
        """One rank's expert sizes: FusedMoEParallelConfig (EP: MoE TP 1, experts divided), then the backend's padding."""
        tp = tensor_parallel_size
        if self.intermediate_size % tp:
            raise BadInput(f"--tensor-parallel-size {tp} does not divide gpt-oss's intermediate_size {self.intermediate_size} (vLLM asserts it does)")
        if enable_expert_parallel and tp > 1:
            base, extra = divmod(self.num_experts, tp)
            experts, moe_tp = base + (1 if rank < extra else 0), 1
        else:
            experts, moe_tp = self.num_experts, tp
        hidden, intermediate = self.backend.padded(self.hidden_size, self.intermediate_size // moe_tp)
        return ExpertShapes(experts, hidden, intermediate)

    def describe(self) -> str:
        return f"MXFP4 experts for the {self.backend.name} MoE backend ({self.why}); {self.backend.conversion()}"


def gpt_oss_mxfp4(config: dict[str, Any], gpu: Gpu | None) -> GptOssMxfp4 | None:
    """The MXFP4 expert layout of a gpt-oss checkpoint served on `gpu`; None for any other config."""
    qc = config.get("quantization_config")
    if config.get("model_type") != "gpt_oss" or not isinstance(qc, dict) or str(qc.get("quant_method", "")).lower() not in ("mxfp4", "gpt_oss_mxfp4"):
        return None
    if gpu is None:
        raise BadInput("gpt-oss MXFP4: the expert sizes depend on the GPU's MoE backend: plan with a GPU (--gpu)")
    sizes = {}
    for key in ("hidden_size", "intermediate_size", "num_local_experts"):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BadInput(f"config.json: {key} must be a positive integer for gpt-oss MXFP4, got {value!r}")
        sizes[key] = value
    if sizes["hidden_size"] % MXFP4_BLOCK or sizes["intermediate_size"] % MXFP4_BLOCK:
        raise BadInput(f"config.json: gpt-oss MXFP4 needs hidden_size and intermediate_size that are multiples of {MXFP4_BLOCK} (one e8m0 scale per block)")
    backend, why = backend_for(gpu)
    return GptOssMxfp4(sizes["hidden_size"], sizes["intermediate_size"], sizes["num_local_experts"], backend, why)


# --- the expert tensors in place of the checkpoint's ------------------------------------------------------------

_EXPERTS_MODULE = re.compile(r"^(.*\.mlp\.experts)\.")


def gpt_oss_expert_tensors(tensors: Iterable[StoredTensor], moe: GptOssMxfp4) -> list[StoredTensor]:
    """The tensors with each MoE layer's stored experts (a checkpoint's *_blocks / *_scales / *_bias, or a meta
    build's gate_up_proj / down_proj) replaced by the ones vLLM's GptOssMxfp4MoEMethod allocates, named by its
    parameters (shapes here unpadded, whole: the Mxfp4Experts kind sizes them per rank and backend), plus one
    zero-size marker for the layer's load-time conversion."""
    e, h, i = moe.num_experts, moe.hidden_size, moe.intermediate_size
    logical = {
        "w13_weight": ((e, 2 * i, h // 2), "U8"),
        "w13_weight_scale": ((e, 2 * i, h // 32), "U8"),
        "w2_weight": ((e, h, i // 2), "U8"),
        "w2_weight_scale": ((e, h, i // 32), "U8"),
        "w13_bias": ((e, 2 * i), "BF16"),
        "w2_bias": ((e, h), "BF16"),
    }
    out: list[StoredTensor] = []
    seen: set[str] = set()
    for t in tensors:
        experts = _EXPERTS_MODULE.search(t.name)
        if experts is None:
            out.append(t)
            continue
        module = experts.group(1)
        if module in seen:
            continue
        seen.add(module)
        out.extend(StoredTensor(f"{module}.{leaf}", shape, dtype) for leaf, (shape, dtype) in logical.items())
        out.append(StoredTensor(f"{module}.{MXFP4_CONVERSION_LEAF}", (0,), "U8"))
    return out
