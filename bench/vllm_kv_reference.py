"""What vLLM 0.33.0 itself plans for the KV cache of each case in CASES: its own spec classes, block-size
functions, grouping, get_kv_cache_configs and capacity functions, on vLLM's CPU platform (no GPU).

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_kv_reference.py \
        bench/results/vllm-kv-reference-2026-11-30/reference.json

For each case the script
1. builds a real ModelConfig from the case's config.json (tests/fixtures/configs or the catalog) and a VllmConfig
   with the case's knobs (async scheduling on, as on CUDA; prefix caching as the case says);
2. sets the block sizes the way vLLM does on the case's CUDA GPU: the MLA backend's preferred block size
   (Platform._preferred_block_size_for_backends with the backend vLLM's CUDA priority list picks) and, for hybrid
   models, Platform._align_hybrid_block_size with the FlashAttention backend (a stand-in Mamba layer in the forward
   context declares the checkpoint alignment FlashInfer's GDN prefill has on Hopper);
3. builds each layer's spec as that layer's get_kv_cache_spec does (FullAttentionSpec, SlidingWindowSpec,
   ChunkedLocalAttentionSpec, CrossAttentionSpec, MLAAttentionSpec, MambaSpec with the model class's own
   get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config); layers naming a
   kv_sharing_target_layer_name build none;
4. calls get_global_kv_cache_groups, get_kv_cache_configs (fake available memory), get_kv_cache_capacity,
   each group spec's max_memory_usage_bytes / max_num_blocks_per_req and get_block_table_width, MRV2 warmup's
   _reserved_block_count at the warmup's decode length, and
   _estimate_max_model_len_from_groups on a small budget.
The CPU platform changes a few cache knobs for its own kernels (block size, float32 SSM state); the script sets
them back to what the CUDA platform leaves, and says so in each case's notes.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"
GiB = 1 << 30

# name, config file, GPU (compute capability major), knobs. `available` is the fake KV memory per rank.
CASES: list[dict] = [
    # dense / sliding window / cross-attention (the kinds capacity had before)
    {"name": "whisper-large-v3 tp1", "config": "catalog:openai--whisper-large-v3", "gpu": "H200", "tp": 1, "max_model_len": 448, "mnbt": 8192},
    {"name": "gemma-3-4b tp1", "config": "catalog:google--gemma-3-4b-it", "gpu": "H200", "tp": 1, "max_model_len": 8192, "mnbt": 8192},
    {"name": "gemma-3-4b tp2 fp8", "config": "catalog:google--gemma-3-4b-it", "gpu": "H200", "tp": 2, "max_model_len": 32768, "mnbt": 8192, "kv": "fp8"},
    # MLA
    {"name": "deepseek-r1 H200 tp1", "config": "deepseek-ai--DeepSeek-R1.json", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "deepseek-r1 H200 tp4 fp8", "config": "deepseek-ai--DeepSeek-R1.json", "gpu": "H200", "tp": 4, "max_model_len": 163840, "mnbt": 8192, "kv": "fp8"},
    {"name": "deepseek-r1 B200 tp2", "config": "deepseek-ai--DeepSeek-R1.json", "gpu": "B200", "tp": 2, "max_model_len": 65536, "mnbt": 16384},
    {"name": "deepseek-r1 B200 tp1 fp8", "config": "deepseek-ai--DeepSeek-R1.json", "gpu": "B200", "tp": 1, "max_model_len": 65536, "mnbt": 16384, "kv": "fp8"},
    {"name": "deepseek-r1 A100 tp1", "config": "deepseek-ai--DeepSeek-R1.json", "gpu": "A100-80GB", "tp": 1, "max_model_len": 16384, "mnbt": 8192},
    {"name": "deepseek-v3 (published config) H200 tp2", "config": "catalog:deepseek-ai--DeepSeek-V3", "gpu": "H200", "tp": 2, "max_model_len": 163840, "mnbt": 16384},
    # Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5): align mode is vLLM's default (prefix caching on)
    {"name": "qwen3-next-thinking (published config) H200 tp4", "config": "catalog:Qwen--Qwen3-Next-80B-A3B-Thinking", "gpu": "H200", "tp": 4, "max_model_len": 262144, "mnbt": 8192},
    {"name": "qwen3-next H200 tp1", "config": "Qwen--Qwen3-Next-80B-A3B-Instruct.json", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "qwen3-next H200 tp2", "config": "Qwen--Qwen3-Next-80B-A3B-Instruct.json", "gpu": "H200", "tp": 2, "max_model_len": 32768, "mnbt": 8192},
    {"name": "qwen3-next H200 tp4 fp8", "config": "Qwen--Qwen3-Next-80B-A3B-Instruct.json", "gpu": "H200", "tp": 4, "max_model_len": 32768, "mnbt": 8192, "kv": "fp8"},
    {"name": "qwen3-next H200 tp1 spec2", "config": "Qwen--Qwen3-Next-80B-A3B-Instruct.json", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192, "spec": 2},
    {"name": "qwen3-next A100 tp1", "config": "Qwen--Qwen3-Next-80B-A3B-Instruct.json", "gpu": "A100-80GB", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "qwen3-next H200 tp1 no prefix caching", "config": "Qwen--Qwen3-Next-80B-A3B-Instruct.json", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192, "prefix_caching": False},
    {"name": "qwen3-next H200 tp2 no prefix caching spec3", "config": "Qwen--Qwen3-Next-80B-A3B-Instruct.json", "gpu": "H200", "tp": 2, "max_model_len": 16384, "mnbt": 4096, "prefix_caching": False, "spec": 3},
    {"name": "qwen3.5-27b H200 tp1", "config": "Qwen--Qwen3.5-27B-text.json", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "qwen3.5-27b H200 tp4", "config": "Qwen--Qwen3.5-27B-text.json", "gpu": "H200", "tp": 4, "max_model_len": 32768, "mnbt": 8192},
    # Mamba-2 hybrid
    {"name": "nemotron-h-style H200 tp1", "config": "synthetic--nemotron-h-style.json", "gpu": "H200", "tp": 1, "max_model_len": 8192, "mnbt": 8192},
    {"name": "nemotron-h-style H200 tp2 fp8", "config": "synthetic--nemotron-h-style.json", "gpu": "H200", "tp": 2, "max_model_len": 8192, "mnbt": 8192, "kv": "fp8"},
    {"name": "nemotron-h-style H200 tp4", "config": "synthetic--nemotron-h-style.json", "gpu": "H200", "tp": 4, "max_model_len": 8192, "mnbt": 4096},
    {"name": "nemotron-h-56b (published config) H200 tp4", "config": "catalog:nvidia--Nemotron-H-56B-Base-8K", "gpu": "H200", "tp": 4, "max_model_len": 8192, "mnbt": 8192},
    {"name": "nemotron-h-56b (published config) H200 tp2 fp8 spec1", "config": "catalog:nvidia--Nemotron-H-56B-Base-8K", "gpu": "H200", "tp": 2, "max_model_len": 8192, "mnbt": 8192, "kv": "fp8", "spec": 1},
    {"name": "nemotron-h-style H200 tp1 no prefix caching", "config": "synthetic--nemotron-h-style.json", "gpu": "H200", "tp": 1, "max_model_len": 8192, "mnbt": 8192, "prefix_caching": False},
    # LFM2 short-convolution hybrids: the published LFM2.5-VL-1.6B (Lfm2VlForConditionalGeneration) and its text config
    # alone (Lfm2ForCausalLM, the text_config of the same published file)
    {"name": "lfm2.5-vl-1.6b (published config) H200 tp1", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B", "gpu": "H200", "tp": 1, "max_model_len": 128000, "mnbt": 8192, "limit_mm": {"image": 0}},
    {"name": "lfm2.5-vl-1.6b (published config) H200 tp2 fp8", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B", "gpu": "H200", "tp": 2, "max_model_len": 32768, "mnbt": 8192, "kv": "fp8", "limit_mm": {"image": 0}},
    {"name": "lfm2.5-vl-1.6b (published config) H200 tp1 no prefix caching", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B", "gpu": "H200", "tp": 1, "max_model_len": 16384, "mnbt": 4096, "prefix_caching": False, "limit_mm": {"image": 0}},
    {"name": "lfm2-1.2b text (published text_config) H200 tp1", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B#text_config", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "lfm2-1.2b text (published text_config) H200 tp4 spec2", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B#text_config", "gpu": "H200", "tp": 4, "max_model_len": 32768, "mnbt": 8192, "spec": 2},
    # conv state (2 + 4) x 2048 x 2 B = 24,576 B > the 16-token fp8 attention page (16,384 B) vLLM pads Mamba pages to
    # (it sizes them from get_mamba_state_shape_from_config, without the speculative slots): vLLM does not start;
    # with --block-size 32 the page (32,768 B) holds it
    {"name": "lfm2-1.2b text (published text_config) H200 tp1 fp8 spec4", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B#text_config", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192, "kv": "fp8", "spec": 4},
    {"name": "lfm2-1.2b text (published text_config) H200 tp1 fp8 spec4 block32", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B#text_config", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192, "kv": "fp8", "spec": 4, "block_size": 32},
    {"name": "lfm2-1.2b text (published text_config) A100 tp2 no prefix caching", "config": "catalog:LiquidAI--LFM2.5-VL-1.6B#text_config", "gpu": "A100-80GB", "tp": 2, "max_model_len": 8192, "mnbt": 2048, "prefix_caching": False},
    # KV sharing (Gemma-3n)
    {"name": "gemma-3n tp1", "config": "google--gemma-3n-E4B-text.json", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "gemma-3n tp2 fp8", "config": "google--gemma-3n-E4B-text.json", "gpu": "H200", "tp": 2, "max_model_len": 32768, "mnbt": 2048, "kv": "fp8"},
    # per-kind head sizes (Gemma-4: full-attention layers 512 wide, sliding 256): pages unified by block size
    {"name": "gemma-4-e2b tp1", "config": "google--gemma-4-e2b-text.json", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "gemma-4-e2b tp2 fp8", "config": "google--gemma-4-e2b-text.json", "gpu": "H200", "tp": 2, "max_model_len": 131072, "mnbt": 8192, "kv": "fp8"},
    # Gemma-4 26B-A4B (published config, Gemma4ForConditionalGeneration): 25 sliding layers of 8 x 256, 5 full of 2 x 512
    {"name": "gemma-4-26b-a4b (published config) tp1", "config": "catalog:google--gemma-4-26B-A4B", "gpu": "H200", "tp": 1, "max_model_len": 262144, "mnbt": 16384},
    {"name": "gemma-4-26b-a4b (published config) tp1 fp8", "config": "catalog:google--gemma-4-26B-A4B", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192, "kv": "fp8"},
    {"name": "gemma-4-26b-a4b (published config) tp2", "config": "catalog:google--gemma-4-26B-A4B", "gpu": "H200", "tp": 2, "max_model_len": 262144, "mnbt": 8192},
    {"name": "gemma-4-26b-a4b (published config) tp2 fp8", "config": "catalog:google--gemma-4-26B-A4B", "gpu": "H200", "tp": 2, "max_model_len": 65536, "mnbt": 2048, "kv": "fp8"},
    {"name": "gemma-4-26b-a4b (published config) tp4", "config": "catalog:google--gemma-4-26B-A4B", "gpu": "H200", "tp": 4, "max_model_len": 131072, "mnbt": 8192},
    # Gemma-4 E2B (published config): 35 layers, the last 20 KV-shared (no KV of their own), 1 KV head; sliding 256 wide,
    # full 512 wide
    {"name": "gemma-4-e2b-it (published config) tp1", "config": "catalog:google--gemma-4-E2B-it", "gpu": "H200", "tp": 1, "max_model_len": 131072, "mnbt": 8192},
    {"name": "gemma-4-e2b-it (published config) tp1 fp8", "config": "catalog:google--gemma-4-E2B-it", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 2048, "kv": "fp8"},
    {"name": "gemma-4-e2b-it (published config) tp2", "config": "catalog:google--gemma-4-E2B-it", "gpu": "H200", "tp": 2, "max_model_len": 65536, "mnbt": 16384},
    {"name": "gemma-4-e2b-it (published config) A100 tp1", "config": "catalog:google--gemma-4-E2B-it", "gpu": "A100-80GB", "tp": 1, "max_model_len": 131072, "mnbt": 2048},
    # chunked local attention (Llama-4)
    {"name": "llama-4-scout tp1", "config": "meta-llama--Llama-4-Scout-17B-16E-text.json", "gpu": "H200", "tp": 1, "max_model_len": 131072, "mnbt": 8192},
    {"name": "llama-4-scout tp4 fp8", "config": "meta-llama--Llama-4-Scout-17B-16E-text.json", "gpu": "H200", "tp": 4, "max_model_len": 65536, "mnbt": 16384, "kv": "fp8"},
    {"name": "llama-4-scout tp2 short", "config": "meta-llama--Llama-4-Scout-17B-16E-text.json", "gpu": "H200", "tp": 2, "max_model_len": 4096, "mnbt": 2048},
    # attention sinks (gpt-oss): sliding (128) and full layers alternate by layer index; the sinks change no KV spec, and
    # every CUDA backend that serves sinks (FLASH_ATTN with FA3, FLASHINFER's TRTLLM path, TRITON_ATTN) runs block 16
    {"name": "gpt-oss-20b H200 tp1", "config": "catalog:openai--gpt-oss-20b", "gpu": "H200", "tp": 1, "max_model_len": 131072, "mnbt": 8192},
    {"name": "gpt-oss-20b B200 tp2", "config": "catalog:openai--gpt-oss-20b", "gpu": "B200", "tp": 2, "max_model_len": 32768, "mnbt": 16384},
    {"name": "gpt-oss-20b A100 tp2 fp8", "config": "catalog:openai--gpt-oss-20b", "gpu": "A100-80GB", "tp": 2, "max_model_len": 65536, "mnbt": 8192, "kv": "fp8"},
    # Qwen2.5-Omni (published AWQ config): the text model nested in thinker_config (hf_text_config = thinker_config.text_config)
    {"name": "qwen2.5-omni-7b-awq (published config) tp1", "config": "catalog:Qwen--Qwen2.5-Omni-7B-AWQ", "gpu": "H200", "tp": 1, "max_model_len": 32768, "mnbt": 8192},
    {"name": "qwen2.5-omni-7b-awq (published config) tp2 fp8", "config": "catalog:Qwen--Qwen2.5-Omni-7B-AWQ", "gpu": "H200", "tp": 2, "max_model_len": 16384, "mnbt": 4096, "kv": "fp8"},
    {"name": "qwen2.5-omni-7b-awq (published config) A100 tp4", "config": "catalog:Qwen--Qwen2.5-Omni-7B-AWQ", "gpu": "A100-80GB", "tp": 4, "max_model_len": 32768, "mnbt": 8192},
]
AVAILABLE = [40 * GiB + 12_345_678, 7 * GiB + 1_234_567, 123 * GiB + 999]
COMPUTE_CAPABILITY = {"H200": 9, "B200": 10, "A100-80GB": 8}


def config_path(ref: str) -> Path:
    """`catalog:<entry>` (a catalog folder's config.json, or an early entry's <entry>.json) or a test fixture."""
    if not ref.startswith("catalog:"):
        return FIXTURES / ref
    entry = CATALOG / ref.split(":", 1)[1].split("#", 1)[0]
    return entry / "config.json" if entry.is_dir() else entry.with_suffix(".json")


def read_config(ref: str) -> dict:
    """The config a case names; `#key` takes a sub-config of it (a published VL config's text_config, alone)."""
    raw = json.loads(config_path(ref).read_text())
    return raw[ref.split("#", 1)[1]] if "#" in ref else raw


def model_dir(raw: dict, tmp: Path, name: str) -> Path:
    folder = tmp / name.replace(" ", "_")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return folder


def main(out_path: str) -> None:
    import torch
    import vllm
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.layers.mamba.abstract import MambaBase
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.utils.math_utils import cdiv
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.mla.flashinfer_mla import FlashInferMLABackend
    from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend
    from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        CrossAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.worker.block_table import get_block_table_width
    from vllm.v1.worker.gpu.warmup import _reserved_block_count

    class CheckpointingMamba(MambaBase):
        """Stands in for the model's Mamba layers in the forward context: FlashInfer's GDN prefill (Hopper)
        declares a 64-token checkpoint alignment, Mamba2 mixers 1 (Platform._align_hybrid_block_size reads it)."""

        def __init__(self, alignment):  # noqa: D107 - no nn.Module state needed
            self._alignment = alignment

        def get_prefill_checkpoint_alignment(self):
            return self._alignment

        def get_state_shape(self):  # not read: the specs below come from the model class
            raise NotImplementedError

        def get_state_dtype(self):
            raise NotImplementedError

        @property
        def mamba_type(self):
            raise NotImplementedError

        def get_attn_backend(self):
            return _SSMBackend

    class _SSMBackend:
        @classmethod
        def is_ssm(cls) -> bool:
            return True

    class FlashAttentionLayer(AttentionLayerBase):
        """Stands in for the model's attention layers in the forward context (FlashAttention, CUDA's default)."""

        def get_attn_backend(self):
            return FlashAttentionBackend

        def get_kv_cache_spec(self, vllm_config):  # not read
            raise NotImplementedError

    from vllm.v1.attention.backend import AttentionBackend, MultipleOf

    class FlashAttnMLABackend(AttentionBackend):
        """vllm/v1/attention/backends/mla/flashattn_mla.py does not import without flash-attn kernels (CPU); this
        stand-in has its kernel block sizes, [MultipleOf(16)], and the base class's block-size logic."""

        @staticmethod
        def get_supported_kernel_block_sizes(kv_cache_spec=None):
            return [MultipleOf(16)]

        @staticmethod
        def get_name() -> str:
            return "FLASH_ATTN_MLA"

    def mla_backend(cc: int, kv: str, nope: int):
        """vLLM 0.33 platforms/cuda.py _get_backend_priorities(use_mla=True), first backend that takes the case."""
        if cc == 9:
            return FlashAttnMLABackend if kv == "auto" else FlashMLABackend
        if cc == 10:
            if nope in (64, 128, 192):
                return FlashInferMLABackend
            from vllm.v1.attention.backends.mla.cutlass_mla import CutlassMLABackend  # allocates on CUDA at import

            return CutlassMLABackend
        return TritonMLABackend

    results = []
    tmp = Path(tempfile.mkdtemp(prefix="vllm-kv-ref-"))
    only = os.environ.get("CASES")
    for case in CASES:
        if only and not any(word in case["name"] for word in only.split(",")):
            continue
        started = time.time()
        raw = read_config(case["config"])
        kv = case.get("kv", "auto")
        spec_tokens = case.get("spec", 0)
        prefix_caching = case.get("prefix_caching", True)
        cc = COMPUTE_CAPABILITY[case["gpu"]]
        notes = []
        model_config = ModelConfig(
            model=str(model_dir(raw, tmp, case["name"])),
            skip_tokenizer_init=True,
            max_model_len=case["max_model_len"],
            dtype="auto",
            **({"limit_mm_per_prompt": case["limit_mm"]} if "limit_mm" in case else {}),
        )
        scheduler = SchedulerConfig(
            max_model_len=case["max_model_len"],
            max_num_batched_tokens=case["mnbt"],
            max_num_seqs=256,
            is_encoder_decoder=model_config.is_encoder_decoder,
            enable_chunked_prefill=not model_config.is_encoder_decoder,
            async_scheduling=True,
        )
        vc = VllmConfig(
            model_config=model_config,
            cache_config=CacheConfig(cache_dtype=kv, enable_prefix_caching=prefix_caching and not model_config.is_encoder_decoder),
            parallel_config=ParallelConfig(tensor_parallel_size=case["tp"]),
            scheduler_config=scheduler,
        )
        text = model_config.hf_text_config.to_dict()  # the config as vLLM's model files read it
        if hasattr(model_config.hf_text_config, "hybrid_override_pattern"):  # a property of transformers' NemotronHConfig
            text["hybrid_override_pattern"] = model_config.hf_text_config.hybrid_override_pattern
        cache = vc.cache_config
        scheduler = vc.scheduler_config
        scheduler.async_scheduling = True
        scheduler.max_num_batched_tokens = case["mnbt"]
        scheduler.max_num_encoder_input_tokens = case["mnbt"]
        scheduler.disable_hybrid_kv_cache_manager = False
        if spec_tokens:
            vc.speculative_config = types.SimpleNamespace(
                num_speculative_tokens=spec_tokens,
                use_eagle=lambda: False,
                use_eagle_block_drop=lambda: False,
                use_dflash=lambda: False,
                use_dspark=lambda: False,
                uses_draft_model=lambda: False,
                method="mtp",
            )
            notes.append("speculative_config is a stand-in carrying num_speculative_tokens (a real MTP drafter needs its weights)")
        # CUDA defaults the CPU platform changed for its own kernels.
        cache.block_size = case.get("block_size", 16)
        cache.user_specified_block_size = "block_size" in case
        cache.kv_cache_layout = "LBNHC"  # FlashAttention / FlashInfer on CUDA declare no layout: the default preference
        hybrid = model_config.is_hybrid
        cache.mamba_cache_mode = "align" if hybrid and cache.enable_prefix_caching else "none"
        cache.mamba_page_size_padded = None
        if hybrid:
            ssm = text.get("mamba_ssm_dtype") or text.get("mamba_ssm_cache_dtype") or ("float32" if text.get("model_type") == "nemotron_h" else "auto")
            cache.mamba_ssm_cache_dtype = ssm
            notes.append(f"mamba_ssm_cache_dtype {ssm} (the CUDA platform's; the CPU platform forces float32)")
        mc = model_config
        pc = vc.parallel_config
        dtype = mc.dtype
        kv_dtype = dtype if kv == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kv]

        # Phase 1: the attention backend's block size (MLA backends differ).
        if mc.use_mla:
            backend = mla_backend(cc, kv, text.get("qk_nope_head_dim"))
            cache.block_size = Platform._preferred_block_size_for_backends([backend], 16, vc)
            notes.append(f"MLA backend {backend.get_name()} (compute capability {cc}.x)")
        # Phase 2: hybrid alignment.
        forward = vc.compilation_config.static_forward_context
        forward.clear()
        kinds = layer_plan(text)
        if hybrid:
            cache.mamba_block_size = cache.block_size if cache.mamba_cache_mode == "align" else mc.max_model_len
            gdn = any(k == "gdn" for k in kinds)
            short_conv = any(k == "short_conv" for k in kinds)
            flashinfer_gdn = gdn and (cc == 9 or (cc in (10, 12) and text.get("linear_key_head_dim") == 128))
            # ShortConv keeps MambaBase.get_prefill_checkpoint_alignment (None)
            alignment = None if short_conv else (64 if flashinfer_gdn else None) if gdn else 1
            forward["model.layers.0.mixer"] = CheckpointingMamba(alignment)
            forward["model.layers.1.attn"] = FlashAttentionLayer()
            Platform._align_hybrid_block_size(vc, FlashAttentionBackend)
            forward.clear()
            checkpoint_blocks = 0 if short_conv else 1 if (alignment is not None and cache.mamba_cache_mode == "align") or not gdn else 0
        # Phase 3: each layer's spec, as its get_kv_cache_spec builds it.
        bs = cache.block_size
        specs = {}
        model_cls = None
        for i, kind in enumerate(kinds):
            name = f"model.layers.{i}.attn"
            kv_heads = mc.get_num_kv_heads(pc)
            head = mc.get_head_size()
            per_layer = mc.hf_text_config.per_layer_config if text.get("model_type") == "gemma4_text" else None
            if per_layer is not None:  # Gemma-4: Gemma4DecoderLayer reads config.per_layer_config[i]
                kv_heads = max(1, per_layer[i].num_key_value_heads // pc.tensor_parallel_size)
                head = per_layer[i].head_dim
            if kind == "full":
                specs[name] = FullAttentionSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=kv_dtype)
            elif kind == "sliding":
                specs[name] = SlidingWindowSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=kv_dtype, sliding_window=text["sliding_window"])
            elif kind == "chunked":
                specs[name] = ChunkedLocalAttentionSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=kv_dtype, attention_chunk_size=text["attention_chunk_size"])
            elif kind == "cross":
                specs[name] = CrossAttentionSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=kv_dtype)
            elif kind == "self+cross":
                specs[name] = FullAttentionSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=kv_dtype)
                specs[f"model.layers.{i}.cross_attn"] = CrossAttentionSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=kv_dtype)
            elif kind == "mla":
                specs[name] = MLAAttentionSpec(block_size=bs, num_kv_heads=1, head_size=head, dtype=kv_dtype, cache_dtype_str=kv)
            elif kind in ("gdn", "mamba2"):
                if model_cls is None:
                    model_cls, _ = ModelRegistry.resolve_model_cls(mc.architecture, model_config=mc)
                specs[name] = MambaSpec(
                    shapes=tuple(model_cls.get_mamba_state_shape_from_config(vc)),
                    dtypes=tuple(model_cls.get_mamba_state_dtype_from_config(vc)),
                    block_size=cache.mamba_block_size,
                    page_size_padded=cache.mamba_page_size_padded,
                    mamba_cache_mode=cache.mamba_cache_mode,
                    num_speculative_blocks=vc.num_speculative_tokens,
                    num_prefill_checkpoint_blocks=checkpoint_blocks,
                )
            elif kind == "short_conv":
                # ShortConv.get_kv_cache_spec = MambaBase's: the layer's own get_state_shape (conv_dim, conv_L_cache,
                # num_spec) and get_state_dtype, no prefill checkpoint blocks
                specs[name] = MambaSpec(
                    shapes=MambaStateShapeCalculator.short_conv_state_shape(
                        tp_world_size=pc.tensor_parallel_size, intermediate_size=text["conv_dim"], conv_kernel=text["conv_L_cache"], num_spec=vc.num_speculative_tokens
                    ),
                    dtypes=MambaStateDtypeCalculator.short_conv_state_dtype(mc.dtype, cache.mamba_cache_dtype),
                    block_size=cache.mamba_block_size,
                    page_size_padded=cache.mamba_page_size_padded,
                    mamba_cache_mode=cache.mamba_cache_mode,
                    num_speculative_blocks=vc.num_speculative_tokens,
                )
            elif kind == "shared":
                continue  # kv_sharing_target_layer_name: no spec, no allocation
        try:
            groups = planning.get_global_kv_cache_groups(vc, [specs])
        except AssertionError:  # MambaSpec.page_size_bytes: a state larger than its padded page; vLLM does not start
            states = {sum(math.prod(shape) * dt.itemsize for shape, dt in zip(sp.shapes, sp.dtypes, strict=True)) for sp in specs.values() if isinstance(sp, MambaSpec)}
            error = f"AssertionError in MambaSpec.page_size_bytes: page_size_padded {cache.mamba_page_size_padded} < state {max(states)}"
            results.append({**case, "block_size": cache.block_size, "mamba_page_size_padded": cache.mamba_page_size_padded, "startup_error": error, "notes": notes})
            print(f"{case['name']}: {error}", flush=True)
            continue
        builder = get_kv_cache_config_builder(vc)
        out_avail = []
        for available in AVAILABLE:
            try:
                configs = planning.get_kv_cache_configs(vc, [specs], [available], groups)
            except ValueError as exc:  # _check_enough_kv_cache_memory: vLLM refuses to start
                out_avail.append({"available_bytes": available, "error": str(exc)})
                continue
            kvc = configs[0]
            tokens, concurrency = get_kv_cache_capacity(vc, kvc)
            out_avail.append(
                {
                    "available_bytes": available,
                    "num_blocks": kvc.num_blocks,
                    "tokens": tokens,
                    "concurrency": concurrency,
                }
            )
        bytes_per_block = planning._pool_bytes_per_block_from_builder(builder, vc, groups)
        # MRV2 warmup: prompt 2 + k, decode query 1 + k, 3 decode steps (5 with speculation); EAGLE / MTP / draft
        # speculators reserve k lookahead slots (VllmConfig.num_lookahead_tokens); encoder length max_source_positions.
        decode_len = 2 + spec_tokens + (5 if spec_tokens else 3) * (1 + spec_tokens)
        max_encoder_len = text.get("max_source_positions") or mc.max_model_len if mc.is_encoder_decoder else 0
        group_rows = []
        for g in groups:
            spec = g.kv_cache_spec
            blocks = cdiv(spec.max_memory_usage_bytes(vc), spec.page_size_bytes)
            width = get_block_table_width(spec.max_num_blocks_per_req(vc, mc.max_model_len), spec.block_size, token_alignment=spec.block_table_token_alignment)
            group_rows.append(
                {
                    "spec": type(spec).__name__,
                    "num_layers": len(g.layer_names),  # named layers; a padded group simply has fewer
                    "block_size": spec.block_size,
                    "page_size_bytes": spec.page_size_bytes,
                    "blocks_per_request": blocks,
                    "block_table_width": width,
                    "warmup_blocks": _reserved_block_count(
                        decode_len, spec, num_lookahead_tokens=spec_tokens, max_model_len=mc.max_model_len, max_encoder_len=max_encoder_len
                    ),
                }
            )
        small = 3 * bytes_per_block * sum(r["blocks_per_request"] for r in group_rows) // 4
        fit = planning._estimate_max_model_len_from_groups(builder, vc, groups, small)
        results.append(
            {
                **case,
                "layers_with_kv": len(specs),
                "block_size": cache.block_size,
                "mamba_cache_mode": cache.mamba_cache_mode,
                "mamba_block_size": cache.mamba_block_size,
                "mamba_page_size_padded": cache.mamba_page_size_padded,
                "groups": group_rows,
                "bytes_per_block": bytes_per_block,
                "warmup_decode_len": decode_len,
                "needed_bytes_one_request": planning._max_memory_usage_bytes_from_groups(builder, vc, groups),
                "by_available": out_avail,
                "fit_budget_bytes": small,
                "max_model_len_that_fits": fit,
                "notes": notes,
                "seconds": round(time.time() - started, 1),
            }
        )
        print(f"{case['name']}: {len(groups)} groups, block {cache.block_size}, bytes/block {bytes_per_block}, {out_avail}", flush=True)
    document = {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "platform": "vLLM CPU platform (VLLM_TARGET_DEVICE=cpu), CUDA block-size choices applied as described in the script",
        "kv_cache_layout": "LBNHC",
        "cases": results,
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(document, indent=1) + "\n")


