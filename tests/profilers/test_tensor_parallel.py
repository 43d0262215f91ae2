"""Tensor-parallel profiling without a GPU: the shard arithmetic, the per-rank profile format, the plan from the
rank with the least KV budget, and the real multi-process path under gloo with the CPU probe (tiny Whisper)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from tests.support.paths import REPO_ROOT

torch = pytest.importorskip("torch")

from capacity.errors import BadInput
from capacity.memory.collectives import vllm_all_reduce_buffers
from capacity.memory.measured_profile import MemoryProfile, combine_ranks, deciding_rank, load_profile, save_profile
from capacity.planning.planner import build_plan
from capacity.serving.encoder_budget import build_budget
from capacity.units import MiB
from profilers.sharding import build_on_meta_with_host_buffers, shard_module
from profilers.tensor_parallel import RankFailed, run_tensor_parallel, tensor_parallel_job
from tests.profilers.test_run import TINY_WHISPER, folder_model

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

REPO = REPO_ROOT

# Tiny Whisper (d_model 64, 4 heads of 16, FFN 128, vocab 1000, 2 + 2 layers, 80 mel bins) at TP 2, float32, by hand:
# q and v: 64 x 32 + 32 bias; k: 64 x 32 (no bias); out_proj: 64 x 32 + the whole 64 bias (row-parallel); fc1:
# 64 x 64 + 64; fc2: 64 x 64 + 64 (whole bias); layer norms 2 x 64; convolutions, positions, embed_tokens whole.
ATTN = (64 * 32 + 32) + 64 * 32 + (64 * 32 + 32) + (64 * 32 + 64)
MLP = (64 * 64 + 64) + (64 * 64 + 64)
LN = 2 * 64
ENCODER = (80 * 64 * 3 + 64) + (64 * 64 * 3 + 64) + 1500 * 64 + 2 * (ATTN + LN + MLP + LN) + LN
DECODER = 1000 * 64 + 448 * 64 + 2 * (ATTN + LN + ATTN + LN + MLP + LN) + LN  # proj_out is tied to embed_tokens
TINY_WHISPER_RANK_BYTES = (ENCODER + DECODER) * 4


class FakeCollectives:
    """Shapes only (no process group): enough to build a rank's shard."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def all_reduce(self, t):
        return t

    def all_gather(self, t):
        return torch.cat([t] * self.world_size, dim=-1)


def meta_shard(arch: str, config: dict, rank: int = 0, tp: int = 2):
    from capacity.model.family import family_named

    family = family_named(arch)
    model = build_on_meta_with_host_buffers(lambda: family.build_module(config, device="cpu", dtype="float32", init_weights=False))
    report = shard_module(model, family.tensor_parallel_rules, FakeCollectives(rank, tp))
    return model, report


def unique_parameter_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_whisper_shard_matches_the_arithmetic_split():
    model, report = meta_shard("whisper", dict(TINY_WHISPER))
    assert unique_parameter_bytes(model) == TINY_WHISPER_RANK_BYTES == 1_204_736
    layer = model.model.decoder.layers[0]
    assert tuple(layer.self_attn.k_proj.weight.shape) == (32, 64)
    assert tuple(layer.self_attn.out_proj.weight.shape) == (64, 32) and tuple(layer.self_attn.out_proj.bias.shape) == (64,)
    # vLLM 0.33 whisper.py: decoder.embed_tokens is a whole nn.Embedding and proj_out is tied to it
    assert tuple(model.model.decoder.embed_tokens.weight.shape) == (1000, 64)
    assert model.proj_out.weight is model.model.decoder.embed_tokens.weight
    assert report.replaced == {"column": 2 * 3 + 2 * 6 + 2 + 2, "row": 2 * 2 + 2 * 3, "lm_head": 1}


TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 1000,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def test_decoder_only_shard_pads_the_vocabulary_and_replicates_a_kv_head():
    model, report = meta_shard("decoder_only", dict(TINY_LLAMA), rank=1)
    attn = model.model.layers[0].self_attn
    assert tuple(attn.q_proj.weight.shape) == (32, 64)  # 2 of 4 heads of 16
    assert tuple(attn.k_proj.weight.shape) == (16, 64)  # 1 KV head < TP 2: each rank keeps it (QKVParallelLinear)
    assert report.replicated_kv_heads
    assert attn.num_key_value_groups == 2  # 2 query heads on the rank over 1 KV head
    # pad_vocab_size(1000, 64) = 1024, / 2 ranks = 512 rows for the embedding and the (untied) head
    assert tuple(model.model.embed_tokens.weight.shape) == (512, 64) and model.model.embed_tokens.start == 512
    assert tuple(model.lm_head.weight.shape) == (512, 64)
    mlp = model.model.layers[0].mlp
    assert tuple(mlp.gate_proj.weight.shape) == (64, 64) and tuple(mlp.down_proj.weight.shape) == (64, 64)


def test_vllm_all_reduce_buffers_from_its_source():
    # custom_all_reduce.py + symm_mem.py on Hopper (9.0), TP 2: symmetric memory 64 MiB; custom all-reduce
    # max_size min(64 MiB, 8 MiB) = 8 MiB signal, IPC max(8, 2, 16) = 16 MiB, rank_data 8 MiB
    b = vllm_all_reduce_buffers(2, "9.0")
    assert (b.symm_mem_bytes, b.custom_signal_bytes, b.custom_ipc_bytes, b.custom_rank_data_bytes) == (64 * MiB, 8 * MiB, 16 * MiB, 8 * MiB)
    assert vllm_all_reduce_buffers(8, "9.0").custom_signal_bytes == 256 * 1024  # CUSTOM_ALL_REDUCE_MAX_SIZES 9.0: 8 -> 256 KiB
    assert vllm_all_reduce_buffers(4, "10.0").symm_mem_bytes == 32 * MiB
    assert vllm_all_reduce_buffers(1).total_bytes == 0


def test_unknown_family_is_refused_in_one_line(tmp_path):
    from capacity.model.registry import model_spec
    from capacity.source.resolve import resolve_model
    from profilers.sharding import shard_rules

    source = resolve_model("google/gemma-3-4b-it")
    with pytest.raises(BadInput, match=r"gemma3 is not implemented \(sharded families: decoder_only, nemotron_parse, qwen2_5_vl, whisper\)") as refused:
        shard_rules(model_spec(source).family)
    assert "\n" not in str(refused.value)


# --- profiles of several ranks -----------------------------------------------------------------------------


def a_profile() -> MemoryProfile:
    return load_profile(REPO / "bench/results/h200-profiles-2026-11-30/profile-openai--whisper-tiny.json")


def test_format_1_profiles_still_load():
    p = a_profile()
    assert p.rank == 0 and p.measured_tensor_parallel_size == 1 and p.ranks == () and p.communicator_bytes is None


def test_the_rank_with_the_most_non_kv_memory_decides(tmp_path):
    base = replace(a_profile(), measured_tensor_parallel_size=2)
    heavy = replace(base, rank=1, transient_peak_headroom_bytes=base.transient_peak_headroom_bytes + 10 * MiB)
    combined = combine_ranks((replace(base, rank=0), heavy))
    assert combined.rank == 1 and [r.rank for r in combined.ranks] == [0, 1]
    assert deciding_rank((replace(base, rank=0), replace(base, rank=1))).rank == 0  # a tie: the lowest rank
    path = tmp_path / "tp.json"
    save_profile(combined, path)
    data = json.loads(path.read_text())
    assert data["capacity_profile_format"] == 2 and len(data["ranks"]) == 2
    assert load_profile(path) == combined


# --- the real path: one process per rank, gloo, CPU probe --------------------------------------------------


