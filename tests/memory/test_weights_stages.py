"""A pipeline stage's weights on a catalog model (capacity/memory/weights.py with `stage`), worked out by hand from the
configs and vLLM 0.33's llama.py: embedding on the first stage (and the last when tied), final norm and LM head on the
last, each stage its own decoder layers (get_pp_indices); VocabParallelEmbedding pads the vocabulary to 64."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.errors import BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.memory.weights import weights_breakdown
from capacity.model.registry import model_spec
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.pipeline import pipeline_stages
from capacity.source.resolve import resolve_model


def _stage_bytes(model: str, pp: int, tied: bool) -> tuple[list[int], int]:
    source = resolve_model(model)
    spec = model_spec(source)
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    layers = spec.decoder.num_layers
    stages = [weights_breakdown(spec, source, serving, stage=s.weights_slice(layers, tied)).total_bytes for s in pipeline_stages(layers, pp)]
    return stages, weights_breakdown(spec, source, serving).total_bytes


def test_llama_3_1_8b_at_pp2() -> None:
    # hidden 4096, 32 layers, FFN 14336, 32 query / 8 KV heads of 128, vocab 128,256 (a multiple of 64), untied, bf16.
    # A layer: q 4096^2 + k, v 2 x 1024 x 4096 + o 4096^2 + 3 x 14336 x 4096 + 2 norms x 4096 = 218,112,000 params
    # = 436,224,000 B. Embedding = LM head = 128,256 x 4096 x 2 B = 1,050,673,152 B. Final norm 8,192 B.
    stages, whole = _stage_bytes("meta-llama/Llama-3.1-8B-Instruct", 2, tied=False)
    assert stages == [1_050_673_152 + 16 * 436_224_000, 16 * 436_224_000 + 8_192 + 1_050_673_152]  # 8,030,257,152 and 8,030,265,344
    assert sum(stages) == whole == 16_060_522_496


def test_a_tied_llama_like_folder_holds_the_embedding_on_both_end_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # hidden 64, 4 layers, FFN 128, 4 query / 2 KV heads of 16, vocab 100, tied; built on the meta device (config only).
    # A layer: 64 + 64^2 + 2 x 32 x 64 + 64^2 + 64 + 3 x 128 x 64 = 36,992 params = 73,984 B; the embedding padded to
    # 128 rows: 128 x 64 x 2 B = 16,384 B, on the first stage and (tie_weights) the last; final norm 128 B.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 4, "vocab_size": 100,
        "max_position_embeddings": 2048, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    stages, whole = _stage_bytes(str(tmp_path), 2, tied=True)
    assert stages == [16_384 + 2 * 73_984, 2 * 73_984 + 128 + 16_384]
    assert whole == 16_384 + 4 * 73_984 + 128  # 312,448: the matrix once at PP 1
    assert sum(stages) == whole + 16_384


def test_a_multimodal_tower_is_refused_per_stage() -> None:
    source = resolve_model("llava-hf/llava-1.5-7b-hf")
    spec = model_spec(source)
    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    stage = pipeline_stages(spec.decoder.num_layers, 2)[0].weights_slice(spec.decoder.num_layers, False)
    with pytest.raises(BadInput, match="which pipeline stage vLLM builds this tensor on is not modelled"):
        weights_breakdown(spec, source, serving, stage=stage)
