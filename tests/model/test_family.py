"""The family objects: one per family, discovered from their files, carried by ModelSpec, serialized by name."""

from __future__ import annotations

import copy
import json
import pickle
import sys
import textwrap

import pytest

import capacity.model.families as families
import capacity.model.family as family_module
import capacity.model.registry as registry
from capacity.errors import BadInput
from capacity.model.family import all_families, family_named
from capacity.model.registry import family_for, spec_from_files
from capacity.source.resolve import catalog, catalog_config
from tests.support.paths import REPO_ROOT

# Each catalog model's family, by hand from its config.json's model_type.
CATALOG_FAMILIES = {
    "openai/whisper-tiny": "whisper",
    "openai/whisper-small": "whisper",
    "openai/whisper-large-v3": "whisper",
    "openai/whisper-large-v3-turbo": "whisper",
    "nvidia/NVIDIA-Nemotron-Parse-v1.1": "nemotron_parse",
    "nvidia/NVIDIA-Nemotron-Parse-v1.2": "nemotron_parse",
    "meta-llama/Llama-3.2-11B-Vision-Instruct": "mllama",
    "microsoft/Florence-2-large": "florence2",
    "Qwen/Qwen2.5-VL-7B-Instruct": "qwen2_5_vl",
    "google/gemma-3-4b-it": "gemma3",
    "facebook/bart-large": "bart",
    "google-t5/t5-small": "t5",
}


def test_every_family_has_a_unique_name_and_model_types():
    names = [f.name for f in all_families()]
    assert names == sorted(set(names))
    assert {"bart", "decoder_only", "florence2", "gemma3", "mllama", "nemotron_parse", "qwen2_5_vl", "t5", "whisper"} <= set(names)
    claimed = [t for f in all_families() for t in f.model_types]
    assert len(claimed) == len(set(claimed))


@pytest.mark.parametrize("name", sorted(CATALOG_FAMILIES))
def test_catalog_model_goes_to_its_family_and_serializes_it_by_name(name):
    entry = catalog()[name]
    spec = spec_from_files(catalog_config(entry), entry.name)
    assert spec.family is family_named(CATALOG_FAMILIES[name])
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["family"] == CATALOG_FAMILIES[name]
    assert data["name"] == spec.name and len(data["layers"]) == len(spec.layers)


def test_copies_of_a_spec_keep_the_registered_family():
    entry = catalog()["google/gemma-3-4b-it"]
    spec = spec_from_files(catalog_config(entry), entry.name)
    assert copy.deepcopy(spec).family is spec.family
    assert pickle.loads(pickle.dumps(spec)).family is spec.family


def test_unclaimed_config_fails_closed_in_one_line():
    with pytest.raises(BadInput, match=r"unsupported architecture \(model_type='nope'") as exc:
        family_for({"model_type": "nope", "architectures": ["NopeModel"]})
    assert "\n" not in str(exc.value)


def test_calibration_constants_live_on_their_family():
    assert family_named("florence2").trace_undercount_percent == 74
    assert family_named("nemotron_parse").trace_undercount_percent == 15
    assert family_named("whisper").trace_undercount_percent is None
    assert family_named("whisper").verify_decoder_path == ("model", "decoder")
    assert all(family_named(n).profilable for n in ("mllama", "internvl_chat", "minicpmv", "ultravox"))


ROOT = REPO_ROOT


def readme_family_example() -> str:
    """The architecture page's "Adding a family touches one file" block (docs/architecture.md), as the file it says to write."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text[text.index("Adding a family touches one file") :]
    block = block[block.index("```python") + len("```python") : block.index("```", block.index("```python") + 3)]
    return textwrap.dedent(block)


def test_the_readme_family_is_one_new_file(tmp_path, monkeypatch):
    (tmp_path / "toy_asr.py").write_text(readme_family_example())
    monkeypatch.setattr(families, "__path__", [*families.__path__, str(tmp_path)])
    family_module.all_families.cache_clear()
    registry._by_model_type.cache_clear()
    registry.declared_families.cache_clear()
    try:
        config = {**catalog_config(catalog()["openai/whisper-tiny"]), "model_type": "toy_asr"}
        spec = spec_from_files(config, "toy")
        assert spec.family.name == "toy_asr"
        # whisper-tiny: 4 decoder layers, each self + cross attention of 6 heads x 64 (d_model 384), 1500 positions
        assert len(spec.layers) == 8
        assert [(layer.kind, layer.num_kv_heads, layer.head_size) for layer in spec.layers[:2]] == [("full", 6, 64), ("cross", 6, 64)]
        assert spec.modalities[0].max_tokens_per_item == 1500
        from capacity.model.arch import parameter_count

        assert parameter_count(spec.family.build_module(config)) == 37_760_640  # whisper-tiny's published count
    finally:
        family_module.all_families.cache_clear()
        registry._by_model_type.cache_clear()
        registry.declared_families.cache_clear()
        sys.modules.pop("capacity.model.families.toy_asr", None)


def test_tensor_parallel_rules_live_on_the_family_and_name_vllm_layers():
    # Roles read from vLLM 0.33's model files: qwen2_5_vl.py vision attn.qkv is a QKVParallelLinear (column) unless the
    # encoder is whole on every rank (--mm-encoder-tp-mode data); whisper.py proj_out is the ParallelLMHead and its
    # out_proj a RowParallelLinear; a family with no rules (gemma3) has None, which the TP profiler refuses.
    from capacity.model.family import family_named

    qwen = family_named("qwen2_5_vl").tensor_parallel_rules
    assert qwen is not None and qwen.encoder_data_parallel
    assert qwen.role("model.visual.blocks.0.attn.qkv", encoder_whole=False) == "column"
    assert qwen.role("model.visual.blocks.0.attn.qkv", encoder_whole=True) is None
    assert qwen.role("model.language_model.layers.0.mlp.down_proj", encoder_whole=True) == "row"
    whisper = family_named("whisper").tensor_parallel_rules
    assert whisper is not None and not whisper.encoder_data_parallel
    assert whisper.role("proj_out", encoder_whole=False) == "lm_head"
    assert whisper.role("model.decoder.layers.0.self_attn.out_proj", encoder_whole=False) == "row"
    assert whisper.role("model.decoder.embed_tokens", encoder_whole=False) is None  # a whole nn.Embedding in vLLM
    assert family_named("gemma3").tensor_parallel_rules is None