@pytest.fixture(scope="module")
def tp2_whisper(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tp") / "tiny-whisper"
    source, spec, gpu, serving = folder_model(folder, TINY_WHISPER, max_num_batched_tokens=2048, max_num_seqs=16, dtype="float32", tensor_parallel_size=2)
    job = tensor_parallel_job(source, spec, serving, build_budget(spec, serving), gpu, backend="gloo", collective_timeout_s=60, warmup=False)
    return (source, spec, gpu, serving), job, run_tensor_parallel(job, timeout_s=240)


def test_gloo_ranks_hold_the_arithmetic_split_and_combine(tp2_whisper):
    (source, spec, gpu, serving), _, profile = tp2_whisper
    assert [r.rank for r in profile.ranks] == [0, 1]
    for rank in profile.ranks:
        assert rank.oom is None and rank.measured_tensor_parallel_size == 2
        assert rank.weights_bytes == TINY_WHISPER_RANK_BYTES
        assert rank.communicator_bytes is None  # gloo on the CPU: no device memory to measure
        # the encoder output held through the decoder pass is whole on every rank: 1 x 1500 x 64 x 4 B
        assert rank.encoder_cache_bytes == 1500 * 64 * 4
    plan = build_plan(source, spec, gpu, serving, profile=profile)
    assert len(plan.ranks) == 2 and sum(r.deciding for r in plan.ranks) == 1
    assert plan.kv.available_bytes == min(r.available_kv_bytes for r in plan.ranks)
    assert plan.memory["weights"].bytes == TINY_WHISPER_RANK_BYTES


def test_a_rank_that_dies_is_one_error_and_stops_the_others(tp2_whisper):
    _, job, _ = tp2_whisper
    from profilers.tensor_parallel import free_port

    start = time.monotonic()
    with pytest.raises(RankFailed, match="rank 1 died") as caught:
        run_tensor_parallel(replace(job, port=free_port(), fail_rank=1), timeout_s=120)
    assert caught.value.exit_code == 1
    assert time.monotonic() - start < 120


def test_more_ranks_than_gpus_is_bad_input():
    from profilers.tensor_parallel import require_ranks

    with pytest.raises(BadInput, match="needs 64 GPUs"):
        require_ranks(64, "nccl")


@pytest.mark.slow
def test_four_gloo_ranks_split_and_combine(tmp_path):
    """TP 4 over four processes on the CPU (tiny Whisper's 4 heads give one head per rank)."""
    source, spec, gpu, serving = folder_model(tmp_path / "w", TINY_WHISPER, max_num_batched_tokens=2048, max_num_seqs=16, dtype="float32", tensor_parallel_size=4)
    job = tensor_parallel_job(source, spec, serving, build_budget(spec, serving), gpu, backend="gloo", collective_timeout_s=120, warmup=False)
    profile = run_tensor_parallel(job, timeout_s=400)
    # by hand at TP 4: q, v 64 x 16 + 16; k 64 x 16; out_proj 64 x 16 + 64; fc1 64 x 32 + 32; fc2 64 x 32 + 64
    attn = (64 * 16 + 16) + 64 * 16 + (64 * 16 + 16) + (64 * 16 + 64)
    mlp = (64 * 32 + 32) + (64 * 32 + 64)
    encoder = (80 * 64 * 3 + 64) + (64 * 64 * 3 + 64) + 1500 * 64 + 2 * (attn + LN + mlp + LN) + LN
    decoder = 1000 * 64 + 448 * 64 + 2 * (attn + LN + attn + LN + mlp + LN) + LN
    assert [r.rank for r in profile.ranks] == [0, 1, 2, 3]
    assert {r.weights_bytes for r in profile.ranks} == {(encoder + decoder) * 4}
    plan = build_plan(source, spec, gpu, serving, profile=profile)
    assert len(plan.ranks) == 4 and plan.kv.available_bytes == min(r.available_kv_bytes for r in plan.ranks)


@pytest.mark.slow
def test_a_rank_out_of_memory_is_the_result(tp2_whisper):
    """Rank 1 may hold its weights and little else: it runs out of memory in the encoder while rank 0 waits in a
    collective; the run is one out-of-memory result (the plan does not fit), rank 0 is stopped."""
    (source, spec, gpu, serving), job, _ = tp2_whisper
    from profilers.tensor_parallel import free_port

    limit = TINY_WHISPER_RANK_BYTES + 100_000
    profile = run_tensor_parallel(replace(job, port=free_port(), rank_memory_limit_bytes=((1, limit),)), timeout_s=200)
    assert profile.oom is not None and profile.rank == 1 and profile.oom.phase == "encoder"
    assert [r.rank for r in profile.ranks] == [1] and "did not report" in profile.notes[0]
    assert not build_plan(source, spec, gpu, serving, profile=profile).fits


@pytest.mark.slow
def test_a_rank_that_hangs_times_out(tp2_whisper):
    _, job, _ = tp2_whisper
    from profilers.tensor_parallel import free_port

    start = time.monotonic()
    with pytest.raises(RankFailed) as caught:
        run_tensor_parallel(replace(job, port=free_port(), hang_rank=1, collective_timeout_s=15), timeout_s=90)
    assert caught.value.exit_code == 1 and time.monotonic() - start < 120


def test_sampler_formula_counts_the_logits_all_gather(spec_of):
    from capacity.memory.sampler import SAMPLER_BEFORE_0_33, sampler_bytes

    # capacity's form before vLLM 0.33 (logits + one fp32 copy), which the H200 x2 profile's sampler emulation ran
    whisper = spec_of("openai/whisper-large-v3").decoder  # head tied to the whole embedding: all 51,866 logits per rank
    # local logits + (2, rows, 51866) gather buffer + its reshaped copy, fp16: 1024 x 51866 x 2 B x (1 + 2 x 2)
    assert sampler_bytes(whisper, 1024, 2, tp=2, form=SAMPLER_BEFORE_0_33) == 1024 * 51866 * 2 * 5 == 531_107_840
    assert sampler_bytes(whisper, 1024, 2, tp=1, form=SAMPLER_BEFORE_0_33) == 1024 * 51866 * (2 + 4)
    qwen = spec_of("Qwen/Qwen2.5-VL-7B-Instruct").decoder  # 152,064 / 2 rows per rank: the fp32 copy stays the larger
    assert sampler_bytes(qwen, 1024, 2, tp=2, form=SAMPLER_BEFORE_0_33) == 1024 * 152064 * (2 + 4)
    # vLLM 0.33 (FlashInfer): the gathered storage (2 x 51,866 columns; logits[..., :vocab] is a view) stays alive
    # under the warmup pass's three fp32 copies; no decoder tokens held here (num_tokens 0), 1024 x 1280 x 2 B of
    # sample_hidden_states: 1024 x 51866 x (2 x 2 + 12) + 2,621,440
    assert sampler_bytes(whisper, 1024, 2, tp=2) == 1024 * 51866 * 16 + 1024 * 1280 * 2 == 852_393_984


# --- re-planning a measured TP profile anywhere ---------------------------------------------------------------

WHISPER_TP2 = REPO / "bench/results/h200x2-tp-2026-11-30/whisper-large-v3-tp2.json"


def test_plan_from_a_tp_profile_takes_the_rank_with_the_least_kv(tmp_path, capsys):
    """The H200 x2 profile of whisper-large-v3 at TP 2, with rank 1's activation peak raised by 1 GiB by hand:
    rank 1 now leaves 1 GiB less KV memory, and the plan follows it, as vLLM follows its minimum."""
    from capacity.cli.app import main

    saved = json.loads(WHISPER_TP2.read_text())
    assert [r["communicator_bytes"] for r in saved["ranks"]] == [975_175_680, 975_241_216]  # NCCL, measured per rank
    saved["ranks"][1]["transient_peak_headroom_bytes"] += 2**30
    path = tmp_path / "tp2.json"
    path.write_text(json.dumps(saved))
    code = main(["plan", "--profile", str(path), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    plan = json.loads(out.out)
    assert plan["serving"]["tensor_parallel_size"] == 2  # the profile's TP, not the default 1
    ranks = plan["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and [r["deciding"] for r in ranks] == [False, True]
    assert plan["kv_spread_bytes"] == 2**30
    assert plan["kv_cache"]["available_bytes"] == ranks[1]["available_kv_bytes"] == ranks[0]["available_kv_bytes"] - 2**30
    assert plan["memory"]["collectives"]["bytes"] > 975_241_216  # rank 1's NCCL + vLLM's all-reduce buffers (estimated)
    assert main(["plan", "--profile", str(path), "--csv", str(tmp_path / "csv"), "--html", str(tmp_path / "p.html")]) == 0
    import pandas as pd

    ranks_csv = pd.read_csv(tmp_path / "csv" / "ranks.csv")
    assert list(ranks_csv["rank"]) == [0, 1] and list(ranks_csv["deciding"]) == [False, True]
    assert "Tensor-parallel ranks" in (tmp_path / "p.html").read_text()


def test_a_tp_profile_at_another_tp_is_refused_in_one_line(capsys):
    from capacity.cli.app import main

    assert main(["plan", "--profile", str(WHISPER_TP2), "-tp", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "measured ranks of TP 2" in err[0]


@pytest.mark.slow
def test_verify_at_tp2_on_gloo(tmp_path, capsys):
    """`capacity verify -tp 2 --cpu-probe`: each rank allocates its share of the pool (2 of 4 KV heads) and runs."""
    from capacity.cli.app import main

    folder = tmp_path / "tiny-whisper"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_WHISPER))
    argv = ["verify", "--model", str(folder), "--cpu-probe", "-tp", "2", "--max-num-seqs", "16", "--max-num-batched-tokens", "2048"]
    code = main([*argv, "--dtype", "float32", "--kv-cache-memory-bytes", "64M", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)["verify"]
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    # a block: 2 layers per group x (K, V) x 16 tokens x 2 KV heads of the rank x 16 dims x 4 B = 8,192 B;
    # 64 MiB of KV cache is 8,192 whole blocks on each rank
    block = 2 * 2 * 16 * 2 * 16 * 4
    assert {r["kv_pool_bytes"] for r in result["ranks"]} == {64 * 2**20 // block * block} == {67_108_864}


def test_heads_not_divisible_by_tp_is_one_line_before_any_process(tmp_path, capsys):
    from capacity.cli.app import main

    folder = tmp_path / "tiny-whisper"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_WHISPER))
    assert main(["profile", "--model", str(folder), "--cpu-probe", "-tp", "3", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4 attention heads are not divisible by --tensor-parallel-size 3" in err[0]
    assert not (tmp_path / "p.json").exists()


def test_rank_scaling_adds_the_logits_all_gather(spec_of):
    """A whole-model profile re-planned at TP 2: Whisper's sampler grows by the gathered logits, by hand.
    Before vLLM 0.33: 1024 rows x 51,866 x 2 B x (1 + 2 x 2) at TP 2 minus 1024 x 51,866 x (2 + 4) at TP 1.
    0.33, default pass: the gather's 10 B per logit at TP 2 against the 2 B logits + gumbel_sample's 51 blocks x 12 B
    per row at TP 1; warmup pass: the 2 x 51,866-column gathered storage against 51,866 columns, 2 B each."""
    from capacity.gpu.catalog import gpu_by_name
    from capacity.memory.rank_scaling import rank_scaling
    from capacity.memory.sampler import SAMPLER_BEFORE_0_33
    from capacity.serving.config import ServingArgs, resolve_serving

    spec = spec_of("openai/whisper-large-v3")
    serving = resolve_serving(ServingArgs(tensor_parallel_size=2, max_num_seqs=1024, max_num_batched_tokens=8192, dtype="float16"), spec, gpu_by_name("H200"))
    assert rank_scaling(spec, serving, 1, SAMPLER_BEFORE_0_33).sampler_extra_bytes == 1024 * 51866 * 4 == 212_443_136
    scaling = rank_scaling(spec, serving, 1)
    assert scaling.sampler_extra_bytes == 1024 * 51866 * (10 - 2) - 1024 * 51 * 12 == 424_259_584
    assert scaling.sampler_warmup_extra_bytes == 1024 * 51866 * 2 == 106_221_568
