"""`capacity reconcile`: vLLM startup logs (0.11, 0.15, 0.20, 0.33 formats) parsed and set beside the plan.

Fixtures (tests/fixtures/vllm_logs/, derivations in its README.md): whisper-large-v3 on an H200 with vLLM's
defaults (max_num_batched_tokens 8192, max_num_seqs 1024, block 16). Hand arithmetic used below:
page per layer 2 x 16 x 20 KV heads x 64 x 2 B = 81,920 B; 32 layers per group -> bytes_per_block 2,621,440 B
(2.5 MiB, so 1 GiB = 409.6 blocks); blocks per request cdiv(448, 16) + cdiv(8192, 16) = 28 + 512 = 540 (0.15+),
28 + cdiv(1500, 16) = 28 + 94 = 122 (0.11); H200 total 150,109,880,320 B, free at startup 149,356,150,784 B.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from capacity.errors import BadInput
from capacity.planning.plan import Plan
from capacity.reconcile.compare import reconcile, reconcile_facts
from capacity.vllm.log_startups import parse_vllm_log
from capacity.vllm.versions import log_semantics
from reports.reconcile import render_reconcile
from tests.support.whisper_logs import BPB, FREE, REQUESTED_090, REQUESTED_092, ROOT, V011, V015, V020, V033, V033_KV, WHISPER, GiB

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")




# ------------------------------------------------------------------ the fixtures agree with the formats


def test_fixture_figures_follow_vllm_formulas() -> None:
    # 0.33: num_blocks = 125 GiB // 2.5 MiB; one line: int(n / 540 x 448) tokens, n / 540 concurrency
    n = 125 * GiB // BPB
    assert n == 51_200 and int(n / 540 * 448) == 42_477 and f"{n / 540:.2f}" == "94.81"
    n = 120 * GiB // BPB
    assert n == 49_152 and int(n / 540 * 448) == 40_777 and f"{n / 540:.2f}" == "91.02"
    # 0.11-0.20: tokens = n // 2 groups x 16
    n = int(124.5 * GiB) // BPB
    assert n == 50_995 and n // 2 * 16 == 407_952 and f"{n / 540:.2f}" == "94.44"
    n = 122 * GiB // BPB
    assert n == 49_971 and n // 2 * 16 == 399_760 and f"{n / 540:.2f}" == "92.54"
    n = int(121.5 * GiB) // BPB
    assert n == 49_766 and n // 2 * 16 == 398_128 and f"{n / 122:.2f}" == "407.92"


# ------------------------------------------------------------------ reconcile: rows against plans


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    from capacity.gpu.catalog import gpu_by_name
    from capacity.model.registry import model_spec
    from capacity.planning.planner import build_plan
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.source.resolve import resolve_model

    source = resolve_model(WHISPER)
    spec = model_spec(source)
    gpu = gpu_by_name("H200")

    def plan(**knobs: object) -> Plan:
        return build_plan(source, spec, gpu, resolve_serving(ServingArgs(**knobs), spec, gpu))  # type: ignore[arg-type]

    return {
        "default": plan(),
        "kv125": plan(kv_cache_memory_bytes=125 * GiB),
        "kv120": plan(kv_cache_memory_bytes=120 * GiB),
        "kv124.5": plan(kv_cache_memory_bytes=int(124.5 * GiB)),
        "util0.9": plan(gpu_memory_utilization=0.9),
    }


def test_v0_33_against_a_plan_with_the_logs_kv_bytes(plans: dict[str, Plan]) -> None:
    r = reconcile(V033, plans["kv125"])
    assert r.vllm_version == "0.33.0"
    nb = r.row("num_blocks")
    assert (nb.vllm_value, nb.capacity_value, nb.agrees) == (51_200, 51_200, True)
    c = r.row("max_concurrency")
    assert (c.vllm_value, c.capacity_value, c.agrees, c.vllm, c.capacity) == (94.81, 94.81, True, "94.81x", "94.81x")
    t = r.row("kv_cache_tokens")
    assert (t.vllm_value, t.capacity_value, t.agrees) == (42_477, 42_477, True)
    assert r.row("available_kv_cache").agrees and r.row("available_kv_cache").capacity_value == 125.0
    assert (r.row("blocks_per_request").vllm_value, r.row("blocks_per_request").capacity_value) == (540, 540)
    for key in ("model", "max_model_len", "gpu_total_memory", "gpu_memory_utilization", "requested_memory", "free_at_startup", "free_minus_requested"):
        assert r.row(key).agrees, key
    fr = r.row("free_minus_requested")
    assert (fr.vllm_value, fr.capacity_value) == (11_255_060_889, FREE - REQUESTED_092)
    enc = r.row("encoder_cache_budget")
    assert (enc.vllm_value, enc.capacity_value, enc.agrees) == (8192, 8192, True)  # max(8192, 1500)
    items = r.row("encoder_profile_items")
    assert (items.vllm, items.capacity, items.agrees) == ("5 audio", "5 audio", True)
    json.dumps(r.to_dict())


def test_v0_33_against_the_default_plan_explains_each_difference(plans: dict[str, Plan]) -> None:
    plan = plans["default"]
    r = reconcile(V033, plan)
    nb = r.row("num_blocks")
    assert nb.vllm_value == 51_200 and nb.capacity_value == plan.kv.num_blocks
    assert nb.agrees == (plan.kv.num_blocks == 51_200)
    assert nb.difference == f"{plan.kv.num_blocks - 51_200:+,}"
    assert "does not print num_blocks" in nb.explanation and "2,621,440 B per block" in nb.explanation
    c = r.row("max_concurrency")
    assert c.vllm_value == 94.81
    # the encoder-decoder story: 8192 tokens of cross-attention charged (512 blocks), 1500 held (94 blocks)
    for needle in ("max_num_batched_tokens (8,192)", "512 blocks", "1,500 encoder tokens (94 blocks)", "actual concurrency"):
        assert needle in c.explanation, needle
    assert f"51,200 blocks under capacity's count give {51_200 / 540:.2f}x" in c.explanation
    # non-KV = requested - available: 128.62 - 125.0 = 3.62 GiB printed figures
    nk = r.row("non_kv")
    assert nk.vllm_value == 3.62 and "estimated" in nk.explanation
    assert r.row("available_kv_cache").vllm_value == 125.0
    assert r.row("free_minus_requested").agrees  # exact, and capacity's CUDA context is the case's
    # vLLM 0.33's peak activation includes the applied CUDA-graph estimate; capacity's side adds the same terms
    pa = r.row("peak_activation")
    assert pa.vllm_value == 0.48
    assert pa.capacity_value == (plan.memory["activation_peak"].bytes + plan.memory["encoder_cache"].bytes + plan.memory["cuda_graphs"].bytes) / GiB
    cons = r.row("consumed")
    assert cons.capacity_value == (plan.memory["weights"].bytes + plan.memory["non_torch"].bytes) / GiB
    assert r.row("cuda_graphs_estimate").vllm_value == 0.08 and r.row("cuda_graphs_actual").vllm_value == 0.09


def test_model_loading_row_uses_the_printed_precision(plans: dict[str, Plan]) -> None:
    # (1,543,490,560 parameters + 122,880 of the K biases vLLM's fused qkv_proj / kv_proj add) x 2 B
    # = 3,087,226,880 B = 2.875204 GiB
    weights = plans["default"].memory["weights"].bytes
    assert weights == 3_087_226_880
    row = reconcile(V011, plans["default"]).row("model_loading")
    # 2.8758 stands for [2.87575, 2.87585] GiB; 2.87575 x 2**30 = 3,087,813,591.04 -> at least 586,712 B = 0.56 MiB
    # (0.11's loader measured the allocator's growth, not the parameter bytes)
    assert (row.vllm, row.agrees) == ("2.8758 GiB", False) and "by at least 0.56 MiB" in row.explanation
    row = reconcile(V033, plans["default"]).row("model_loading")
    # 2.88 stands for [2.875, 2.885] GiB = [3,087,007,744, 3,097,745,162] B: the plan's weights are inside
    assert row.agrees is True


def test_v0_33_kv_cache_memory_bytes_log(plans: dict[str, Plan]) -> None:
    r = reconcile(V033_KV, plans["kv120"])
    nb = r.row("num_blocks")
    assert (nb.vllm, nb.capacity_value, nb.agrees) == ("49,151-49,152", 49_152, True)
    assert (r.row("max_concurrency").capacity_value, r.row("max_concurrency").agrees) == (91.02, True)
    assert (r.row("kv_cache_tokens").capacity_value, r.row("kv_cache_tokens").agrees) == (40_777, True)
    av = r.row("available_kv_cache")
    assert av.agrees and "--kv-cache-memory-bytes" in av.explanation
    assert "non_kv" not in r.keys  # profiling skipped: no non-KV figure in the log
    # the same log against a profiled plan says how to compare like with like
    av = reconcile(V033_KV, plans["default"]).row("available_kv_cache")
    assert av.agrees is False and "plan with the same --kv-cache-memory-bytes" in av.explanation


def test_v0_20_two_line_log(plans: dict[str, Plan]) -> None:
    r = reconcile(V020, plans["kv124.5"])
    assert r.row("num_blocks").capacity_value == 50_995 and r.row("num_blocks").agrees
    assert r.row("max_concurrency").agrees  # 50995 / 540 = 94.435 -> 94.44 in both
    t = r.row("kv_cache_tokens")
    # 0.20 printed num_blocks // 2 groups x 16: capacity's 50,995 blocks under that formula give 50995 // 2 x 16 = 407,952
    # (0.33 would print int(50995 x 448 / 540) = int(22,845,760 / 540) = int(42,306.96) = 42,306: named, not compared)
    assert (t.vllm_value, t.capacity_value, t.agrees) == (407_952, 407_952, True)
    assert "int(concurrency x max_model_len) = 42,306" in t.explanation
    assert r.row("cuda_graphs_estimate").vllm_value == 0.08
    assert any("the plan uses vLLM 0.20-0.22's rules" in n for n in r.notes)


def test_v0_15_log_and_the_utilization_default(plans: dict[str, Plan]) -> None:
    r = reconcile(V015, plans["default"])
    u = r.row("gpu_memory_utilization")
    assert (u.vllm_value, u.capacity_value, u.agrees) == (0.9, 0.92, False)
    assert "--gpu-memory-utilization 0.9" in u.explanation
    assert any("defaulted to 0.9" in n for n in r.notes)
    # planned with the log's utilization, the startup rows line up: requested ceil(total x 0.9) = 135,098,892,288 B
    r = reconcile(V015, plans["util0.9"])
    assert r.row("gpu_memory_utilization").agrees and r.row("requested_memory").agrees
    fr = r.row("free_minus_requested")
    assert (fr.vllm_value, fr.capacity_value, fr.agrees) == (14_257_258_496, FREE - REQUESTED_090, True)
    assert r.row("non_torch").vllm_value == 0.28 and r.row("peak_activation").vllm_value == 0.66
    assert "cuda_graphs_estimate" not in r.keys  # 0.15 subtracted no CUDA-graph estimate
    assert "set no memory aside for CUDA graphs" in r.row("cuda_graphs_actual").explanation
    assert r.row("num_blocks").vllm == "49,970-49,971"


def test_v0_11_counts_cross_attention_by_the_encoder_length(plans: dict[str, Plan]) -> None:
    plan = plans["default"]
    r = reconcile(V011, plan)
    assert r.vllm_version == "0.11"
    b = r.row("blocks_per_request")
    assert (b.vllm_value, b.capacity_value, b.agrees) == (122, 540, False)  # 28 + 94 vs 28 + 512
    assert plan.kv.blocks_per_request_actual == 122
    assert "cdiv(1,500, 16) = 94" in b.explanation and "capacity's actual count" in b.explanation
    c = r.row("max_concurrency")
    assert c.vllm_value == 407.92 and c.agrees is False
    assert "counts the 94 blocks already" in c.explanation
    enc = r.row("encoder_cache_budget")
    assert (enc.vllm_value, enc.capacity_value, enc.agrees) == (1500, 8192, False)
    assert "vLLM 0.11 set max_num_encoder_input_tokens to the encoder length" in enc.explanation
    assert (r.row("encoder_profile_items").vllm_value, r.row("encoder_profile_items").capacity_value) == (1, 5)
    assert "non_kv" not in r.keys  # 0.11's utilization default (0.9) is not capacity's: no requested memory to subtract from
    assert any("cross-attention counted by the encoder length" in n for n in r.notes)


def test_a_log_of_another_model(make_plan: Callable[..., Plan]) -> None:
    r = reconcile(V033, make_plan("openai/whisper-tiny"))
    m = r.row("model")
    assert (m.vllm_value, m.capacity_value, m.agrees) == (WHISPER, "openai/whisper-tiny", False)
    assert f"--model {WHISPER}" in m.explanation


def test_the_logged_batch_is_compared_with_the_plans(make_plan: Callable[..., Plan]) -> None:
    # vLLM's scheduler line names the batch the run used; a plan with another batch sizes other activations
    line = "INFO 04-22 23:58:13 [scheduler.py:238] Chunked prefill is enabled with max_num_batched_tokens=2048."
    facts = parse_vllm_log(line + "\n" + V033.read_text(), source="batch.log")
    same = reconcile_facts(facts, make_plan(WHISPER, max_num_batched_tokens=2048), semantics=log_semantics(facts)).row("max_num_batched_tokens")
    assert (same.vllm_value, same.capacity_value, same.agrees) == (2048, 2048, True)
    other = reconcile_facts(facts, make_plan(WHISPER, max_num_batched_tokens=8192), semantics=log_semantics(facts)).row("max_num_batched_tokens")
    assert (other.vllm_value, other.capacity_value, other.agrees, other.difference) == (2048, 8192, False, "+6,144")
    assert "--max-num-batched-tokens 2048" in other.explanation
    assert "max_num_batched_tokens" not in reconcile(V033, make_plan(WHISPER)).keys  # the fixture prints no scheduler line


def test_a_log_that_stops_early_lists_what_is_missing(plans: dict[str, Plan]) -> None:
    text = V033.read_text().splitlines()[:6]  # up to the encoder line
    facts = parse_vllm_log("\n".join(text), source="early.log")
    r = reconcile_facts(facts, plans["default"], semantics=log_semantics(facts))
    assert "num_blocks" not in r.keys and "max_concurrency" not in r.keys
    assert any("not in the log" in n and "'Available KV cache memory'" in n and "'GPU KV cache size'" in n for n in r.notes)


def test_startup_error_is_a_note(plans: dict[str, Plan]) -> None:
    text = "ValueError: Free memory on device cuda:0 (60.25/139.8 GiB) on startup is less than desired GPU memory utilization (0.92, 128.62 GiB). Decrease it."
    facts = parse_vllm_log(text)
    r = reconcile_facts(facts, plans["default"], semantics=log_semantics(facts))
    assert any(n.startswith("vLLM refused to start: free memory 60.25 GiB < requested 128.62 GiB") for n in r.notes)
    assert r.row("requested_memory").agrees


# ------------------------------------------------------------------ the terminal report


@pytest.mark.parametrize("width", [110, 180])
def test_render_reconcile(plans: dict[str, Plan], width: int) -> None:
    console = Console(record=True, width=width, force_terminal=False)
    render_reconcile(reconcile(V033, plans["default"]), console)
    out = console.export_text()
    for needle in ("whisper-large-v3-h200-v0.33.0.log", "vLLM 0.33.0", "maximum concurrency", "94.81x", "51,200", "≠", "="):
        assert needle in out, needle
    assert ("why" in out) == (width >= 140)  # narrow: explanations listed under the table
    assert "capacity's actual concurrency is" in " ".join(out.split())


def test_reconcile_raises_bad_input_too(tmp_path: Path, plans: dict[str, Plan]) -> None:
    (tmp_path / "empty.log").write_bytes(b"")
    with pytest.raises(BadInput, match="is empty"):
        reconcile(tmp_path / "empty.log", plans["default"])


# ------------------------------------------------------------------ layering


def test_core_reconcile_does_not_import_torch_or_reports() -> None:
    code = "import sys, capacity.vllm.log_startups, capacity.reconcile.compare\nbad = [m for m in ('torch', 'transformers', 'reports', 'rich') if m in sys.modules]\nassert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
