"""capacity/gpu/gpus.json: every record complete and unique by name and alias; the Gpu objects built from it are
the ones the Python tables built before the catalog became data (values below worked out by hand)."""

from __future__ import annotations

import json
from dataclasses import fields
from importlib import resources
from typing import Any

import pytest

from capacity.gpu.catalog import AMBIGUOUS, CATALOG, CATALOG_FILE, Gpu, GpuRecord, gpu_by_name, normalized_name
from capacity.units import GiB, MiB

TYPES = {"aliases": list, "total_memory_bytes": int, "sm100": bool, "unified_memory": bool, "compute_capability_major": int, "nvlink": bool, "l2_cache_bytes": int}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
    return dict(pairs)


def raw_records() -> list[dict[str, Any]]:
    text = resources.files("capacity.gpu").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    return json.loads(text, object_pairs_hook=_no_duplicate_keys)


def test_every_record_has_every_field_of_its_type() -> None:
    names = [f.name for f in fields(GpuRecord)]
    for record in raw_records():
        assert list(record) == names, record.get("name")
        for key, value in record.items():
            assert type(value) is TYPES.get(key, str), (record["name"], key)
        assert all(isinstance(a, str) and a for a in record["aliases"]), record["name"]
        assert record["platform"] in ("cuda", "rocm") and record["total_memory_bytes"] > 0, record["name"]
        assert record["l2_cache_bytes"] % MiB == 0 and bool(record["l2_reference"]) == bool(record["l2_cache_bytes"]), record["name"]


def test_names_and_aliases_are_unique() -> None:
    """catalog_entry takes the first record a name matches: no name or alias may match two records (an alias may
    spell its own record's name another way: "NVIDIA H200"), nor an ambiguous short name."""
    names = [k for record in raw_records() for k in (record["name"], *record["aliases"])]
    assert len(names) == len(set(names)), sorted(k for k in set(names) if names.count(k) > 1)
    keys = [k for record in raw_records() for k in {normalized_name(n) for n in (record["name"], *record["aliases"])}]
    assert len(keys) == len(set(keys)), sorted(k for k in set(keys) if keys.count(k) > 1)
    assert not {normalized_name(short) for short in AMBIGUOUS} & set(keys)
    assert all(choice in {r.name for r in CATALOG} for choices in AMBIGUOUS.values() for choice in choices)


def test_the_catalog_is_the_json_in_order() -> None:
    assert [r.name for r in CATALOG] == [r["name"] for r in raw_records()]
    assert len(CATALOG) == 53


@pytest.mark.parametrize(
    "expected",
    [
        Gpu(
            "H200",
            150_109_880_320,
            "catalog",
            "measured: cudaMemGetInfo total on the project's H200 (driver 580.159.04); nvidia-smi shows 143,771 MiB",
            compute_capability_major=9,
            nvlink=True,
            l2_cache_bytes=60 * MiB,
        ),
        Gpu(
            "B300",
            26_769 * GiB // 100,
            "catalog",
            "vllm log: 'Free memory on device (267.08/267.69 GiB)' of vLLM 0.26.0 on a Runpod B300 (index id 63390294774, "
            "bench/vllm_logs/gemma-4-31b-b300-len16384-util0.92-v0.26.0.log); nvidia-smi shows 275,040 MiB, NVIDIA B300 SXM6 AC (index id 65926719034)",
            sm100=True,
            compute_capability_major=10,
            nvlink=True,
        ),
        Gpu(
            "T4",
            1_474 * GiB // 100,
            "catalog",
            "vllm log: V0 'total_gpu_memory (14.74GiB)' on a Colab T4 (index id 7884883735, bench/vllm_logs/llama-3.2-3b-t4-*); a CUDA OOM "
            "elsewhere reads 'total capacity of 14.57 GiB' (index id 71609078484: ECC or driver differ); nvidia-smi shows 15,360 MiB",
            compute_capability_major=7,
            l2_cache_bytes=4 * MiB,
        ),
        Gpu("RTX-5090", 32_607 * MiB, "catalog", "nvidia-smi: 32,607 MiB, NVIDIA GeForce RTX 5090 (index id 34759949062)", compute_capability_major=12, l2_cache_bytes=96 * MiB),
        Gpu(
            "A100-80GB",
            7_915 * GiB // 100,
            "catalog",
            "cuda oom: 'GPU 0 has a total capacity of 79.15 GiB' on an 80GB A100 (index id 55333476420); vLLM's 'Free memory on device "
            "(78.68/79.15 GiB)' (index id 60004023718); nvidia-smi shows 81,920 MiB",
            compute_capability_major=8,
            l2_cache_bytes=40 * MiB,
        ),
    ],
    ids=lambda gpu: gpu.name,
)
def test_gpu_objects_as_before(expected: Gpu) -> None:
    assert gpu_by_name(expected.name) == expected


def test_noted_gpus_as_before() -> None:
    """Records with a platform note: the provenance ends with it; the fields the old tables gave."""
    mi355x = gpu_by_name("MI355X")
    assert mi355x.total_memory_bytes == 288 * GiB - (192 * GiB - 19_198 * GiB // 100)  # less the 0.02 GiB an MI300X's driver keeps
    assert (mi355x.platform, mi355x.compute_capability_major, mi355x.nvlink, mi355x.l2_cache_bytes, mi355x.sm100) == ("rocm", 9, False, 0, False)
    assert mi355x.provenance.startswith("published: 288 GB HBM3E (AMD counts GiB;") and "; ROCm: vLLM's ROCm platform runs" in mi355x.provenance
    gb10 = gpu_by_name("GB10")
    assert (gb10.total_memory_bytes, gb10.unified_memory, gb10.compute_capability_major, gb10.l2_cache_bytes) == (12_169 * GiB // 100, True, 12, 0)
    assert gb10.provenance.endswith("vLLM gives GB10 the small batch defaults (2048 tokens, 256 seqs) like an A100")
    thor = gpu_by_name("Jetson-Thor")
    assert (thor.total_memory_bytes, thor.compute_capability_major, thor.unified_memory) == (125_748 * MiB, 11, True)
    assert "unified memory (Jetson)" in thor.provenance
    assert gpu_by_name("RTX-4060-Laptop-WSL").provenance.endswith("the same card on native Linux reports ~0.37 GiB less")
