"""Values shipped for the catalog (capacity/model/shipped): what transformers works out for its entries, recorded."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from capacity import disk_cache
from capacity.model import hf_config
from capacity.model.families import generic
from capacity.model.registry import model_spec
from capacity.model.shipped import KINDS, shipped_file
from capacity.source.resolve import resolve_model
from scripts.make_shipped import worked_out


@pytest.mark.slow
def test_every_shipped_value_is_what_this_install_works_out() -> None:
    """Every entry of every kind, worked out afresh with the installed transformers (the catalog's formula plans)."""
    got = worked_out()
    for kind in KINDS:
        assert got[kind] == json.loads(shipped_file(kind).read_text())["entries"], kind


@pytest.mark.parametrize("name", ["Qwen/Qwen2-Audio-7B-Instruct", "llava-hf/llava-1.5-7b-hf", "Qwen/Qwen3-VL-4B-Instruct", "openai/whisper-tiny"])
def test_a_sample_of_shipped_values_is_what_this_install_works_out(name: str) -> None:
    """Four entries (an audio count, an image-processor count, a materialized generic config, a class default):
    worked out afresh, each value the file ships for them."""
    got = worked_out([name])
    assert any(got.values()), name
    for kind in KINDS:
        shipped = json.loads(shipped_file(kind).read_text())["entries"]
        for digest, entry in got[kind].items():
            assert shipped.get(digest) == entry, (kind, entry["key"])


def test_a_shipped_count_is_read_without_building_a_processor(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_build(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a feature extractor was built")

    monkeypatch.setattr(generic, "audio_item_tokens", no_build)
    monkeypatch.setattr(hf_config, "_built_json", no_build)
    hf_config._materialized_json.cache_clear()
    with disk_cache.bypassed():
        spec = model_spec(resolve_model("Qwen/Qwen2-Audio-7B-Instruct"))
    assert next(m for m in spec.modalities if m.name == "audio").max_tokens_per_item == 750


def test_a_model_outside_the_catalog_counts_once_then_reads_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    source = resolve_model("llava-hf/llava-1.5-7b-hf")
    pre = {**(source.preprocessor or {}), "crop_size": {"height": 224, "width": 224}, "size": {"shortest_edge": 224}}
    edited = replace(source, preprocessor=pre, files={**source.files, "preprocessor_config.json": pre})
    calls: list[int] = []
    real = generic.image_item_tokens

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(generic, "image_item_tokens", counting)
    first = model_spec(edited)
    second = model_spec(edited)
    image = next(m for m in first.modalities if m.name == "image")
    assert image.max_tokens_per_item == (224 // 14) ** 2  # a 224-pixel crop of 14-pixel patches
    assert first.modalities == second.modalities
    assert calls == [1]


def test_an_edited_config_is_materialized_by_transformers_then_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    config = {**resolve_model("Qwen/Qwen3-VL-4B-Instruct").config, "tie_word_embeddings": False}
    calls: list[int] = []
    real = hf_config._built_json

    def counting(raw):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(raw)

    monkeypatch.setattr(hf_config, "_built_json", counting)
    hf_config._materialized_json.cache_clear()
    first = hf_config.materialized(config)
    hf_config._materialized_json.cache_clear()
    assert hf_config.materialized(config) == first
    assert calls == [1]
    assert first["tie_word_embeddings"] is False and first["text_config"]["num_hidden_layers"] == config["text_config"]["num_hidden_layers"]
