"""The profiler under an outside launcher (torchrun) and over pipeline stages: the rank layout, the launcher's
environment, the intermediate tensors' bytes, and real runs under gloo on the CPU (four spawned ranks at TP 2 x PP 2,
and `python -m torch.distributed.run -m capacity profile` with two)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from capacity.errors import BadInput
from profilers.launcher import LaunchEnv, ParallelLayout, check_world, launch_env
from profilers.pipeline_stage import sent_bytes, slice_elements
from tests.profilers.test_run import TINY_LLAMA, folder_model
from tests.support.paths import REPO_ROOT

torch = pytest.importorskip("torch")

TORCHRUN_ENV = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


# --- the layout: vLLM 0.33 initialize_model_parallel, DP = PCP = 1 ------------------------------------------


def test_tp2_pp2_groups_by_hand():
    layout = ParallelLayout(2, 2)
    assert layout.tp_groups() == ((0, 1), (2, 3))  # consecutive ranks
    assert layout.pp_groups() == ((0, 2), (1, 3))  # one rank per stage at the same TP position
    assert [(layout.pp_rank(r), layout.tp_rank(r)) for r in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [layout.next_stage_rank(r) for r in range(4)] == [2, 3, None, None]
    assert [layout.prev_stage_rank(r) for r in range(4)] == [None, None, 0, 1]


def test_tp4_pp2_groups_by_hand_and_by_vllms_reshape():
    layout = ParallelLayout(4, 2)
    assert layout.tp_groups() == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert layout.pp_groups() == ((0, 4), (1, 5), (2, 6), (3, 7))
    # vLLM 0.33 parallel_state.py: all_ranks = arange(world).reshape(-1, DP, PP, PCP, TP)
    all_ranks = torch.arange(8).reshape(-1, 1, 2, 1, 4)
    assert [tuple(x.tolist()) for x in all_ranks.view(-1, 4).unbind(0)] == list(layout.tp_groups())
    assert [tuple(x.tolist()) for x in all_ranks.transpose(2, 4).reshape(-1, 2).unbind(0)] == list(layout.pp_groups())


# --- the launcher's environment --------------------------------------------------------------------------


def test_no_launcher_variables_is_capacitys_own_spawn():
    assert launch_env({}) is None


def test_torchruns_variables_are_read():
    env = launch_env(TORCHRUN_ENV)
    assert env == LaunchEnv(rank=1, local_rank=1, world_size=2, master_addr="127.0.0.1", master_port=29500)
    assert env.init_method == "tcp://127.0.0.1:29500"


def test_some_variables_without_the_others_is_one_line():
    with pytest.raises(BadInput, match="RANK, WORLD_SIZE set but LOCAL_RANK, MASTER_ADDR, MASTER_PORT not") as refused:
        launch_env({"RANK": "0", "WORLD_SIZE": "2"})
    assert "\n" not in str(refused.value)


def test_world_size_other_than_tp_times_pp_is_refused():
    env = launch_env(dict(TORCHRUN_ENV, WORLD_SIZE="4"))
    check_world(env, ParallelLayout(2, 2))
    with pytest.raises(BadInput, match=r"WORLD_SIZE 4 from the launcher, but --tensor-parallel-size 2 is 2 rank\(s\)") as refused:
        check_world(env, ParallelLayout(2, 1))
    assert refused.value.exit_code == 2 and "\n" not in str(refused.value)


def test_a_mismatch_is_exit_2_in_one_line_on_every_rank(tmp_path, monkeypatch, capsys):
    """Each rank reads the same WORLD_SIZE and flags: rank 0 and rank 1 both refuse before any rendezvous."""
    from capacity.cli.app import main

    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", rank)
        for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            monkeypatch.setenv(name, TORCHRUN_ENV[name] if name != "WORLD_SIZE" else "3")
        code = main(["profile", "--model", str(folder), "--cpu-probe", "-tp", "2", "-o", str(tmp_path / "p.json")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "WORLD_SIZE 3 from the launcher" in err[0]
    assert not (tmp_path / "p.json").exists()


# --- the intermediate tensors ----------------------------------------------------------------------------


def test_sent_bytes_are_a_tp_slice_when_the_elements_divide():
    # 64 tokens x 64 hidden x 4 B = 16,384 B per key; at TP 2 each rank sends half (isend_tensor_dict's all-gather path)
    assert sent_bytes(64, 64, 4, 2) == {"hidden_states": 8192, "residual": 8192}
    assert sent_bytes(64, 64, 4, 1) == {"hidden_states": 16384, "residual": 16384}
    # 3 tokens x 5 hidden = 15 elements do not divide by 2: the whole tensor is sent (_should_use_all_gather False)
    assert slice_elements(15, 2) == 15 and slice_elements(16, 2) == 8


# --- four ranks under gloo: TP 2 x PP 2 ------------------------------------------------------------------

# A 3-layer Llama (hidden 64, 4 heads of 16, 2 KV heads, FFN 128, vocab 1000 padded to 1024), float32.
# get_pp_indices(3, PP 2): [1, 1] + the remainder on the second-to-last stage -> stage 0 layers 0-1, stage 1 layer 2.
# At TP 2 a layer holds q 64 x 32, k and v 64 x 16, o 32 x 64, gate and up 64 x 64, down 64 x 64, 2 norms of 64:
LAYER = 64 * 32 + 2 * 64 * 16 + 32 * 64 + 3 * 64 * 64 + 2 * 64  # 18,560
VOCAB_HALF = 1024 // 2 * 64  # the embedding's / LM head's rows on one TP rank
ROTARY = 2 * 8 * 4  # rotary_emb's inv_freq and original_inv_freq buffers (head 16 -> 8 floats each)
STAGE0_BYTES = (VOCAB_HALF + 2 * LAYER) * 4 + ROTARY  # embedding + layers 0, 1
STAGE1_BYTES = (LAYER + 64 + VOCAB_HALF) * 4 + ROTARY  # layer 2 + final norm + LM head
BUFFERS = 2 * 64 * 64 * 4  # hidden_states and residual, [max_num_batched_tokens 64, hidden 64] each


@pytest.fixture(scope="module")
def tp2_pp2(tmp_path_factory):
    from capacity.serving.encoder_budget import build_budget
    from profilers.tensor_parallel import run_tensor_parallel, tensor_parallel_job

    folder = tmp_path_factory.mktemp("pp") / "tiny-llama"
    config = dict(TINY_LLAMA, num_hidden_layers=3, vocab_size=1000)
    source, spec, gpu, serving = folder_model(folder, config, max_num_batched_tokens=64, max_num_seqs=4, dtype="float32", tensor_parallel_size=2)
    job = tensor_parallel_job(source, spec, serving, build_budget(spec, serving), gpu, backend="gloo", collective_timeout_s=60, warmup=False, pipeline_parallel_size=2)
    return job, run_tensor_parallel(job, timeout_s=240)


def test_tp2_pp2_ranks_are_gathered_with_their_stages(tp2_pp2):
    job, profile = tp2_pp2
    assert job.world_size == 4
    assert [(r.rank, r.pipeline_rank, r.measured_tensor_parallel_size, r.measured_pipeline_parallel_size) for r in profile.ranks] == [
        (0, 0, 2, 2), (1, 0, 2, 2), (2, 1, 2, 2), (3, 1, 2, 2),
    ]  # fmt: skip
    assert [r.fingerprint.knobs["stage_layers"] for r in profile.ranks] == [[0, 2], [0, 2], [2, 3], [2, 3]]


def test_each_stage_builds_only_its_layers(tp2_pp2):
    _, profile = tp2_pp2
    assert STAGE0_BYTES == 279_616 and STAGE1_BYTES == 205_632
    assert [r.weights_bytes for r in profile.ranks] == [STAGE0_BYTES, STAGE0_BYTES, STAGE1_BYTES, STAGE1_BYTES]


def test_stages_send_and_receive_the_intermediate_tensors(tp2_pp2):
    _, profile = tp2_pp2
    first, last = profile.ranks[0], profile.ranks[2]
    # 4 requests x 16 tokens = 64 tokens x 64 hidden x 4 B = 16,384 B per key; a TP rank sends / receives half
    assert "sent {'hidden_states': 8192, 'residual': 8192} B, received {} B" in " ".join(first.notes)
    assert "sent {} B, received {'hidden_states': 8192, 'residual': 8192} B" in " ".join(last.notes)
    assert first.phase("intermediate_tensors") is None
    buffers = last.phase("intermediate_tensors")
    assert buffers.allocated_after_bytes - buffers.allocated_before_bytes == BUFFERS == 32_768
    # every stage measured its own peak; only the last samples (vLLM's profile_run)
    assert first.phase("sampler") is None and last.phase("sampler") is not None
    assert all(r.phase("decoder").peak_allocated_bytes > r.weights_bytes for r in profile.ranks)


def test_a_profile_of_stages_is_not_planned(tp2_pp2, tmp_path, capsys):
    from capacity.cli.app import main
    from capacity.memory.measured_profile import save_profile

    _, profile = tp2_pp2
    save_profile(profile, tmp_path / "pp.json")
    assert main(["plan", "--profile", str(tmp_path / "pp.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the profile measured 2 pipeline stages; plans from per-stage profiles are not built yet" in err[0]


def test_a_profile_of_stages_round_trips(tp2_pp2, tmp_path):
    from capacity.memory.measured_profile import load_profile, save_profile

    _, profile = tp2_pp2
    save_profile(profile, tmp_path / "pp.json")
    assert [r["pipeline_rank"] for r in json.loads((tmp_path / "pp.json").read_text())["ranks"]] == [0, 0, 1, 1]
    assert load_profile(tmp_path / "pp.json").ranks == profile.ranks


def test_a_family_without_stages_is_refused_before_any_process(tmp_path):
    from capacity.serving.encoder_budget import build_budget
    from profilers.tensor_parallel import run_tensor_parallel, tensor_parallel_job
    from tests.profilers.test_run import TINY_WHISPER

    source, spec, gpu, serving = folder_model(tmp_path / "w", TINY_WHISPER, max_num_batched_tokens=2048, max_num_seqs=16, dtype="float32", tensor_parallel_size=2)
    job = tensor_parallel_job(source, spec, serving, build_budget(spec, serving), gpu, backend="gloo", pipeline_parallel_size=2)
    with pytest.raises(BadInput, match="builds the stages of decoder-only text models"):
        run_tensor_parallel(job, timeout_s=10)


# --- torchrun itself: two processes, PP 2 ------------------------------------------------------------------


def test_torchrun_launches_capacity_profile(tmp_path):
    """`python -m torch.distributed.run --nproc-per-node 2 -m capacity profile -pp 2 --cpu-probe`: each process reads
    torchrun's environment, builds its stage, and rank 0 alone writes the profile with both ranks (TP 1 here)."""
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(TINY_LLAMA, num_hidden_layers=3, vocab_size=1000)))
    out = tmp_path / "p.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(REPO_ROOT), CAPACITY_CACHE_DIR=str(tmp_path / "cache"))
    argv = ["--model", str(folder), "--cpu-probe", "-pp", "2", "--max-num-batched-tokens", "64", "--max-num-seqs", "4", "--dtype", "float32"]
    # --standalone: torchrun's own rendezvous on a port it binds itself (a port picked here and bound later by torchrun
    # can be taken in between by the other tests' sockets); no stdin (pytest-xdist's worker talks to its master over it)
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "capacity", "profile", *argv, "--no-warmup", "-o", str(out)],
        capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-6000:]
    assert run.stdout.count("no plan:") == 1  # rank 0 alone reports
    assert run.stderr.count("capacity: wrote profile") == 1  # rank 0 alone writes
    ranks = json.loads(out.read_text())["ranks"]
    # TP 1: the whole vocabulary (1024 padded rows) and whole layers: q 64 x 64, k, v 64 x 32, o 64 x 64, MLP 3 x 64 x 128
    layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    assert [(r["rank"], r["pipeline_rank"]) for r in ranks] == [(0, 0), (1, 1)]
    assert [r["weights_bytes"] for r in ranks] == [(1024 * 64 + 2 * layer) * 4 + ROTARY, (layer + 64 + 1024 * 64) * 4 + ROTARY] == [558_144, 410_432]
    # the last stage's receive buffers stay: total consumed = its weights + 2 x 64 x 64 x 4 B
    assert ranks[1]["total_consumed_bytes"] == 410_432 + BUFFERS
    assert "received {'hidden_states': 16384, 'residual': 16384} B" in " ".join(ranks[1]["notes"])
