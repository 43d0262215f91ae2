"""Tokens per item that transformers classes count, shipped for the catalog and kept in the disk cache for the rest."""

from __future__ import annotations

import json
from dataclasses import replace

from capacity import disk_cache
from capacity.model.families import generic
from capacity.model.registry import model_spec
from capacity.source.resolve import resolve_model
from scripts.make_shipped_item_tokens import FILE, counted


def test_the_shipped_counts_are_what_this_install_counts() -> None:
    """Every shipped count (Qwen2-Audio, Voxtral, LLaVA-1.5, GLM-4.1V) worked out afresh with the installed
    transformers, and nothing else counted by a transformers class in the catalog."""
    shipped = json.loads(FILE.read_text())["entries"]
    assert counted() == shipped
    assert {entry["key"]["modality"] for entry in shipped.values()} == {"image", "audio"}


def test_a_shipped_count_is_read_without_building_a_processor(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def no_build(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a feature extractor was built")

    monkeypatch.setattr(generic, "audio_item_tokens", no_build)
    with disk_cache.bypassed():
        spec = model_spec(resolve_model("Qwen/Qwen2-Audio-7B-Instruct"))
    assert next(m for m in spec.modalities if m.name == "audio").max_tokens_per_item == 750


def test_a_model_outside_the_catalog_counts_once_then_reads_the_cache(monkeypatch) -> None:  # type: ignore[no-untyped-def]
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
