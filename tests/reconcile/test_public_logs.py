"""Every public vLLM log of bench/vllm_logs/ is read by reconcile's parser, and `capacity reconcile` compares each
one the benchmark plans (exit 0) with the knobs its sidecar states; a log that does not say its GPU is compared on what
it alone determines, the rest "needs --gpu". The byte copies of published configs in bench/vllm_logs/configs/ hash to the sha256 their
README records, and the figures of the logs added on 2026-12-01 read back as printed."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS
from capacity.vllm.log_startups import load_vllm_startups
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
LOGS = sorted((ROOT / "bench" / "vllm_logs").glob("*.log"))


def _meta(log: Path) -> dict:
    return json.loads(log.with_suffix(".json").read_text())


def test_the_corpus_has_its_provenance() -> None:
    assert len(LOGS) >= 42
    for log in LOGS:
        meta = _meta(log)
        assert meta["source"] and "model" in meta and "gpu" in meta and "knobs" in meta, log.name


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_the_parser_reads_every_bench_log(log: Path) -> None:
    startups = load_vllm_startups(log)
    assert startups
    for facts in startups:
        # every startup printed at least one KV figure capacity compares
        assert any(x is not None for x in (facts.kv_cache_gib, facts.kv_cache_tokens, facts.max_concurrency, facts.free_memory)), log.name


def _flags(log: Path) -> list[str] | None:
    """`capacity reconcile` flags for a bench log: its model, and its GPU unless the log prints CUDA's total."""
    meta = _meta(log)
    model = meta.get("capacity_model")
    if not model:
        return None
    flags = [str(log), "--model", str(ROOT / model) if (ROOT / model).exists() else model, "--json"]
    if meta.get("gpu") and _in_catalog(meta["gpu"]):
        flags += ["--gpu", meta["gpu"]]
    if meta.get("vllm_version"):
        flags += ["--vllm-version", meta["vllm_version"]]
    return flags + _knob_flags(meta.get("knobs", {}))


# Sidecar knobs `capacity reconcile` takes as flags (`quantization` capacity reads from the config).
_KNOB_FLAGS = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "dtype": "--dtype",
    "usage_context": "--usage-context",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs",
}


def _knob_flags(knobs: dict) -> list[str]:
    out: list[str] = []
    for key, value in knobs.items():
        if key in _KNOB_FLAGS:
            out += [_KNOB_FLAGS[key], str(value)]
        elif key == "enforce_eager" and value:
            out.append("--enforce-eager")
        elif key == "enable_expert_parallel" and value:
            out.append("--enable-expert-parallel")
        elif key == "limit_mm_per_prompt":
            out += ["--limit-mm-per-prompt", json.dumps(value)]
    return out


def _in_catalog(name: str) -> bool:
    from capacity.errors import BadInput
    from capacity.gpu.catalog import gpu_by_name

    try:
        gpu_by_name(name)
    except BadInput:
        return False
    return True


RECONCILABLE = [p for p in LOGS if _flags(p) is not None]