def layer_plan(text: dict) -> list[str]:
    """Each decoder layer's KV kind as the vLLM model file builds it (reads the same fields the model does)."""
    n = text.get("num_hidden_layers") or text.get("decoder_layers")
    mt = text.get("model_type")
    if mt == "whisper":
        return ["self+cross"] * text["decoder_layers"]
    if text.get("kv_lora_rank"):
        return ["mla"] * n
    if mt == "nemotron_h":
        return [{"M": "mamba2", "*": "full"}[c] for c in text["hybrid_override_pattern"] if c in "M*"]
    if mt == "lfm2":  # Lfm2Model.get_layer: full_attention -> attention, anything else -> ShortConv
        return ["full" if t == "full_attention" else "short_conv" for t in text["layer_types"][:n]]
    if mt in ("qwen3_next", "qwen3_5_text"):
        return ["gdn" if t == "linear_attention" else "full" for t in text["layer_types"][:n]]
    if mt == "llama4_text":
        return ["full" if text["no_rope_layers"][i] == 0 else "chunked" for i in range(n)]
    if mt == "gemma3n_text":
        first_shared = n - text["num_kv_shared_layers"]
        return ["shared" if i >= first_shared else ("sliding" if t == "sliding_attention" else "full") for i, t in enumerate(text["layer_types"][:n])]
    if mt == "gemma4_text":
        first_shared = n - (text.get("num_kv_shared_layers") or 0)
        return ["shared" if i >= first_shared else ("sliding" if t == "sliding_attention" else "full") for i, t in enumerate(text["layer_types"][:n])]
    if mt == "gpt_oss":  # OAIAttention: sliding_window = config.sliding_window if layer_idx % 2 == 0 else None
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if mt in ("gemma3", "gemma3_text"):
        pattern = text.get("sliding_window_pattern", 6)
        types = text.get("layer_types") or ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
        return ["sliding" if t == "sliding_attention" else "full" for t in types[:n]]
    return ["full"] * n


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "bench" / "results" / "vllm-kv-reference-2026-11-30" / "reference.json"))
