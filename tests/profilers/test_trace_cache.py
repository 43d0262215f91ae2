"""The fake-tensor trace is worked out once per input and read back from capacity's disk cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity import disk_cache
from capacity.cli.app import main
from capacity.gpu.catalog import gpu_by_name
from capacity.model.registry import load_model
from capacity.serving.config import ServingArgs, resolve_serving
from profilers import api, sweep_traces
from tests.support.plan_snapshot import normalized

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

MODEL = "openai/whisper-tiny"


@pytest.fixture
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CAPACITY_CACHE_DIR", str(tmp_path))
    return tmp_path


def traced_plan(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    code = main(["plan", "--model", MODEL, "--gpu", "L4", "--estimate", "trace", "--json", *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(normalized(out.out))  # the trace's timings and date are left out


def counting_run_profile(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = api.run_profile

    def run(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "run_profile", run)
    return calls


def test_a_second_plan_reads_the_trace_and_plans_the_same(own_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = counting_run_profile(monkeypatch)
    first = traced_plan(capsys)
    second = traced_plan(capsys)
    assert calls == [1]
    assert first == second
    assert [k.kind for k in disk_cache.usage()[1]] == ["trace"]


def test_no_cache_traces_again_and_writes_nothing(own_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = counting_run_profile(monkeypatch)
    traced_plan(capsys, "--no-cache")
    traced_plan(capsys, "--no-cache")
    assert calls == [1, 1]
    assert not any(own_cache.iterdir())


def test_a_corrupt_trace_entry_is_traced_again(own_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = counting_run_profile(monkeypatch)
    first = traced_plan(capsys)
    (entry,) = (own_cache / "trace").glob("*.json")
    stored = json.loads(entry.read_text())
    stored["value"]["weights_bytes"] = "not a number"
    entry.write_text(json.dumps(stored))
    assert traced_plan(capsys) == first
    assert calls == [1, 1]


def test_another_knob_is_another_trace(own_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = counting_run_profile(monkeypatch)
    traced_plan(capsys)
    traced_plan(capsys, "--max-num-seqs", "8")
    assert calls == [1, 1]


def test_the_key_names_the_model_files_family_and_knobs() -> None:
    source, spec = load_model(MODEL)
    gpu = gpu_by_name("L4")
    serving = resolve_serving(ServingArgs(), spec, gpu)
    key = api.trace_key(source, spec, serving, gpu, warmup=True)
    assert key["config_sha256"] == source.config_sha256 and key["family"] == "whisper"
    assert key["knobs"]["max_num_seqs"] == serving.max_num_seqs and key["gpu"]["name"] == gpu.name
    other = resolve_serving(ServingArgs(gpu_memory_utilization=0.5), spec, gpu)
    assert api.trace_key(source, spec, other, gpu, warmup=True) != key  # the warmup is sized by a plan: every knob counts
    sweep_keys = {json.dumps(api.trace_key(source, spec, s, gpu, warmup=False), sort_keys=True) for s in (serving, other)}
    assert len(sweep_keys) == 1  # a sweep's trace: only the knobs that size the phases


def test_a_sweep_traces_its_distinct_inputs_in_worker_processes(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two worker processes trace the two distinct max_num_seqs points once each; the sweep then plans every point
    from them, as the same sweep traced point by point in this process does."""
    from capacity.planning.sweep import SweepAxes, run_sweep

    axes = SweepAxes(gpus=("L4",), tensor_parallel_sizes=(1, 2), max_num_seqs=(8, 16))
    monkeypatch.setattr(sweep_traces, "_TRACES", {})
    source, spec = load_model(MODEL)
    gpu = gpu_by_name("L4")
    points = [(resolve_serving(ServingArgs(tensor_parallel_size=tp, max_num_seqs=n), spec, gpu), gpu) for tp in (1, 2) for n in (8, 16)]
    assert sweep_traces.trace_in_parallel(source, spec, points, workers=2) == 2
    assert len(sweep_traces._TRACES) == 2
    parallel = run_sweep(MODEL, ServingArgs(), axes, profiler=sweep_traces.traced_profile, prepare=sweep_traces.trace_in_parallel)
    monkeypatch.setattr(sweep_traces, "_TRACES", {})
    with disk_cache.bypassed():
        serial = run_sweep(MODEL, ServingArgs(), axes, profiler=sweep_traces.traced_profile)
    assert [p.to_dict() if hasattr(p, "to_dict") else p for p in parallel.points] == [p.to_dict() if hasattr(p, "to_dict") else p for p in serial.points]


def test_a_sweep_over_gpus_with_other_sampler_paths_traces_each(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A T4 (compute capability 7.5) takes vLLM's Triton top-k/top-p path, an H200 FlashInfer's, whose masked copy of
    the fp32 logits the sampler's warmup pass holds on top: a sweep over both traces each GPU's own."""
    from capacity.planning.sweep import SweepAxes, run_sweep

    monkeypatch.setattr(sweep_traces, "_TRACES", {})
    run_sweep(MODEL, ServingArgs(), SweepAxes(gpus=("T4", "H200")), profiler=sweep_traces.traced_profile)
    assert len(sweep_traces._TRACES) == 2
    t4, h200 = (p.phase("sampler_warmup") for p in sweep_traces._TRACES.values())
    assert t4 is not None and h200 is not None
    assert h200.peak_above_start_bytes > t4.peak_above_start_bytes


def test_a_trace_that_stops_is_kept_and_not_run_again(own_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A data-dependent op stops a fake trace the same way every time (Qwen3-VL's repeat_interleave): the second plan
    reads the reason from the cache and plans with the formulas at once, with the same note."""
    calls: list[int] = []

    def stops(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        raise RuntimeError("aten.repeat_interleave.Tensor")

    monkeypatch.setattr(api, "run_profile", stops)
    first, second = traced_plan(capsys), traced_plan(capsys)
    assert calls == [1]
    note = "the fake-tensor trace stopped at RuntimeError: aten.repeat_interleave.Tensor; the activation terms are formulas"
    assert note in first["notes"] and first == second


def test_a_host_out_of_memory_is_not_kept(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise MemoryError

    monkeypatch.setattr(api, "run_profile", exhausted)
    source, spec = load_model(MODEL)
    gpu = gpu_by_name("L4")
    serving = resolve_serving(ServingArgs(), spec, gpu)
    with pytest.raises(MemoryError):
        api.cached_trace(source, spec, serving, gpu, warmup=True)
    assert not (own_cache / "trace").exists()