@pytest.mark.parametrize("log", RECONCILABLE, ids=[p.stem for p in RECONCILABLE])
def test_reconcile_exits_0_on_every_bench_log_it_can_plan(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = _flags(log)
    assert flags is not None
    facts = load_vllm_startups(log)[0]
    code = main(["reconcile", *flags])
    out, err = capsys.readouterr()
    assert code == EXIT_FITS, err
    doc = json.loads(out)
    results = doc.get("engines", [doc])
    if "--gpu" not in flags and facts.gpu.cuda_total_gib is None and facts.gpu.smi_name is None:
        # no total anywhere: compared on what the log alone determines, the rest "needs --gpu" (tests/reconcile/test_reconcile_bare.py)
        assert all(r["gpu_total_known"] is False for r in results)
    # a startup whose version is inferred and changes the verdict has no rows of its own: one comparison per version
    assert all(r["rows"] or (r["by_version"] and all(v["rows"] for v in r["by_version"])) for r in results)


CONFIGS = ROOT / "bench" / "vllm_logs" / "configs"


def _recorded_hashes() -> dict[str, str]:
    """folder -> sha256 for each row of configs/README.md that records one (the byte copies)."""
    out = {}
    for line in (CONFIGS / "README.md").read_text().splitlines():
        m = re.search(r"model_configs/(\S+?)_config\.json`.*sha256 ([0-9a-f]{64})", line)
        if m:
            out[m[1]] = m[2]
    return out


def test_byte_copied_configs_hash_to_the_recorded_sha256() -> None:
    recorded = _recorded_hashes()
    assert {"Qwen--Qwen3-0.6B", "Qwen--Qwen3-235B-A22B-FP8"} <= set(recorded)
    for folder, sha in recorded.items():
        assert hashlib.sha256((CONFIGS / folder / "config.json").read_bytes()).hexdigest() == sha, folder


def _facts(name: str):
    return load_vllm_startups(ROOT / "bench" / "vllm_logs" / name)[0]


def test_the_new_logs_read_back_as_printed() -> None:
    # a quote whose two log lines come before the logo (gpt-oss-20b on an A100, vLLM 0.19.0)
    gpt = _facts("gpt-oss-20b-a100-len131072-util0.65-v0.19.0-quoted.log")
    assert (gpt.model_loading_gib, gpt.kv_cache_gib) == (13.72, 36.56)
    # a paste whose last concurrency line is broken over two lines, and an nvidia-smi table (two L4)
    vl = _facts("qwen2.5-vl-7b-2xl4-tp2-len8192-excerpt.log")
    assert (vl.kv_cache_gib, vl.kv_cache_tokens, vl.max_concurrency) == (10.04, 375968, 45.89)
    assert (vl.gpu.smi_name, vl.gpu.smi_total_mib) == ("NVIDIA L4", 23034)
    # the 0.10/0.11 summary line after graph capture: CUDA's total, the budget and the breakdown (Qwen3-Next, 2 x H200)
    nxt = _facts("qwen3-next-80b-instruct-2xh200-tp2-v0.10.2.log")
    assert nxt.gpu.cuda_total_gib == 139.81 and nxt.requested_gib == 125.83
    assert (nxt.free_memory.weights_gib, nxt.free_memory.peak_activation_gib, nxt.free_memory.non_torch_gib) == (74.28, 5.58, 1.38)
    assert (nxt.kv_cache_gib, nxt.kv_cache_tokens, nxt.max_concurrency) == (44.59, 973760, 14.77)


def test_the_second_batch_of_2026_12_01_reads_back_as_printed() -> None:
    # a committed log with mixed CR / CRLF / LF line ends (gemma-3-4b on an MI300X, vLLM 0.23.0)
    gemma = _facts("gemma-3-4b-mi300x-rocm-len8192-v0.23.0.log")
    assert (gemma.version, gemma.model_loading_gib, gemma.kv_cache_gib) == ("0.23.0", 8.58, 162.84)
    assert (gemma.kv_cache_tokens, gemma.max_concurrency) == (1217591, 148.63)
    # a failed start whose available KV memory is negative (llava-1.5-7b fp16 on a 16 GB card, vLLM 0.10.2)
    llava = _facts("llava-1.5-7b-rtx4080-wsl-fp16-len4096-v0.10.2.log")
    assert (llava.model_loading_gib, llava.kv_cache_gib, llava.kv_cache_tokens) == (13.1343, -0.17, None)
    # eight ranks print their own figures; the first printed is read (Qwen3-235B-A22B-FP8, TP 8 + EP, vLLM 0.10.0)
    big = _facts("qwen3-235b-a22b-fp8-8xh100-tp8-ep-kvfp8-v0.10.0.log")
    assert (big.model_loading_gib, big.kv_cache_gib, big.kv_cache_tokens, big.max_concurrency) == (27.6656, 35.74, 1594928, 48.67)
    # a hybrid (Gated DeltaNet) model at TP 4 in eager mode (Qwen3.5-27B, vLLM 0.19.0)
    hybrid = _facts("qwen3.5-27b-4xrtx3090-tp4-eager-len32768-v0.19.0.log")
    assert (hybrid.model_loading_gib, hybrid.kv_cache_gib, hybrid.kv_cache_tokens, hybrid.max_concurrency) == (13.01, 7.47, 122304, 13.87)


def test_the_235b_log_is_planned_at_the_layout_its_source_states() -> None:
    meta = _meta(ROOT / "bench" / "vllm_logs" / "qwen3-235b-fp8-l40s-tp4.log")
    assert meta["vllm_version"] == "0.10.2"
    assert meta["knobs"]["tensor_parallel_size"] == 8 and meta["knobs"]["enable_expert_parallel"] is True
    assert "not_plannable" not in meta


def test_an_engine_that_turned_prefix_caching_off_plans_the_unaligned_hybrid_block() -> None:
    from capacity.gpu.catalog import gpu_by_name
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    facts = _facts("qwen3-next-80b-instruct-2xh200-tp2-v0.10.2.log")
    # vLLM 0.10.2: "Disabling prefix caching since it is not yet supported" for this hybrid, and its config line says so
    assert facts.engine_config["enable_prefix_caching"] is False
    # One Gated DeltaNet layer's state at TP 2: conv (2 x 16 key heads x 128 + 32 value heads x 128) / 2 = 4,096
    # channels x (4 - 1) x 2 B = 24,576 + recurrent 32 / 2 heads x 128 x 128 x 2 B = 524,288 -> 548,864 B. Attention:
    # 2 KV heads / TP 2 = 1 x 256 x 2 (K, V) x 2 B = 1,024 B per token. Without prefix caching the block is a multiple of
    # 16: 16 x cdiv(548,864, 16 x 1,024) = 16 x 34 = 544, as the log's 973,760 tokens = 1,790 x 544 show.
    model = str(REPO_ROOT / "capacity/source/catalog/models/Qwen--Qwen3-Next-80B-A3B-Thinking")
    plan = plan_for(model, ServingArgs(tensor_parallel_size=2, enable_prefix_caching=False), gpu=gpu_by_name("H200"))
    groups = plan.to_dict()["kv_cache"]["groups"]
    assert [(g["kind"], g["block_size"], g["page_size_bytes"]) for g in groups if g["kind"] == "full"] == [("full", 544, 544 * 1_024)]
    assert {g["page_size_bytes"] for g in groups} == {544 * 1_024}  # the state pages padded to the attention page
    assert 973_760 % 544 == 0


def test_every_miss_cause_names_a_bench_log_with_its_sidecar(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/log_causes.py's CAUSES texts (bench/predict_logs.py's README's 'Cause of every miss above 3 %') are keyed by log file name:
    a key that names no log (a typo, a renamed log) would leave that log's miss 'not analysed' in the README."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("predict_logs", ROOT / "bench" / "predict_logs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    names = {p.name for p in LOGS}
    for log, cause in module.CAUSES.items():
        assert log in names, log
        assert (ROOT / "bench" / "vllm_logs" / log).with_suffix(".json").is_file(), log
        assert cause.strip() and "not analysed" not in cause, log


def test_reconcile_says_a_0_10_non_torch_figure_holds_the_communicators(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.10.2's V1 worker takes its memory snapshot before init_worker_distributed_environment (0.11.0 and later
    after it): at TP 4 the log's non-torch figure (0.21 GiB on these PCIe L40Ss) holds NCCL's communicators too,
    which capacity does not add over PCIe."""
    from capacity.vllm.versions import semantics_for

    assert semantics_for("0.10.2").communicators_in_non_kv and not semantics_for("0.11.0").communicators_in_non_kv
    assert not semantics_for("0.33.0").communicators_in_non_kv
    log = ROOT / "bench" / "vllm_logs" / "qwen3-235b-fp8-l40s-tp4.log"
    flags = _flags(log)
    assert flags is not None
    assert main(["reconcile", *flags]) == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    rows = [r for e in doc.get("engines", [doc]) for r in e["rows"] if r["key"] == "non_torch"]
    assert rows and all("also counts NCCL's communicator here, not added" in r["explanation"] for r in rows)


def test_the_replay_sim_cold_and_warm_starts_read_back_as_printed() -> None:
    """vitalyrodnenko/replay-sim's two never-booted shapes (Qwen3-32B-AWQ, TP 2 on 2 x RTX 4090, vLLM 0.28.0): the first
    boot compiles ('Compiling a graph for compile range', 'saved AOT compiled function'), the repeat loads the AOT
    compilation. Figures as the logs print them (TP0's KV lines; the first printed 'Free memory' line)."""
    pairs = {
        1536: ((10.1, 82_688, 10.09, 0.8, 9_971_943_015), (10.75, 88_096, 10.75, 0.14, 10_679_082_599)),
        3072: ((10.04, 82_256, 10.04, 0.82, 9_350_130_791), (10.56, 86_528, 10.56, 0.29, 9_911_000_167)),
    }
    penalty = {1536: 707_139_584, 3072: 560_869_376}
    for mbt, expected in pairs.items():
        starts = [_facts(f"qwen3-32b-awq-2xrtx4090-tp2-mbt{mbt}-v0.28.0-{state}.log") for state in ("cold", "warm")]
        for facts, (kv_gib, tokens, concurrency, peak, fit_bytes), state in zip(starts, expected, ("cold", "warm"), strict=True):
            assert facts.compile_cache is not None and facts.compile_cache.state == state
            assert (facts.version, facts.model_loading_gib, facts.gpu.cuda_total_gib) == ("0.28.0", 9.01, 23.52)
            assert (facts.kv_cache_gib, facts.kv_cache_tokens, facts.max_concurrency) == (kv_gib, tokens, concurrency)
            assert facts.free_memory is not None
            assert (facts.free_memory.peak_activation_gib, facts.free_memory.kv_cache_memory_to_requested_bytes) == (peak, fit_bytes)
        cold, warm = (s.free_memory for s in starts)
        assert cold is not None and warm is not None
        assert cold.consumed_gib == warm.consumed_gib  # the whole cold penalty is peak activation on this box
        # bench/compile_cache/EVIDENCE.md D1 / D2: the warm start's 'fit into requested memory' suggestion (the same on both
        # ranks) exceeds the cold one's by 707,139,584 B (0.659 GiB) at mbt 1536 and 560,869,376 B (0.522 GiB) at mbt 3072
        assert warm.kv_cache_memory_to_requested_bytes - cold.kv_cache_memory_to_requested_bytes == penalty[mbt]


def test_the_cuda_graph_estimate_is_read_from_its_utilization_line() -> None:
    # 0.30.0 MRV2 prints no estimate of its own; "0.5500 is equivalent to 0.5410" on a GB10 (121.69 GiB, the catalog's
    # CUDA total) stands for (0.55 - 0.541) x 121.69 = 1.095 GiB (Qwen3-30B-A3B-Thinking-2507-FP8)
    gb10 = _facts("qwen3-30b-a3b-thinking-2507-fp8-gb10-util0.55-len32768-v0.30.0-excerpt.log")
    assert gb10.cudagraph_estimate_utilization == (0.55, 0.541) and gb10.cudagraph_estimate_subtracted is True
    assert gb10.cudagraph_estimate_gib(121.69) == 1.095 and gb10.cudagraph_estimate_gib(None) is None
    # 0.23.0's V1 runner prints both: 0.53 GiB, and 0.2200 -> 0.2133 on an A100-80GB (79.15 GiB): 0.0067 x 79.15 = 0.530
    vl = _facts("qwen2.5-vl-7b-a100-80gb-util0.22-v0.23.0.log")
    assert vl.cudagraph_estimated_gib == 0.53 and vl.cudagraph_estimate_utilization == (0.22, 0.2133)
    assert vl.cudagraph_profile_counts == {"PIECEWISE": (51, 512), "FULL": (35, 256)}
    # 0.19.1 with the estimate off: "increase --gpu-memory-utilization from 0.9000 to 0.9596" (Qwen3-8B, A100-40GB
    # 39.39 GiB): 0.0596 x 39.39 = 2.35 GiB, the printed estimate; not subtracted
    q8 = _facts("qwen3-8b-a100-40gb-v0.19.1.log")
    assert q8.cudagraph_estimate_subtracted is False and q8.cudagraph_estimate_utilization == (0.9, 0.8404)
    assert abs((0.9 - 0.8404) * 39.39 - q8.cudagraph_estimated_gib) < 0.005


def test_the_cuda_graph_dataset_logs_read_back_as_printed() -> None:
    """Three logs of bench/cuda_graphs/dataset.json added to the benchmark: the figures as their own lines print them."""
    # TP 4 on PCIe L40Ss, each rank printing its own lines (Qwen2.5-72B-Instruct, vLLM 0.19.0)
    big = _facts("qwen2.5-72b-4xl40s-tp4-len8192-v0.19.0.log")
    assert (big.version, big.model_loading_gib, big.kv_cache_gib) == ("0.19.0", 33.98, 5.11)
    assert (big.kv_cache_tokens, big.max_concurrency, big.cudagraph_estimated_gib) == (67024, 8.18, 2.73)
    # a hybrid through the LLM class with prefix caching off in its engine line (Qwen3.5-9B on an L40S, vLLM 0.19.0)
    hybrid = _facts("qwen3.5-9b-l40s-llm-class-v0.19.0.log")
    assert (hybrid.version, hybrid.model_loading_gib, hybrid.kv_cache_gib) == ("0.19.0", 17.66, 20.27)
    assert (hybrid.kv_cache_tokens, hybrid.max_concurrency) == (165792, 2.52)
    assert hybrid.engine_config["enable_prefix_caching"] is False
    # a one-decimal KV figure, '4.1 GiB' (gemma-4-E4B-it on an RTX 3090 Ti, vLLM 0.22.1)
    gemma = _facts("gemma-4-e4b-rtx3090ti-len32768-v0.22.1.log")
    assert (gemma.version, gemma.model_loading_gib, gemma.kv_cache_gib) == ("0.22.1", 15.18, 4.1)
    assert (gemma.kv_cache_tokens, gemma.max_concurrency, gemma.cudagraph_estimate_utilization) == (224353, 6.85, (0.9, 0.8667))


# config.json files rebuilt from a published sibling and checked against the sha256 public records give for the Hub file
# (bench/vllm_logs/configs/README.md names the records): the rebuild is the published file byte for byte.
PUBLISHED_SHA256 = {
    "Qwen--Qwen3.5-9B": "d0883072e01861ed0b2d47be3c16c36a8e81c224c7ffaa310c6558fb3f932b05",  # Qwen/Qwen3.5-9B @ c2022362
    "google--gemma-4-E4B-it": "33b10c02df3c2e8536cf323d29d53262aaa2f4d11dbe19bc729373fbe90295d4",  # @ ee0ef602
}


def test_rebuilt_configs_are_the_published_bytes() -> None:
    for folder, sha in PUBLISHED_SHA256.items():
        assert hashlib.sha256((CONFIGS / folder / "config.json").read_bytes()).hexdigest() == sha, folder
        assert sha in (CONFIGS / "README.md").read_text(), folder
