"""A checkpoint's tensor as stored: name, shape, dtype, and the bytes it takes once vLLM loaded it (pure Python)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from capacity.errors import BadInput

# Bits per element of the safetensors dtype names.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "E8M0": 8, "F8_E4M3FN": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
    "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
MODEL_DTYPE = "MODEL"  # a dense tensor loaded in the serving dtype (meta-build parameters)

# Tensor names (last component) of quantization metadata: kept in their stored dtype.
QUANT_AUX = re.compile(
    r"(scales?|scale_inv|scale_2|zero_point|zeros|qzeros|g_idx|global_scale|input_scale|weight_shape|k_scale|v_scale|_blocks)$"
)


@dataclass(frozen=True)
class StoredTensor:
    """One parameter as it is stored: name, shape and dtype (MODEL_DTYPE: loaded in the serving dtype)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    # Worked out once per tensor (a plan classifies every tensor of the model, a sweep the same tensors again); kept
    # in the instance's __dict__, outside the fields that equality, hashing and asdict read.
    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def module(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else ""

    @cached_property
    def leaf(self) -> str:
        """The parameter's own name: weight, bias, qweight, scales, ..."""
        return self.name.rsplit(".", 1)[-1]

    @cached_property
    def layer(self) -> str:
        """The module's own name: q_proj, fc1, embed_tokens, ..."""
        return self.module.rsplit(".", 1)[-1]

    def loaded_bytes(self, model_dtype_bytes: int) -> int:
        """Bytes once vLLM loaded it: dense float tensors in the model dtype, quantized ones as stored."""
        if self.dtype == MODEL_DTYPE or (self.dtype in FLOAT_DTYPES and not QUANT_AUX.search(self.leaf)):
            return self.numel * model_dtype_bytes
        bits = DTYPE_BITS.get(self.dtype)
        if bits is None:
            raise BadInput(f"tensor {self.name}: safetensors dtype {self.dtype!r} is not known to capacity")
        return -(-self.numel * bits // 8)
