"""`--cpu-probe` estimates its host memory and time before it starts, refuses above the limits in one line naming
the faster way, and prints a line per phase. Only whisper-tiny ever runs here; larger models are only estimated
(the profiler is replaced by a failure, so a refusal that does not happen cannot start a long run).

whisper-tiny (config.json: d_model 384, 4 encoder and 4 decoder layers, FFN 1536, vocab 51,865, 1,500 encoder
positions; bfloat16) with --gpu L4 --max-num-batched-tokens 2048 --max-num-seqs 64, worked by hand, 2 FLOPs per
multiply-add:
- encoder, 1 item of 1,500 tokens: per layer 2 x 1500 x (4 x 384^2 + 2 x 384 x 1536) + 4 x 1500 x 1500 x 384;
- decoder, 64 requests x 32 tokens: per layer 2 x 2048 x (4 x 384^2 + 2 x 384 x 1536 + 2 x 384^2 cross q/o)
  + 4 x 2048 x 32 x 384;
- sampler: 2 x 64 x 384 x 51865;
- warmup prefill, 64 requests x 2 tokens with 1,500 encoder positions: per layer the same layer over 128 tokens and
  1,502 keys, plus K and V of 64 x 1500 positions (4 x 64 x 1500 x 384^2), then the LM head on 64 rows.
"""

from __future__ import annotations

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, BadInput
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from profilers import cpu_cost
from profilers.cpu_cost import CpuProbeLimits, HostRates, check_cost, estimate_profile_cost, estimate_verify_cost, profile_phase_flops

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

H, FFN, LAYERS, VOCAB, ENC = 384, 1536, 4, 51_865, 1500
TINY_KNOBS = ServingArgs(max_num_batched_tokens=2048, max_num_seqs=64)
RATES = HostRates(matmul_flops_per_s=40e9, normal_elements_per_s=50e6, fill_bytes_per_s=1e9)
LIMITS = CpuProbeLimits(max_host_bytes=8 * 10**9, max_seconds=300)


@pytest.fixture(scope="module")
def tiny_plan():
    return plan_for("openai/whisper-tiny", TINY_KNOBS, "L4")


def test_phase_flops_worked_by_hand(tiny_plan):
    encoder = LAYERS * (2 * ENC * (4 * H * H + 2 * H * FFN) + 4 * ENC * ENC * H)
    decoder = LAYERS * (2 * 2048 * (4 * H * H + 2 * H * FFN + 2 * H * H) + 4 * 2048 * 32 * H)
    sampler = 2 * 64 * H * VOCAB
    prefill = LAYERS * (2 * 128 * (6 * H * H + 2 * H * FFN) + 4 * 128 * (2 + ENC) * H + 4 * 64 * ENC * H * H) + 2 * 64 * H * VOCAB
    decode = LAYERS * (2 * 64 * (6 * H * H + 2 * H * FFN) + 4 * 64 * (1 + ENC) * H + 4 * 64 * ENC * H * H) + 2 * 64 * H * VOCAB
    assert tiny_plan.warmup.num_reqs == 64 and tiny_plan.warmup.prompt_len == 2 and tiny_plan.warmup.max_encoder_len == ENC
    assert dict(profile_phase_flops(tiny_plan)) == {
        "encoder": encoder,
        "decoder": decoder,
        "sampler": sampler,
        "sampler_warmup": 10 * 64 * VOCAB,
        "warmup_prefill": prefill,
        "warmup_decode": decode,
    }
    assert encoder == 35_057_664_000 and sampler == 2_549_268_480


def test_host_memory_and_time(tiny_plan):
    cost = estimate_profile_cost(tiny_plan, RATES, baseline_bytes=500_000_000)
    weights = 37_760_640 * 2  # parameters x bfloat16
    warmup = 3 * 64 * ENC * H * 2 + 3 * 64 * VOCAB * 4  # encoder positions + one layer's K and V, 3 fp32 logits copies (FlashInfer)
    profile_run = tiny_plan.memory["activation_peak"].bytes + tiny_plan.memory["encoder_cache"].bytes
    assert warmup == 261_016_320 and warmup > profile_run
    assert cost.host_bytes == 500_000_000 + weights + warmup
    assert cost.phase_seconds("weights") == pytest.approx(37_760_640 / 50e6)
    assert cost.seconds == pytest.approx(37_760_640 / 50e6 + sum(f for _, f in profile_phase_flops(tiny_plan)) / 40e9)
    no_warmup = estimate_profile_cost(tiny_plan, RATES, warmup=False, baseline_bytes=0)
    assert no_warmup.host_bytes == weights + profile_run and no_warmup.phase_seconds("warmup_prefill") is None


