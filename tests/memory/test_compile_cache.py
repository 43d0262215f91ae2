"""The torch.compile cache a start found (cold: it compiled, warm: it loaded), read from real bench logs' own lines, and
what capacity says of it: a hazard on every compiled plan (vLLM compiles inside the memory profile, issue #54383) and a
reconcile note."""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS
from capacity.vllm.compile_lines import COLD, MIXED, WARM, compile_cache_evidence
from capacity.vllm.log_startups import load_vllm_startups
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
LOGS = ROOT / "bench" / "vllm_logs"


@pytest.mark.parametrize(
    ("log", "state", "marker"),
    [
        ("llama-3.1-8b-l4-len32000-util0.92-v0.11.0.log", COLD, "[backends.py:218] Compiling a graph for dynamic shape"),
        ("llama-3.2-3b-t4-v0-engine-v0.8.2-unsloth.log", COLD, "[backends.py:144] Compiling a graph for general shape"),
        ("llama-3.1-8b-ft-rtx6000ada-len128000-fp16-v0.15.1.log", COLD, "[backends.py:319] Compiling a graph for compile range"),
        ("llama-3.1-8b-ft-rtx6000ada-len8192-v0.15.1.log", WARM, "[backends.py:267] Directly load the compiled graph(s)"),
        ("qwen3-8b-a100-40gb-v0.19.1.log", WARM, "[backends.py:285] Directly load the compiled graph(s)"),
        ("qwen3-8b-a100-40gb-v0.9.2.log", WARM, "[backends.py:155] Directly load the compiled graph(s)"),
    ],
)
def test_state_from_the_logs_lines(log: str, state: str, marker: str) -> None:
    evidence = load_vllm_startups(LOGS / log)[0].compile_cache
    assert evidence is not None and evidence.state == state and marker in evidence.line


def test_excerpts_without_compile_lines_say_nothing() -> None:
    assert load_vllm_startups(LOGS / "qwen3-14b-l40s-v0.28.0-excerpt.log")[0].compile_cache is None


def test_mixed_and_aot_lines() -> None:
    warm = "INFO [decorators.py:327] Directly load AOT compilation from path /root/.cache/vllm/torch_compile_cache/x/rank_0_0/model"
    again = "WARNING [decorators.py:341] Compiling model again due to a load failure from /root/.cache/vllm/x, reason: Source code has changed"
    saved = "INFO [decorators.py:753] saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/x"
    assert compile_cache_evidence([warm]).state == WARM
    assert compile_cache_evidence([saved]).state == COLD
    assert compile_cache_evidence([warm, again]).state == MIXED
    assert compile_cache_evidence(["INFO [gpu_worker.py:1] Available KV cache memory: 5.0 GiB"]) is None


def _plan(**knobs: object):
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    return plan_for("Qwen/Qwen3-8B", ServingArgs(**knobs), "RTX-4090")


def _cold_hazard(plan):
    return next((h for h in plan.hazards if h.id == "cold_compile_cache"), None)


# Qwen3-8B (vocab 151,936, a multiple of 64; hidden 4096; bfloat16) on an RTX 4090 (L2 72 MiB), the API server's
# 2048 batched tokens: S = 151,936 x 4096 x 2 + 2048 x 4096 x 2 + 72 MiB.
QWEN3_8B_4090_SCRATCH = 151_936 * 4096 * 2 + 2048 * 4096 * 2 + 72 * 2**20


def test_scratch_by_hand() -> None:
    from capacity.memory.compile_cache import cold_compile_scratch

    plan = _plan(max_model_len=16_384)
    scratch = cold_compile_scratch(plan.spec, plan.serving, plan.gpu, benchmarks_combo_kernels=True)
    assert scratch.benchmark_bytes == QWEN3_8B_4090_SCRATCH == 1_336_934_400
    assert scratch.autotune_bytes == 2048 * 4096 * 2 + 72 * 2**20
    before_0_12 = cold_compile_scratch(plan.spec, plan.serving, plan.gpu, benchmarks_combo_kernels=False)
    assert before_0_12.benchmark_bytes == 0 and before_0_12.cold_peak(10**9) == 10**9 + 2048 * 4096 * 2 + 72 * 2**20


def test_scratch_matches_the_h200_measurements() -> None:
    """bench/results/h200-compile-cold-warm-2026-12-01: each cold first forward's torch peak above what was allocated
    before it, against S for that decoder (8 layers: S has no per-layer term) with the H200's 60 MiB L2."""
    import json

    folder = ROOT / "bench" / "results" / "h200-compile-cold-warm-2026-12-01"
    cases = {  # vocab, hidden of the configs the runs used
        folder / "qwen3-8b" / "compile-cold-warm.json": (151_936, 4096),
        folder / "llama-3.1-8b" / "compile-cold-warm.json": (128_256, 4096),
        folder / "run2" / "phi-4" / "compile-cold-warm.json": (100_352, 5120),
        folder / "run2" / "qwen3-0.6b" / "compile-cold-warm.json": (151_936, 1024),
    }
    for path, (vocab, hidden) in cases.items():
        doc = json.loads(path.read_text())
        assert doc["inductor_options"] == {"combo_kernels": True, "benchmark_combo_kernel": True}
        for r in doc["results"]:
            if r["mode"] == "cold":
                s = vocab * hidden * 2 + r["tokens"] * hidden * 2 + 60 * 2**20
                assert abs(r["torch_peak_above_before"] - s) <= 1_200_000, (path, r)


