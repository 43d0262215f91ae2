"""At 80 columns (pipes, CI logs) every id prints whole: hazard ids in `plan`, model ids and aliases in
`capacity models`, hazard ids in `sweep` cells. `capacity models` describes decoder-only multimodal models by
their items (no "0 encoder tokens"), and `capacity gpus` says when no local GPU was found."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from capacity.cli.app import main
from capacity.gpu.catalog import CATALOG, Gpu
from capacity.source.resolve import catalog
from reports.terminal import render

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

WIDTHS = (60, 80, 100, 200)


def lines_of(capsys, monkeypatch, width: int, argv: list[str]) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    main(argv)
    return [line.rstrip() for line in capsys.readouterr().out.splitlines()]


def printed_whole(word: str, lines: list[str]) -> bool:
    """`word` appears on one line, not cut by an ellipsis nor wrapped."""
    return any(word in line for line in lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_hazard_ids_print_whole(make_plan, width):
    # whisper-tiny above its 448 positions: an error hazard, and the 42-character kv_overallocated_without_encoder_profiling
    plan = make_plan("openai/whisper-tiny", max_model_len=100_000)
    assert max(len(h.id) for h in plan.hazards) >= 42
    out = io.StringIO()
    render(plan, Console(file=out, width=width))
    lines = out.getvalue().splitlines()
    for hazard in plan.hazards:
        assert printed_whole(hazard.id, lines), (hazard.id, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_models_ids_and_aliases_print_whole(capsys, monkeypatch, width):
    lines = lines_of(capsys, monkeypatch, width, ["models"])
    for entry in catalog().values():
        assert printed_whole(entry.name, lines), (entry.name, width)
        for alias in entry.aliases:
            assert printed_whole(alias, lines), (alias, width)


def block_of(lines: list[str], model: str) -> str:
    start = lines.index(model)  # at 80 columns each model is a block headed by its id alone
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return " ".join(" ".join(lines[start:end]).split())


def test_models_show_items_for_decoder_only_multimodal(capsys, monkeypatch):
    lines = lines_of(capsys, monkeypatch, 80, ["models"])
    # Qwen2.5-VL: max_pixels 12,845,056 / (28 x 28) = 16,384 tokens per image; a video at max_model_len 128,000 takes
    # the 14-frame cap: ceil(14 / 2) = 7 frame pairs x 16,384 = 114,688. Gemma-3: mm_tokens_per_image 256.
    qwen = block_of(lines, "Qwen/Qwen2.5-VL-7B-Instruct")
    assert "cross-attention none (decoder-only: items are prompt tokens)" in qwen
    assert "per item 16,384 per image, 114,688 per video" in qwen
    gemma = block_of(lines, "google/gemma-3-4b-it")
    assert "cross-attention none (decoder-only" in gemma and "per item 256 per image" in gemma
    # encoder-decoder: the cross-attention keys a request holds; Whisper's 1500 = max_source_positions
    whisper = block_of(lines, "openai/whisper-large-v3")
    assert "cross-attention 1,500 per request" in whisper and "per item 1,500 per audio" in whisper
    bart = block_of(lines, "facebook/bart-large")
    assert "cross-attention 1,024 per request" in bart and "per item text only" in bart
    assert not any(" 0 " in f" {line} " for line in lines if "cross-attention" in line)


def test_gpus_says_when_no_local_gpu_was_found(capsys, monkeypatch):
    monkeypatch.setattr("capacity.gpu.detect.detect_local_gpu", lambda index=0: None)
    lines = lines_of(capsys, monkeypatch, 120, ["gpus"])
    assert lines[0] == "local GPU: none found (NVML sees no NVIDIA driver or GPU); without --gpu, plans assume an H200"


def test_gpus_shows_the_local_gpu_first(capsys, monkeypatch):
    local = Gpu("NVIDIA L4", 23_034 * 2**20, "nvml", "NVML on this machine (GPU 0)")
    monkeypatch.setattr("capacity.gpu.detect.detect_local_gpu", lambda index=0: local)
    lines = lines_of(capsys, monkeypatch, 160, ["gpus"])
    assert lines[0].startswith("local GPU: NVIDIA L4, 24,152,899,584 B (NVML on this machine (GPU 0))")
    table_rows = lines[lines.index(next(line for line in lines if line.lstrip().startswith("─"))) + 1 :]
    assert table_rows[0].split() == ["NVIDIA", "L4", "22.49", "nvml"]  # 23,034 MiB = 22.49 GiB


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_cells_keep_hazard_ids_whole(capsys, monkeypatch, width):
    argv = ["sweep", "--model", "openai/whisper-tiny", "--gpu", "L4", "--max-num-seqs", "16,256", "--max-model-len", "448,9000,20000,40000"]
    lines = lines_of(capsys, monkeypatch, width, argv)
    assert printed_whole("max_model_len_above_model_limit", lines)
    assert not any("…" in line for line in lines)


# A text model, a VLM, an encoder-decoder (cross-attention group), a sliding-window model and a hybrid (mamba groups
# with TP 4): the plan's tables at 80 columns keep every header word and every cell whole. (The CLI's formula estimate,
# conftest's default for CLI tests: the layout does not depend on how the activation peak was estimated.)
PLAN_LAYOUTS = (
    ["--model", "meta-llama/Llama-3.1-8B-Instruct"],
    ["--model", "Qwen/Qwen2.5-VL-7B-Instruct"],
    ["--model", "openai/whisper-large-v3"],
    ["--model", "google/gemma-3-27b-it"],
    ["--model", "Qwen/Qwen3-Next-80B-A3B-Thinking", "--tensor-parallel-size", "4"],
)
KV_HEADER_WORDS = ("group", "kind", "layers", "page B", "blocks/", "req", "vLLM", "actual", "table", "width", "before", "#46753")


@pytest.mark.parametrize("argv", PLAN_LAYOUTS, ids=lambda argv: argv[1])
def test_plan_tables_fit_80_columns_whole(capsys, monkeypatch, make_plan, argv):
    lines = lines_of(capsys, monkeypatch, 80, ["plan", *argv, "--gpu", "H200"])
    assert max(len(line) for line in lines) <= 80
    assert not any("…" in line for line in lines)
    start = lines.index("KV cache groups and block tables")
    header = " ".join(line for line in lines[start + 1 : start + 6] if line.startswith("┃"))
    for word in KV_HEADER_WORDS:
        assert f" {word} " in header, word
    tp = int(argv[3]) if len(argv) > 2 else 1
    plan = make_plan(argv[1], tensor_parallel_size=tp)
    rows = [line for line in lines[start:] if line.startswith("│") and line[1:].split("│")[0].strip()][: len(plan.kv.groups)]
    for i, (row, g) in enumerate(zip(rows, plan.kv.groups, strict=True)):
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[0] == str(i) and cells[1].split()[0] == g.group.kind.split("_")[0]
        assert cells[3] == f"{g.group.page_size_bytes:,}" and cells[4] == str(g.blocks_per_request_vllm)


def test_gpus_at_80_columns_is_one_line_per_gpu_with_its_aliases(capsys, monkeypatch):
    monkeypatch.setattr("capacity.gpu.detect.detect_local_gpu", lambda index=0: None)
    lines = lines_of(capsys, monkeypatch, 80, ["gpus"])
    assert max(len(line) for line in lines) <= 80 and not any("…" in line for line in lines)
    rows = {line.split()[0]: line for line in lines if line.startswith("  ") and line.split()[0] in {r.name for r in CATALOG}}
    assert len(rows) == len(CATALOG)  # every GPU on a line of its own, its name first
    for record in CATALOG:
        assert f" {record.total_memory_bytes / 2**30:.2f} " in rows[record.name]
        assert rows[record.name].endswith(f" {record.source}")  # the kind of source, whole ("cuda properties")
    # H100-80GB is an alias of the SXM part: the row says so (it was silent before)
    assert "H100-80GB," in rows["H100-SXM"].split()
    assert "H100-80GB" not in " ".join(line for name, line in rows.items() if name != "H100-SXM").split()
    assert any("Refused as ambiguous: A100 (A100-40GB, A100-80GB)" in line for line in lines)


def test_gpus_wide_and_json_carry_every_alias_and_the_provenance(capsys, monkeypatch):
    monkeypatch.setattr("capacity.gpu.detect.detect_local_gpu", lambda index=0: None)
    wide = " ".join(" ".join(lines_of(capsys, monkeypatch, 80, ["gpus", "--wide"])).split())
    h200 = next(r for r in CATALOG if r.name == "H200")
    assert "NVIDIA H200" in wide and "150,109,880,320 B" in wide and " ".join(h200.reference.split()) in wide
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["local"] is None and len(data["catalog"]) == len(CATALOG)
    first = data["catalog"][0]
    assert first["name"] == "H200" and first["aliases"] == list(h200.aliases) and first["total_memory_bytes"] == 150_109_880_320
    assert first["reference"] == h200.reference and first["provenance"].startswith("measured: ")
    assert data["ambiguous"]["H100"] == ["H100-SXM", "H100-PCIe", "H100-NVL"]


@pytest.mark.parametrize("model", ["Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3.5-27B", "zai-org/GLM-4.1V-9B-Thinking", "Qwen/Qwen2.5-VL-7B-Instruct"])
def test_models_shows_the_tokens_per_item_a_plan_uses(capsys, monkeypatch, make_plan, model):
    # these printed "0 per video": the listing built the spec without the video preprocessor config the plan reads
    plan = make_plan(model)
    assert all(n > 0 for n in plan.budget.max_tokens_per_item.values())
    expected = ", ".join(f"{n:,} per {m}" for m, n in plan.budget.max_tokens_per_item.items())
    assert f"per item {expected}" in block_of(lines_of(capsys, monkeypatch, 80, ["models"]), model)
    monkeypatch.setenv("COLUMNS", "80")
    main(["models", "--json"])
    listed = {m["id"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed[model]["max_tokens_per_item"] == plan.budget.max_tokens_per_item


def test_models_lists_the_ids_it_cannot_plan_offline_with_the_reason(capsys, monkeypatch):
    every = catalog(include_unplannable=True)
    refused = [e for e in every.values() if not e.plannable]
    assert refused  # the catalog holds such ids (Qwen3-VL-32B: no preprocessor config published)
    lines = lines_of(capsys, monkeypatch, 80, ["models"])
    assert any(line.startswith(f"not plannable from the catalog alone ({len(refused)} id") for line in lines)
    for entry in refused:
        block = block_of(lines, entry.name)
        assert f"why {' '.join(entry.not_plannable.split())}" in block
    monkeypatch.setenv("COLUMNS", "80")
    main(["models", "--json"])
    listed = {m["id"]: m for m in json.loads(capsys.readouterr().out)}
    assert set(listed) == set(every)
    for entry in refused:
        assert listed[entry.name]["plannable"] is False and listed[entry.name]["not_plannable"] == entry.not_plannable


@pytest.mark.parametrize("width", (44, *WIDTHS))
def test_tensor_parallel_ranks_table_is_never_cut(capsys, monkeypatch, tmp_path, width):
    # a saved whisper-tiny profile as two ranks, rank 1 with 10 MiB more transient peak: it decides
    from dataclasses import replace

    from capacity.memory.measured_profile import combine_ranks, load_profile, save_profile
    from tests.support.paths import REPO_ROOT

    base = replace(load_profile(REPO_ROOT / "bench/results/h200-profiles-2026-11-30/profile-openai--whisper-tiny.json"), measured_tensor_parallel_size=2)
    heavy = replace(base, rank=1, transient_peak_headroom_bytes=base.transient_peak_headroom_bytes + 10 * 2**20)
    save_profile(combine_ranks((replace(base, rank=0), heavy)), tmp_path / "tp.json")
    monkeypatch.setenv("COLUMNS", "80")
    main(["plan", "--profile", str(tmp_path / "tp.json"), "--json"])
    ranks = json.loads(capsys.readouterr().out)["ranks"]
    lines = lines_of(capsys, monkeypatch, width, ["plan", "--profile", str(tmp_path / "tp.json")])
    table = lines[lines.index(next(line for line in lines if line.startswith("tensor-parallel ranks"))) :]
    table = table[: next(i for i, line in enumerate(table) if line.startswith("└"))]
    text = "\n".join(table)
    assert "…" not in text and max(len(line) for line in table) <= width
    for word in ("weights", "activation peak", "encoder cache", "non-torch", "CUDA graphs", "available KV"):
        assert word in text, (word, width)
    in_mib = "; MiB" in " ".join(table[:3])
    for r in ranks:
        shown = f"{r['available_kv_bytes'] / 2**20:,.1f}" if in_mib else f"{r['available_kv_bytes']:,}"
        assert shown in text, (shown, width)
    assert "(decides)" in text and in_mib == (width == 44)  # bytes while two columns of 15 digits fit beside the terms