def test_verify_counts_the_kv_pool_on_the_host():
    plan = plan_for("openai/whisper-tiny", ServingArgs(), "H200")
    cost = estimate_verify_cost(plan, RATES, steps=3, baseline_bytes=0)
    pool = plan.kv.num_blocks * plan.kv.bytes_per_block + plan.memory["block_tables"].bytes
    assert pool > 100 * 10**9  # an H200's KV cache, which verify would allocate in host memory
    assert cost.host_bytes >= pool and cost.phase_seconds("kv_pool") == pytest.approx(pool / 1e9)
    with pytest.raises(BadInput, match="of host memory .*verify needs the GPU the plan is for"):
        check_cost(cost, LIMITS, "openai/whisper-tiny")


def test_refusal_is_one_line_naming_the_faster_way():
    plan = plan_for("openai/whisper-large-v3", ServingArgs(), "H200")
    cost = estimate_profile_cost(plan, RATES, baseline_bytes=500_000_000)
    assert cost.seconds > 300  # 1,500 encoder positions projected for ~540 warmup requests in 32 layers
    with pytest.raises(BadInput) as info:
        check_cost(cost, LIMITS, "openai/whisper-large-v3")
    message = str(info.value)
    assert "\n" not in message and " on this CPU (limit 5 min)" in message
    assert "`capacity plan --model openai/whisper-large-v3` runs the same phases on fake tensors" in message and "--force" in message
    check_cost(cost, CpuProbeLimits(max_host_bytes=10**12, max_seconds=10**9), "openai/whisper-large-v3")  # under the limits: no error


@pytest.fixture
def fixed_host(monkeypatch):
    """This host's rates and limits fixed, and the profiler replaced by a failure: nothing large can start."""

    def started(*args, **kwargs):
        raise AssertionError("the CPU probe started")

    monkeypatch.setattr(cpu_cost, "measure_host_rates", lambda dtype, seconds=0.15: RATES)
    monkeypatch.setattr(CpuProbeLimits, "for_this_host", classmethod(lambda cls: LIMITS))
    monkeypatch.setattr("profilers.api.profile_model", started)
    monkeypatch.setattr("profilers.verify.run_verify", started)


@pytest.mark.parametrize("command", [["profile", "-o", "p.json"], ["verify"]])
def test_cli_refuses_a_large_cpu_probe(fixed_host, capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    code = main([command[0], "--model", "openai/whisper-large-v3", "--cpu-probe", *command[1:]])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and out == "" and list(tmp_path.iterdir()) == []
    assert err.count("\n") == 1 and err.startswith("capacity: error: --cpu-probe would need about ") and "--force runs it anyway" in err


def test_cli_force_skips_the_limits(fixed_host, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["profile", "--model", "openai/whisper-large-v3", "--cpu-probe", "--force", "-o", "p.json"])
    err = capsys.readouterr().err
    assert code == 3 and "the CPU probe started" in err  # it went past the limits to the (replaced) profiler
    assert "capacity: --cpu-probe: about " in err


def test_a_small_run_prints_its_estimate_and_each_phase(capsys, tmp_path):
    code = main(["profile", "--model", "openai/whisper-tiny", "--gpu", "L4", "--max-num-batched-tokens", "2048", "--max-num-seqs", "8"]
                + ["--cpu-probe", "--no-warmup", "-o", str(tmp_path / "p.json"), "--json"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0
    assert err[0].startswith("capacity: --cpu-probe: about ") and "GFLOP/s in bfloat16, measured now" in err[0]
    phases = [line.split("] ", 1)[1].split(":")[0] for line in err if line.startswith("capacity: [") and "phases done" not in line]
    assert phases == ["weights", "encoder", "decoder", "sampler", "sampler_warmup"]
    assert all("(about " in line for line in err[1:5])
    assert any(line.endswith("] phases done") for line in err)