def test_autotune_term_matches_the_h200_without_the_table() -> None:
    """Embeddings looked up outside the compiled graph (run3), or no combo benchmark (run2, Inductor's default options):
    Qwen3-8B's cold peak is its warm peak + A, A = 2048 x 4096 x 2 B + 60 MiB = 79,691,776 B, within 10 MB."""
    import json

    folder = ROOT / "bench" / "results" / "h200-compile-cold-warm-2026-12-01"
    a = 2048 * 4096 * 2 + 60 * 2**20
    for path in (folder / "run3" / "qwen3-8b-embeds" / "compile-cold-warm.json", folder / "run2" / "qwen3-8b-none" / "compile-cold-warm.json"):
        runs = {r["mode"]: r for r in json.loads(path.read_text())["results"]}
        assert abs(runs["cold"]["torch_peak_above_before"] - runs["warm"]["torch_peak_above_before"] - a) <= 10_000_000, path


def test_cold_peak_bounds_hold_at_long_batches() -> None:
    """run4: Qwen3-0.6B at 32,768 tokens and Llama-3.1-8B at 16,384, warm peaks far above S: the cold peak lies between
    max(warm, S) and max(warm + A, S) (here it equals the warm one: the autotuning does not land on the peak)."""
    import json

    folder = ROOT / "bench" / "results" / "h200-compile-cold-warm-2026-12-01" / "run4"
    for name, vocab, hidden in (("qwen3-0.6b-32k", 151_936, 1024), ("llama-3.1-8b-16k", 128_256, 4096)):
        runs = {r["mode"]: r for r in json.loads((folder / name / "compile-cold-warm.json").read_text())["results"]}
        tokens = runs["cold"]["tokens"]
        s = vocab * hidden * 2 + tokens * hidden * 2 + 60 * 2**20
        a = tokens * hidden * 2 + 60 * 2**20
        warm, cold = runs["warm"]["torch_peak_above_before"], runs["cold"]["torch_peak_above_before"]
        assert warm > s
        assert max(warm, s) <= cold <= max(warm + a, s)


def test_cold_plan_takes_the_scratch_as_its_peak() -> None:
    warm, cold = _plan(max_model_len=16_384), _plan(max_model_len=16_384, compile_cache="cold")
    warm_peak = warm.memory["activation_peak"].bytes + warm.memory["encoder_cache"].bytes
    assert warm_peak < QWEN3_8B_4090_SCRATCH
    assert cold.memory["activation_peak"].bytes == QWEN3_8B_4090_SCRATCH
    assert warm.kv.available_bytes - cold.kv.available_bytes == QWEN3_8B_4090_SCRATCH - warm_peak
    assert cold.serving.compile_cache == "cold" and _cold_hazard(cold) is None


