"""`Family`: everything capacity knows about one model family, in one object (one file per family).

A family owns the `model_type`s it claims, the `ModelSpec` it reads from a config, the real module tree
(built through the builders of `capacity.model.arch`), the hooks the profiler and the fake-tensor trace run the
model through (dummy encoder input, encoder, decoder, LM head), the decoder `capacity verify` drives, and
its calibration constants. Families register themselves: `all_families` imports every module of `capacity/model/families/` and keeps each
module's `FAMILY`, so adding a family is adding one file.

Layering: this module and every family module import no torch at module level; the hooks that need
torch or transformers import them inside their bodies, as `capacity.model.arch` does.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from capacity.errors import BadInput
from capacity.model.shard_rules import ShardRules

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

    from capacity.model.spec import ModelSpec
    from capacity.source.resolve import ModelSource
    from capacity.weights.stored_tensor import StoredTensor


@dataclass(frozen=True)
class EncoderInput:
    """One max-size item as the processor would hand it to the encoder, and how it was made."""

    tensors: dict[str, Any]
    note: str
    host: dict[str, Any] = field(default_factory=dict)  # plain values the device tensors were made from


@dataclass(frozen=True)
class Tower:
    """Modules vLLM builds under `_mark_tower_model(modalities)`: it leaves them out (no weights) when
    --limit-mm-per-prompt sets every one of those modalities to 0 (SupportsMultiModal._mark_tower_model)."""

    modalities: tuple[str, ...]
    modules: tuple[str, ...]  # module names, matched against the dotted parts of a tensor's name

    def skipped(self, limits: dict[str, int]) -> bool:
        return all(limits.get(m, 1) == 0 for m in self.modalities)

    def holds(self, tensor_name: str) -> bool:
        return any(part in self.modules for part in tensor_name.split("."))


@dataclass(frozen=True)
class ModelBuffer:
    """A tensor a model class allocates in its constructor (inside the load window) that is no parameter: its
    vLLM attribute name, shape and element size (Gemma-4 E-series: per_layer_embeddings)."""

    name: str
    shape: tuple[int, ...]
    dtype_bytes: int

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.dtype_bytes

    def describe(self) -> str:
        return f"{self.name} {' x '.join(f'{d:,}' for d in self.shape)} x {self.dtype_bytes} B"


class Family:
    """Base class of the model families; a subclass per family, one instance (`FAMILY`) per family module.

    The profiler hooks default to a decoder-only model whose transformer is `model.model` and whose head is
    `model.lm_head`, with no encoder; families with an encoder override `encoder_input` and `encode`.
    """

    name: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]] = ()  # config.json `model_type`s this family claims outright
    # Families that claim a config by its shape rather than its model_type (plain *ForCausalLM decoders, the
    # generic multimodal family) are tried after every model_type claim, lowest rank first; None = never.
    fallback_rank: ClassVar[int | None] = None
    profilable: ClassVar[bool] = True  # the profiler and the fake-tensor trace can run this family
    # Attribute path from the built model to a BART-style decoder (self_attn, encoder_attn, fc1/fc2 per layer)
    # that `capacity verify` drives step by step; () = verify runs the family's `cached_text_model` over the pool
    # instead, or, without one, refuses it.
    verify_decoder_path: ClassVar[tuple[str, ...]] = ()
    # Calibration: the H200-measured activation peak exceeded the fake-tensor trace by this many percent
    # (bench/results/trace-2026-11-30); None = within 3 %, or never compared.
    trace_undercount_percent: ClassVar[int | None] = None
    # Calibration: vLLM's encoder activation / the fake trace of transformers' encoder, applied when the encoder
    # phase sets a fake trace's peak (bench/results/predict-logs-2026-12-01); None = not calibrated.
    trace_encoder_to_vllm: ClassVar[float | None] = None
    # Modules vLLM 0.33 builds unsharded although a name rule would shard them, and biases it allocates that the
    # checkpoint lacks (regexes over parameter names; read from vllm/model_executor/models, see capacity/weights/parallel_layers.py).
    vllm_unsharded_modules: ClassVar[tuple[str, ...]] = ()
    vllm_added_biases: ClassVar[tuple[str, ...]] = ()
    # vllm_tensors changes the checkpoint's tensors (adds what it lacks, or drops what vLLM never builds): a header
    # summary's total (no names) is then not vLLM's.
    adds_vllm_tensors: ClassVar[bool] = False
    # Which modules are which of vLLM's parallel layers, for the tensor-parallel profiler (profilers/sharding.py);
    # None = tensor-parallel profiling of this family is refused (planning at TP > 1 stays arithmetic).
    tensor_parallel_rules: ClassVar[ShardRules | None] = None
    # A word every memory term's method starts with, so a figure says which family's reading it rests on
    # ("generic"); "" = none.
    method_label: ClassVar[str] = ""

    # --- the config -----------------------------------------------------------------------------------

    def claims(self, config: dict[str, Any]) -> bool:
        """A fallback family's test of a config no model_type claimed (only called when fallback_rank is set)."""
        return False

    def spec(
        self, config: dict[str, Any], name: str, preprocessor: dict[str, Any] | None = None, processor: dict[str, Any] | None = None
    ) -> ModelSpec:
        raise NotImplementedError

    def spec_from_files(
        self,
        config: dict[str, Any],
        name: str,
        preprocessor: dict[str, Any] | None,
        processor: dict[str, Any] | None,
        video_preprocessor: dict[str, Any] | None,
    ) -> ModelSpec:
        """The spec from the model's planning files; by default the video preprocessor config is not read (a family
        that models videos reads its own config fields)."""
        return self.spec(config, name, preprocessor, processor)

    def unsharded_modules(self, config: dict[str, Any]) -> tuple[str, ...]:
        """Regexes of the modules vLLM builds whole on every rank for this config (`vllm_unsharded_modules` unless a
        family tells configs apart)."""
        return self.vllm_unsharded_modules

    def column_parallel_modules(self, config: dict[str, Any]) -> tuple[str, ...]:
        """Regexes of modules vLLM builds as ColumnParallelLinear although their names do not say so; none by default."""
        return ()

    def row_parallel_modules(self, config: dict[str, Any]) -> tuple[str, ...]:
        """Regexes of modules vLLM builds as RowParallelLinear although their names do not say so; none by default."""
        return ()

    def towers(self, config: dict[str, Any]) -> tuple[Tower, ...]:
        """The model's tower modules as vLLM marks them; () where capacity does not model skipping them (their
        weights are then counted whatever the limits)."""
        return ()

    def with_processor_kwargs(
        self, config: dict[str, Any], files: dict[str, dict[str, Any]], kwargs: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """The planning files (by Hub name: preprocessor_config.json, processor_config.json, ...) as vLLM's processors
        see them under --mm-processor-kwargs; by default refused: the kwargs change the HF processor, so what they do
        to the profiled item is this family's to say."""
        raise BadInput(
            f"--mm-processor-kwargs {', '.join(sorted(kwargs))}: not modelled for the {self.name} family (capacity models "
            "the Qwen-VL size keys min_pixels / max_pixels / size, Gemma-4's max_soft_tokens, Gemma-3's do_pan_and_scan / "
            "pan_and_scan_*, and InternVL's min/max_dynamic_patch / dynamic_image_size / use_thumbnail); plan without it"
        )

    def item_size_kwargs(self, config: dict[str, Any], tokens: int) -> dict[str, Any] | None:
        """The --mm-processor-kwargs (the size keys `with_processor_kwargs` models) that make vLLM's largest image the
        largest that stays within `tokens` tokens: what `capacity fit` tries for smaller items. None where the family
        models no size key (the default) or no size holds that few tokens."""
        return None

    def load_buffers(self, config: dict[str, Any], max_num_batched_tokens: int, dtype_bytes: int, towers_built: bool = True) -> tuple[ModelBuffer, ...]:
        """Tensors vLLM's model class allocates in its constructor besides parameters (inside the load window, whole
        on every rank); none by default. `towers_built=False` where the model's towers are StageMissingLayer (a later
        pipeline stage, or every modality a tower serves at --limit-mm-per-prompt 0)."""
        return ()

    def vllm_tensors(self, tensors: tuple[StoredTensor, ...], config: dict[str, Any]) -> tuple[StoredTensor, ...]:
        """The tensors vLLM's model class allocates, from those the checkpoint (or transformers' build) stores:
        by default the same (a family adds what vLLM's fused layers hold beyond the checkpoint)."""
        return tensors

    def text_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The decoder's config inside config.json (what the weights' parallel rules read: heads, experts, tied
        embeddings): the first of `text_config`, `decoder`, `language_config`, `llm_config`, else the config itself."""
        for key in ("text_config", "decoder", "language_config", "llm_config"):
            inner = config.get(key)
            if isinstance(inner, dict):
                return inner
        return config

    # --- the real module tree (torch inside) ------------------------------------------------------------

    hf_class: ClassVar[str] = ""  # the transformers model class the default build_module instantiates

    def build_module(
        self,
        config: dict[str, Any],
        *,
        device: str = "meta",
        dtype: str = "bfloat16",
        init_weights: bool | None = None,
        attn_implementation: str | None = None,
    ) -> nn.Module:
        """The real architecture from a raw config.json dict (not modified), by default on the meta device.

        The default builds transformers' `hf_class_name(config)` from `hf_config(config)`.
        """
        from capacity.model.arch import build_hf_class

        return build_hf_class(
            self.hf_class_name(config), self.hf_config(config), device=device, dtype=dtype, init_weights=init_weights, attn_implementation=attn_implementation
        )

    # How `parameter_shapes` obtains the parameters, for the weights term's method.
    parameters_source: ClassVar[str] = "built on the meta device"

    def parameter_shapes(self, config: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, shape) of every parameter vLLM allocates, named as the checkpoint stores it; by default those of
        the architecture built on the meta device (`build_module`). A family whose architecture transformers cannot
        build (remote code) lists them from its config instead."""
        module = self.build_module(config, device="meta", dtype="bfloat16")
        return tuple((name, tuple(p.shape)) for name, p in module.named_parameters(remove_duplicate=True))

    def hf_class_name(self, config: dict[str, Any]) -> str:
        if not self.hf_class:
            raise NotImplementedError(f"{self.name} names no transformers class to build")
        return self.hf_class

    def hf_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config dict in the form transformers' class reads (default: as published)."""
        return config

    # --- profiler and fake-tensor trace hooks (torch inside) ---------------------------------------------

    def encoder_input(self, spec: ModelSpec, source: ModelSource, device: str, dtype: torch.dtype, tokens: int) -> EncoderInput:
        """One max-size item of `tokens` encoder-output tokens, as the model's processor would hand it over."""
        raise BadInput(f"{self.name} takes no multimodal items to profile")

    def encode(self, model: Any, item: EncoderInput, count: int) -> list[torch.Tensor]:
        """The encoder on `count` copies of `item`: one output tensor per item (held as encoder-cache entries)."""
        return []

    def decode(self, model: Any, input_ids: torch.Tensor, encoder_states: torch.Tensor | None) -> torch.Tensor:
        """The decoder's last hidden states for `input_ids` (cross-attending `encoder_states` when given). Default: the
        text decoder verify runs (cached_text_model), else the model's `model`."""
        text = self.cached_text_model(model)
        return (model.model if text is None else text)(input_ids=input_ids, use_cache=False).last_hidden_state

    def run_layers_as_vllm(self, model: Any, spec: ModelSpec) -> str:
        """Make the built model's layers whose transformers code holds what vLLM's never allocates allocate vLLM's
        tensors instead, while the profiler or the fake-tensor trace runs it; returns the words saying which ("" for
        none), which every figure measured with them carries. Default: the Gated DeltaNet layers, which Qwen3-Next
        (decoder_only) and Qwen3.5 (generic) share (capacity/model/arch/gated_delta_net.py)."""
        from capacity.kv.layers import GatedDeltaNetLayer
        from capacity.model.arch.gated_delta_net import run_as_vllm

        return run_as_vllm(model, next((x for x in spec.layers if isinstance(x, GatedDeltaNetLayer)), None))

    def lm_head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.lm_head(hidden)

    def cached_text_model(self, model: Any) -> Any | None:
        """The text decoder `capacity verify` runs over the planned KV pool: a transformers text model called with
        input_ids, past_key_values (the pool, as a cache) and use_cache, whose layer i holds the spec's KV layer i;
        None = verify does not run this family so (the BART-style `verify_decoder` path, or none)."""
        return None

    def cross_attention_kv(self, model: Any, layer: int, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [1, positions, kv heads, head size] that text layer `layer`'s cross-attention reads
        from the encoder `states` [1, positions, hidden] (what vLLM writes into the cross-attention blocks)."""
        raise BadInput(f"verify cannot write the {self.name} family's cross-attention keys into the pool")

    def verify_decoder(self, model: Any) -> Any:
        """The BART-style decoder `capacity verify` runs (see `verify_decoder_path`)."""
        if not self.verify_decoder_path:
            raise BadInput(f"verify runs encoder-decoder models with BART-style decoders; {self.name} is not one yet")
        for attr in self.verify_decoder_path:
            model = getattr(model, attr)
        return model

    # --- identity ---------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"<family {self.name}>"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Copies and pickles of a spec keep pointing at the one registered family object.
        return family_named, (self.name,)


FAMILIES_PACKAGE = "capacity.model.families"  # its modules are discovered by name: each imports this one, never the reverse


@lru_cache(maxsize=1)
def all_families() -> tuple[Family, ...]:
    """Every family module's `FAMILY`, by name."""
    found: dict[str, Family] = {}
    for module in pkgutil.iter_modules(importlib.import_module(FAMILIES_PACKAGE).__path__):
        if module.name.startswith("_"):
            continue
        family = getattr(importlib.import_module(f"{FAMILIES_PACKAGE}.{module.name}"), "FAMILY", None)
        if isinstance(family, Family):
            if family.name in found:
                raise RuntimeError(f"two families are named {family.name!r}")
            found[family.name] = family
    return tuple(found[name] for name in sorted(found))


def family_named(name: str) -> Family:
    for family in all_families():
        if family.name == name:
            return family
    raise BadInput(f"unknown model family {name!r}: capacity knows {', '.join(f.name for f in all_families())}")
