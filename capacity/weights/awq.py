"""AWQ on vLLM 0.33: the linear kernel its AWQ method picks on a GPU, and the bytes that kernel leaves after loading.

vLLM 0.33 maps `quant_method: awq` to `AutoAWQConfig` (layers/quantization/auto_awq.py). On CUDA, where Marlin
supports the type (`check_marlin_supported`: uint4 with zero points, compute capability >= 7.5), every quantized
linear layer gets `AutoAWQMarlinLinearMethod`, whose `create_weights` allocates AWQ's checkpoint layout (qweight int32
[in, out / 8], qzeros int32 [in / group, out / 8], scales [in / group, out] in the model dtype) and whose kernel comes
from `choose_mp_linear_kernel` (kernels/linear/__init__.py, CUDA order: CutlassW4A8, Machete, Marlin, ...):
- CutlassW4A8 needs fp8 activations and no zero points: never AWQ;
- Machete (`is_device_capability(90)`, uint4 with zero points, group 128, in % 64 and out % 128 per rank): after
  `_convert_awq_to_standard_format` (same bytes) `machete_prepack_B` returns `empty_like(B)` (same bytes), and
  `transform_w_zp` replaces the zero points by `-scales x zeros` in the scales' dtype: [groups, out], 2 bytes a value
  where the checkpoint packs 8 values in 4 bytes;
- Marlin (compute capability 7.5 and up): `gptq_marlin_repack`, `marlin_permute_scales` and `marlin_zero_points` keep
  the sizes when no tile padding is needed (`marlin_padded_nk`: out % 64 and in % 128, or out % 128 and in % 64).
What is not modelled fails closed in one line: ROCm, a GPU given by its size (its compute capability is unknown),
compute capability 7.x (7.5 runs Marlin in float16, 7.0 is refused), and layers whose per-rank shapes would need
Marlin's padding or would make vLLM choose per layer between Machete and Marlin.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.weights.stored_tensor import MODEL_DTYPE, StoredTensor

PACK = 8  # 4-bit values per int32
# Per-rank divisibility under which both kernels take a layer without padding, whichever axis TP splits:
# Machete in % 64 and out % 128 (MACHETE_PREPACKED_BLOCK_SHAPE), Marlin one of its two tile families.
TILE = 128


@dataclass(frozen=True)
class AwqKernel:
    """The kernel vLLM 0.33 runs AWQ layers with on a GPU, and why."""

    name: str
    why: str
    dense_zero_points: bool  # Machete: zero points stored as -scales x zeros, [groups, out] in the model dtype

    def describe(self) -> str:
        change = "zero points become -scales x zeros in the model dtype, [groups, out]" if self.dense_zero_points else "repacks keep the sizes"
        return f"{self.name} ({self.why}): {change}"


MACHETE = "MacheteLinearKernel"
MARLIN = "MarlinLinearKernel"


def awq_kernel(gpu: Gpu, tensors: Iterable[StoredTensor], tensor_parallel_size: int) -> AwqKernel:
    """The kernel `choose_mp_linear_kernel` picks for every AWQ layer of `tensors` on `gpu` at this TP; BadInput where
    it cannot be told or would differ between layers."""
    if gpu.platform != "cuda":
        raise BadInput(
            f"AWQ on {gpu.name} ({gpu.platform}): vLLM 0.33 picks a ROCm mixed-precision kernel whose layout capacity does not model: plan on an NVIDIA GPU"
        )
    if gpu.source == "size":
        raise BadInput(
            f"AWQ on a GPU given by its size ({gpu.name}): vLLM 0.33's AWQ kernel (Machete on 9.0, Marlin elsewhere) depends on the compute capability: name the GPU"
        )
    major = gpu.compute_capability_major
    if major < 8:
        raise BadInput(
            f"AWQ on {gpu.name} (compute capability {major}.x): vLLM 0.33 runs Marlin on 7.5 in float16 only and refuses AWQ below 7.5; not modelled: plan on an 8.0+ GPU"
        )
    misfit = _first_misfit(tensors, tensor_parallel_size)
    if misfit:
        raise BadInput(
            f"AWQ layer {misfit} at TP {tensor_parallel_size}: its per-rank shape is not a multiple of {TILE}, where vLLM 0.33 pads it for Marlin or "
            "picks another kernel per layer; not modelled"
        )
    if major == 9:
        return AwqKernel(MACHETE, "compute capability 9.0: Machete comes before Marlin", True)
    return AwqKernel(MARLIN, f"compute capability {major}.x: Machete needs 9.0", False)


def _first_misfit(tensors: Iterable[StoredTensor], tp: int) -> str:
    """The first AWQ layer whose input or output features are not a multiple of TILE x TP ("" when none)."""
    for t in tensors:
        if t.leaf == "qweight" and len(t.shape) == 2:
            inp, out = t.shape[0], t.shape[1] * PACK
            if inp % (TILE * tp) or out % (TILE * tp):
                return f"{t.module} ({inp} x {out})"
    return ""


def kernel_tensors(tensors: Iterable[StoredTensor], kernel: AwqKernel) -> list[StoredTensor]:
    """The AWQ tensors as the kernel leaves them resident: Machete's zero points [groups, out] in the model dtype."""
    if not kernel.dense_zero_points:
        return list(tensors)
    return [replace(t, shape=(t.shape[0], t.shape[1] * PACK), dtype=MODEL_DTYPE) if t.leaf == "qzeros" and len(t.shape) == 2 else t for t in tensors]
