"""Checkpoint quantization formats: the tensors one quantized linear layer stores, per scheme (pure Python).

Tensors stored in a quantized format keep their stored bytes (safetensors headers: exact); a config with a
`quantization_config` but no headers has its linear layers' stored tensors worked out per scheme (fp8, AWQ, GPTQ,
compressed-tensors, NVFP4, MXFP4: `quantized_tensors`), and an unknown scheme is refused. What vLLM's kernels then
leave resident is modelled apart where it differs (AWQ: capacity/weights/awq.py; gpt-oss MXFP4 experts:
capacity/weights/mxfp4.py).
"""

from __future__ import annotations

import fnmatch
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from capacity.errors import BadInput
from capacity.weights.parallel_layers import COLUMN, EXPERTS, KV, QKV, REPLICATED_LINEAR, ROW, WeightLayout, classifications, classified
from capacity.weights.stored_tensor import FLOAT_DTYPES, StoredTensor


class QuantScheme(ABC):
    """A checkpoint format: which tensors one quantized linear layer stores, worked out from its definition."""

    name: str
    ignore: tuple[str, ...] = ()  # module names or `re:` patterns left unquantized

    @abstractmethod
    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        """The tensors of a linear layer of `out` x `inp` (with leading expert dims `lead`)."""

    def applies_to(self, module: str) -> bool:
        """False for a module the ignore list names: `re:` regexes (compressed-tensors), module paths or their
        prefixes with `*` wildcards (modules_to_not_convert, exclude_modules), or a bare module name (lm_head)."""
        for pattern in self.ignore:
            if pattern.startswith("re:"):
                if re.match(pattern[3:], module):
                    return False
            elif fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*") or pattern in module.split("."):
                return False
        return True


def _t(module: str, leaf: str, shape: Sequence[int], dtype: str) -> StoredTensor:
    return StoredTensor(f"{module}.{leaf}", tuple(int(s) for s in shape), dtype)