def test_hazard_warns_when_the_first_start_refuses() -> None:
    """One 36,864-token request needs 36,864 x 144 KiB (36 layers x 8 KV heads x 128 x 2 x 2 B): the warm plan fits
    it on the RTX 4090's 23.52 GiB, the first start (S above the warm peak) does not; the fix is the longest
    max_model_len the cold plan fits."""
    warm = _plan(max_model_len=36_864)
    cold = _plan(max_model_len=36_864, compile_cache="cold")
    block = 16 * 144 * 1024
    assert warm.kv.needed_for_one_request_bytes == 36_864 * 144 * 1024 and warm.kv.bytes_per_block == block
    assert warm.kv.available_bytes - block >= warm.kv.needed_for_one_request_bytes > cold.kv.available_bytes - block
    hazard = _cold_hazard(warm)
    assert hazard is not None and hazard.severity == "warning" and "refuses to start" in hazard.message
    assert dict(hazard.knobs) == {"max_model_len": (cold.kv.available_bytes - block) // block * 16}
    roomy = _cold_hazard(_plan(max_model_len=16_384))
    assert roomy is not None and roomy.severity == "info"


@pytest.mark.parametrize("knobs", [{"enforce_eager": True}, {"kv_cache_memory_bytes": 4 * 2**30}])
def test_no_hazard_without_a_measured_compile(knobs: dict[str, object]) -> None:
    """--enforce-eager compiles nothing (VllmConfig: CompilationMode.NONE); --kv-cache-memory skips the profile's figure."""
    assert _cold_hazard(_plan(max_model_len=16_384, **knobs)) is None


def test_multimodal_model_takes_no_embedding_table() -> None:
    """MRV2 feeds a multimodal model inputs_embeds (uses_inputs_embeds): the table is not an argument of its compiled
    kernels; with --language-model-only it takes token ids again."""
    from capacity.memory.compile_cache import cold_compile_scratch
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    mm = plan_for("Qwen/Qwen2.5-VL-7B-Instruct", ServingArgs(max_model_len=8192), "H200")
    text = plan_for("Qwen/Qwen2.5-VL-7B-Instruct", ServingArgs(max_model_len=8192, language_model_only=True), "H200")
    assert cold_compile_scratch(mm.spec, mm.serving, mm.gpu, True).benchmark_bytes == 0
    # Qwen2.5-VL-7B: vocab 152,064 (a multiple of 64), hidden 3584, bfloat16
    assert cold_compile_scratch(text.spec, text.serving, text.gpu, True).embedding_bytes == 152_064 * 3584 * 2


def test_bad_compile_cache_value() -> None:
    from capacity.errors import BadInput

    with pytest.raises(BadInput, match="--compile-cache 'hot'"):
        _plan(max_model_len=16_384, compile_cache="hot")


@pytest.mark.parametrize(
    ("log", "gpu", "version", "says"),
    [
        ("llama-3.1-8b-l4-len32000-util0.92-v0.11.0.log", "L4", "0.11.0", "planned with --compile-cache cold"),
        ("qwen3-8b-a100-40gb-v0.19.1.log", "A100-40GB", "0.19.1", "planned with a warm compile cache"),
    ],
)
def test_reconcile_says_what_cache_the_start_found(log: str, gpu: str, version: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    meta = json.loads((LOGS / log).with_suffix(".json").read_text())
    flags = [str(LOGS / log), "--model", str(ROOT / meta["capacity_model"]), "--gpu", gpu, "--vllm-version", version, "--json"]
    for key, value in meta.get("knobs", {}).items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    assert main(["reconcile", *flags]) == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    notes = [n for e in doc.get("engines", [doc]) for n in e["notes"]]
    assert any(says in n for n in notes)


@pytest.mark.parametrize("tokens", [1536, 3072])
def test_scratch_matches_the_public_cold_warm_pair(tokens: int) -> None:
    """Qwen3-32B-AWQ at TP 2 on two RTX 4090s (vLLM 0.28.0, vitalyrodnenko/replay-sim): the cold start's printed peak
    activation is S to the printed 0.01 GiB, the warm one's is below it. S by hand: Qwen3-32B's vocab 151,936 (a
    multiple of 64) / 2 ranks x hidden 5120 x 2 B (AWQ leaves the embedding in float16; the unquantized config in
    ai-dynamo/aiconfigurator) + tokens x 5120 x 2 B + the RTX 4090's 72 MiB L2."""
    s = 151_936 // 2 * 5120 * 2 + tokens * 5120 * 2 + 72 * 2**20
    peaks = {}
    for state in ("cold", "warm"):
        facts = load_vllm_startups(LOGS / f"qwen3-32b-awq-2xrtx4090-tp2-mbt{tokens}-v0.28.0-{state}.log")[0]
        assert facts.compile_cache is not None and facts.compile_cache.state == state
        assert facts.free_memory is not None and facts.free_memory.peak_activation_gib is not None
        peaks[state] = facts.free_memory.peak_activation_gib
    assert abs(peaks["cold"] - s / 2**30) <= 0.01
    assert peaks["warm"] < s / 2**30 - 0.4


def test_cli_compile_cache(capsys: pytest.CaptureFixture[str]) -> None:
    """`--compile-cache cold` reaches the plan's JSON; a bad value is one line on stderr and exit 2."""
    from capacity.errors import EXIT_BAD_INPUT

    args = ["plan", "--model", "Qwen/Qwen3-8B", "--gpu", "RTX-4090", "--max-model-len", "16384", "--estimate", "formula", "--json"]
    assert main([*args, "--compile-cache", "cold"]) == EXIT_FITS
    doc = json.loads(capsys.readouterr().out)
    assert doc["serving"]["compile_cache"] == "cold"
    assert "cold compile cache" in doc["memory"]["activation_peak"]["method"]
    assert doc["cold_compile"]["benchmark_bytes"] == QWEN3_8B_4090_SCRATCH
    assert doc["cold_compile"]["autotune_bytes"] == 2048 * 4096 * 2 + 72 * 2**20
    assert main([*args, "--enforce-eager"]) == EXIT_FITS
    assert json.loads(capsys.readouterr().out)["cold_compile"] is None
    assert main([*args, "--compile-cache", "hot"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--compile-cache 'hot'" in err[0]


def test_scratch_is_per_rank() -> None:
    """At TP 2 the gather's table is the rank's: Llama-3.1-8B's 128,256 rows (a multiple of 64) / 2 x 4096 x 2 B."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    plan = plan_for("meta-llama/Llama-3.1-8B-Instruct", ServingArgs(max_model_len=8192, tensor_parallel_size=2), "H100-SXM")
    assert plan.cold_compile is not None
    assert plan.cold_compile.embedding_bytes == 128_256 // 2 * 4096 * 2
    assert plan.cold_compile.flush_bytes == 50 * 2**20  # GH100's L2