def _groups(inp: int, group_size: int) -> int:
    return 1 if group_size in (-1, 0) else -(-inp // group_size)


@dataclass(frozen=True)
class Fp8Scheme(QuantScheme):
    """vLLM Fp8LinearMethod: fp8 weight; fp32 per-tensor scale, or fp32 block scales [out/b0, in/b1]
    (`weight_scale_inv`); a static activation scheme adds an fp32 input scale."""

    block: tuple[int, int] | None = None
    static_activations: bool = False
    ignore: tuple[str, ...] = ()
    name: str = "fp8"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        out_t = [_t(module, "weight", (*lead, out, inp), "F8_E4M3")]
        if self.block:
            out_t.append(_t(module, "weight_scale_inv", (*lead, -(-out // self.block[0]), -(-inp // self.block[1])), "F32"))
        else:
            out_t.append(_t(module, "weight_scale", (*lead, 1) if lead else (), "F32"))
        if self.static_activations:
            out_t.append(_t(module, "input_scale", (*lead, 1) if lead else (), "F32"))
        return out_t


@dataclass(frozen=True)
class AwqScheme(QuantScheme):
    """AutoAWQ (vLLM AWQLinearMethod): qweight int32 [in, out / (32 / bits)], qzeros int32
    [in / group, out / (32 / bits)], scales fp16 [in / group, out]."""

    bits: int = 4
    group_size: int = 128
    ignore: tuple[str, ...] = ()
    name: str = "awq"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        pack = 32 // self.bits
        g = _groups(inp, self.group_size)
        return [
            _t(module, "qweight", (*lead, inp, out // pack), "I32"),
            _t(module, "qzeros", (*lead, g, out // pack), "I32"),
            _t(module, "scales", (*lead, g, out), "F16"),
        ]


@dataclass(frozen=True)
class GptqScheme(QuantScheme):
    """AutoGPTQ (vLLM GPTQ / gptq_marlin): qweight int32 [in / (32 / bits), out], g_idx int32 [in],
    qzeros int32 [in / group, out / (32 / bits)], scales fp16 [in / group, out]."""

    bits: int = 4
    group_size: int = 128
    ignore: tuple[str, ...] = ()
    name: str = "gptq"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        pack = 32 // self.bits
        g = _groups(inp, self.group_size)
        return [
            _t(module, "qweight", (*lead, inp // pack, out), "I32"),
            _t(module, "g_idx", (*lead, inp), "I32"),
            _t(module, "qzeros", (*lead, g, out // pack), "I32"),
            _t(module, "scales", (*lead, g, out), "F16"),
        ]


@dataclass(frozen=True)
class PackedIntScheme(QuantScheme):
    """compressed-tensors pack-quantized (WNA16): weight_packed int32 [out, in / (32 / bits)], weight_scale
    [out, groups] in the model dtype, weight_zero_point int32 [out / (32 / bits), groups] when asymmetric,
    weight_shape int64 [2]."""

    bits: int = 4
    group_size: int = -1  # -1: channel-wise
    symmetric: bool = True
    ignore: tuple[str, ...] = ()
    name: str = "compressed-tensors pack-quantized"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        pack = 32 // self.bits
        g = _groups(inp, self.group_size)
        tensors = [
            _t(module, "weight_packed", (*lead, out, inp // pack), "I32"),
            _t(module, "weight_scale", (*lead, out, g), "BF16"),
            _t(module, "weight_shape", (*lead, 2), "I64"),
        ]
        if not self.symmetric:
            tensors.append(_t(module, "weight_zero_point", (*lead, out // pack, g), "I32"))
        return tensors


@dataclass(frozen=True)
class FloatQuantScheme(QuantScheme):
    """compressed-tensors float-/int-quantized (W8A8): 8-bit weight [out, in]; fp32 scale per tensor [1],
    per channel [out, 1], per group [out, in / group] or per block [out / b0, in / b1]; static input scale."""

    weight_dtype: str = "F8_E4M3"
    strategy: str = "tensor"
    group_size: int = 0
    block: tuple[int, int] | None = None
    static_activations: bool = False
    ignore: tuple[str, ...] = ()
    name: str = "compressed-tensors float-quantized"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        scale_shape = {
            "tensor": (1,),
            "channel": (out, 1),
            "group": (out, _groups(inp, self.group_size)),
            "block": (-(-out // self.block[0]), -(-inp // self.block[1])) if self.block else (1,),
        }[self.strategy]
        tensors = [_t(module, "weight", (*lead, out, inp), self.weight_dtype), _t(module, "weight_scale", (*lead, *scale_shape), "F32")]
        if self.static_activations:
            tensors.append(_t(module, "input_scale", (*lead, 1), "F32"))
        return tensors


@dataclass(frozen=True)
class Fp4Scheme(QuantScheme):
    """FP4 with block scales: NVFP4 (weight uint8 [out, in / 2], fp8-e4m3 scale [out, in / 16], fp32 global
    scales) and MXFP4 (uint8 [out, in / 2], e8m0 scale [out, in / 32]). modelopt names the global scales
    weight_scale_2 / input_scale, compressed-tensors weight_global_scale / input_global_scale."""

    block_size: int = 16
    scale_dtype: str = "F8_E4M3"
    global_scales: tuple[str, ...] = ("weight_scale_2", "input_scale")
    weight_name: str = "weight"
    ignore: tuple[str, ...] = ()
    name: str = "nvfp4"

    def stored(self, module: str, out: int, inp: int, lead: tuple[int, ...]) -> list[StoredTensor]:
        tensors = [
            _t(module, self.weight_name, (*lead, out, inp // 2), "U8"),
            _t(module, "weight_scale", (*lead, out, -(-inp // self.block_size)), self.scale_dtype),
        ]
        tensors += [_t(module, g, (*lead, 1) if lead else (), "F32") for g in self.global_scales]
        return tensors


def quant_method(config: dict[str, Any]) -> str | None:
    """The checkpoint's quantization method (`quantization_config.quant_method`), or None for plain weights."""
    qc = config.get("quantization_config")
    return str(qc.get("quant_method") or "quantized") if isinstance(qc, dict) else None


def quant_scheme(config: dict[str, Any]) -> QuantScheme | None:
    """The checkpoint's quantization scheme from config.json's `quantization_config` (None: not quantized).

    Unknown methods and formats fail closed, naming the field."""
    qc = config.get("quantization_config")
    if qc is None:
        text = config.get("text_config")
        qc = text.get("quantization_config") if isinstance(text, dict) else None
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise BadInput("config.json: quantization_config must be an object")
    method = str(qc.get("quant_method", "")).lower()
    maker = _SCHEMES.get(method)
    if maker is None:
        raise BadInput(
            f"config.json: quantization_config.quant_method {qc.get('quant_method')!r} is not modelled "
            f"(capacity knows {', '.join(sorted(_SCHEMES))}): plan from a folder with its safetensors for exact bytes, or open an issue"
        )
    return maker(qc)


def _int(qc: dict[str, Any], key: str, default: int) -> int:
    value = qc.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"config.json: quantization_config.{key} must be an integer, got {value!r}")
    return value


def _bits(qc: dict[str, Any], key: str, allowed: tuple[int, ...], method: str) -> int:
    bits = _int(qc, key, 4)
    if bits not in allowed:
        raise BadInput(f"config.json: quantization_config.{key} = {bits} is not modelled for {method} (known: {allowed})")
    return bits


def _block(qc: dict[str, Any], key: str) -> tuple[int, int] | None:
    value = qc.get(key)
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)):
        raise BadInput(f"config.json: quantization_config.{key} must be two positive integers, got {value!r}")
    return (value[0], value[1])


def _fp8(qc: dict[str, Any]) -> QuantScheme:
    ignore = tuple(qc.get("ignored_layers") or qc.get("modules_to_not_convert") or ())
    return Fp8Scheme(block=_block(qc, "weight_block_size"), static_activations=qc.get("activation_scheme") == "static", ignore=ignore)


def _awq(qc: dict[str, Any]) -> QuantScheme:
    if qc.get("version", "gemm") not in ("gemm", "GEMM", None):
        raise BadInput(f"config.json: quantization_config.version {qc.get('version')!r} is not modelled for awq (known: gemm)")
    return AwqScheme(
        bits=_bits(qc, "bits" if "bits" in qc else "w_bit", (4,), "awq"),
        group_size=_int(qc, "group_size" if "group_size" in qc else "q_group_size", 128),
        ignore=tuple(qc.get("modules_to_not_convert") or ()),
    )


def _gptq(qc: dict[str, Any]) -> QuantScheme:
    if qc.get("dynamic"):
        raise BadInput("config.json: quantization_config.dynamic (per-module GPTQ overrides) is not modelled")
    return GptqScheme(bits=_bits(qc, "bits", (2, 4, 8), "gptq"), group_size=_int(qc, "group_size", 128), ignore=tuple(qc.get("modules_to_not_convert") or ()))


def _compressed_tensors(qc: dict[str, Any]) -> QuantScheme:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise BadInput("config.json: quantization_config.config_groups must hold exactly one group to be modelled from the config")
    group = next(iter(groups.values()))
    weights = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(weights, dict):
        raise BadInput("config.json: quantization_config.config_groups.<group>.weights is missing")
    fmt = str(group.get("format") or qc.get("format") or "")
    ignore = tuple(qc.get("ignore") or ())
    bits = _int(weights, "num_bits", 8)
    wtype = weights.get("type", "int")
    strategy = str(weights.get("strategy", "tensor"))
    group_size = weights.get("group_size") or -1
    inputs = group.get("input_activations") or {}
    static = isinstance(inputs, dict) and bool(inputs) and not inputs.get("dynamic", False)
    if fmt == "nvfp4-pack-quantized" or (wtype == "float" and bits == 4 and group_size == 16):
        return Fp4Scheme(global_scales=("weight_global_scale", "input_global_scale"), weight_name="weight_packed", ignore=ignore, name="compressed-tensors nvfp4")
    if fmt == "mxfp4-pack-quantized" or (wtype == "float" and bits == 4 and group_size == 32):
        return Fp4Scheme(block_size=32, scale_dtype="U8", global_scales=(), weight_name="weight_packed", ignore=ignore, name="compressed-tensors mxfp4")
    if fmt == "pack-quantized" and wtype == "int" and bits in (4, 8):
        return PackedIntScheme(bits=bits, group_size=int(group_size), symmetric=bool(weights.get("symmetric", True)), ignore=ignore)
    if fmt in ("float-quantized", "int-quantized", "naive-quantized") and bits == 8 and strategy in ("tensor", "channel", "group", "block"):
        block = tuple(weights["block_structure"]) if strategy == "block" and weights.get("block_structure") else None
        return FloatQuantScheme(
            weight_dtype="F8_E4M3" if wtype == "float" else "I8",
            strategy=strategy,
            group_size=int(group_size),
            block=block,  # type: ignore[arg-type]
            static_activations=static,
            ignore=ignore,
        )
    raise BadInput(
        f"config.json: quantization_config (compressed-tensors) format {fmt!r}, {wtype} {bits}-bit {strategy} is not modelled: "
        "plan from a folder with its safetensors for exact bytes"
    )


def _modelopt(qc: dict[str, Any]) -> QuantScheme:
    inner = qc.get("quantization", qc)
    algo = str(inner.get("quant_algo", "")).upper()
    ignore = tuple(inner.get("exclude_modules") or ())
    if algo == "NVFP4":
        return Fp4Scheme(block_size=_int(inner, "group_size", 16), ignore=ignore, name="modelopt nvfp4")
    if algo == "FP8":
        return Fp8Scheme(static_activations=True, ignore=ignore, name="modelopt fp8")
    raise BadInput(f"config.json: quantization_config.quant_algo {algo!r} is not modelled for modelopt (known: FP8, NVFP4)")


def _mxfp4(qc: dict[str, Any]) -> QuantScheme:
    # gpt-oss: only the MoE experts are MXFP4 (uint8 blocks of 32 values + an e8m0 scale per block).
    return Fp4Scheme(block_size=32, scale_dtype="U8", global_scales=(), weight_name="weight", ignore=tuple(qc.get("modules_to_not_convert") or ()), name="mxfp4")


_SCHEMES = {
    "fp8": _fp8,
    "awq": _awq,
    "gptq": _gptq,
    "compressed-tensors": _compressed_tensors,
    "modelopt": _modelopt,
    "modelopt_fp4": _modelopt,
    "mxfp4": _mxfp4,
}

_QUANTIZED_KINDS = (COLUMN, KV, QKV, ROW, EXPERTS, REPLICATED_LINEAR)


def quantized_tensors(tensors: Iterable[StoredTensor], scheme: QuantScheme, layout: WeightLayout) -> list[StoredTensor]:
    """The dense parameter list with each quantized linear weight replaced by the scheme's stored tensors.

    Linear layers (column, row, experts) are quantized unless the scheme's ignore list names them;
    embeddings, the LM head, norms and replicated layers stay in the model dtype."""
    out: list[StoredTensor] = []
    memo = classifications(layout)
    for t in tensors:
        kind = classified(t, layout, memo)
        is_weight = t.leaf == "weight" or (kind is EXPERTS and t.leaf.endswith("proj"))
        if kind not in _QUANTIZED_KINDS or not is_weight or len(t.shape) < 2 or not scheme.applies_to(t.module):
            out.append(t)
            continue
        if isinstance(scheme, Fp4Scheme) and scheme.name == "mxfp4" and kind is not EXPERTS:
            out.append(t)  # gpt-oss keeps attention in the model dtype
            continue
        *lead, rows, cols = t.shape
        module = t.name if t.leaf != "weight" else t.module
        out.extend(scheme.stored(module, rows, cols, tuple(lead)))
    return out


def is_quantized_header(tensors: Sequence[StoredTensor]) -> bool:
    return any(t.dtype not in FLOAT_DTYPES for t in tensors)


def with_dtype(tensors: Iterable[StoredTensor], dtype: str) -> list[StoredTensor]:
    return [replace(t, dtype=dtype) for t in tensors]
