"""The profiler's whole code path on the CPU probe, with a tiny Whisper built from config."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from capacity.gpu.catalog import gpu_by_name
from capacity.memory.measured_profile import MemoryProfile, load_profile, save_profile
from capacity.model.registry import model_spec
from capacity.planning.planner import build_plan
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.serving.encoder_budget import build_budget
from capacity.source.resolve import resolve_model
from profilers.probes import CpuProbe
from profilers.run import run_profile

TINY_WHISPER = {
    "architectures": ["WhisperForConditionalGeneration"],
    "model_type": "whisper",
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "vocab_size": 1000,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
    "torch_dtype": "float32",
}


def folder_model(folder: Path, config: dict | None = None, **knobs: object):
    """(source, spec, gpu, serving) of a model folder (written from `config` if given), on an L4 with `knobs`."""
    if config is not None:
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
    source = resolve_model(str(folder))
    spec = model_spec(source)
    gpu = gpu_by_name("L4")
    return source, spec, gpu, resolve_serving(ServingArgs(**knobs), spec, gpu)


def profile_model_of(model, probe=None, **kw) -> MemoryProfile:
    source, spec, gpu, serving = model
    return run_profile(source, spec, serving, build_budget(spec, serving), gpu, probe or CpuProbe(), **kw)


@pytest.fixture
def tiny_whisper(tmp_path: Path):
    return folder_model(tmp_path / "tiny-whisper", TINY_WHISPER, max_num_batched_tokens=2048, max_num_seqs=16, dtype="float32")


def profile_of(tiny, probe=None, **kw) -> MemoryProfile:
    return profile_model_of(tiny, probe, **kw)


def test_cpu_profile_phases_and_terms(tiny_whisper):
    seen: list[str] = []
    p = profile_of(tiny_whisper, on_phase=lambda name, detail: seen.append(name))
    assert p.oom is None
    # budget: max(2048, 1500) = 2048 -> 1 item; reqs min(16, 2048 // 1500) = 1
    assert (p.encoder_items, p.encoder_tokens_per_item) == (1, 1500)
    # the encoder output held through the decoder pass: 1 x 1500 positions x 64 x 4 B (float32)
    assert p.encoder_cache_bytes == 1500 * 64 * 4 == 384_000
    assert seen == ["weights", "encoder", "decoder", "sampler", "sampler_warmup", "warmup_prefill", "warmup_decode"]
    decoder = p.phase("decoder")
    assert decoder is not None and "2048 tokens as 16 requests x 128" in decoder.detail
    sampler = p.phase("sampler")
    # the sampler holds at least one fp32 logits copy of 16 rows x 1000 vocab above its start
    assert sampler is not None and sampler.peak_above_start_bytes >= 16 * 1000 * 4
    assert p.transient_peak_headroom_bytes >= p.encoder_cache_bytes
    assert p.fingerprint.device == "cpu" and p.fingerprint.knobs["max_num_batched_tokens"] == 2048
    assert p.cuda_graphs is None  # no graphs on the CPU


def test_cpu_probe_counts_the_weights(tiny_whisper):
    from capacity.model.arch import buffer_bytes, parameter_bytes
    from capacity.model.family import family_named

    p = profile_of(tiny_whisper, warmup=False)
    module = family_named("whisper").build_module(TINY_WHISPER, device="meta", dtype="float32")
    # parameters and persistent buffers of the same architecture, float32
    assert p.weights_bytes == parameter_bytes(module) + buffer_bytes(module)
    assert p.parameter_count == parameter_bytes(module) // 4


def test_the_fake_probe_counts_each_weight_storage_once_in_allocator_blocks(tiny_whisper):
    """Under fake tensors the weights are the module's distinct parameters and buffers (the tied output projection
    once), each rounded up to the CUDA caching allocator's 512-byte blocks."""
    from capacity.model.family import family_named
    from profilers.probes import FakeProbe

    p = profile_of(tiny_whisper, probe=FakeProbe(), warmup=False)
    module = family_named("whisper").build_module(TINY_WHISPER, device="meta", dtype="float32")
    tensors = {id(t): t for t in (*module.parameters(), *module.buffers())}  # parameters() lists a tied one once
    assert len(tensors) < len(list(module.named_parameters(remove_duplicate=False))) + len(list(module.buffers()))
    assert p.weights_bytes == sum(-(-t.numel() * t.element_size() // 512) * 512 for t in tensors.values())


def weights_only_limit(tiny) -> int:
    """A memory limit the weights fit under, but not the 80 x 3000 x 4 B = 960,000 B of mel features."""
    return profile_of(tiny, warmup=False).weights_bytes + 200_000


def test_oom_is_a_result_and_memory_is_released(tiny_whisper):
    probe = CpuProbe(limit_bytes=weights_only_limit(tiny_whisper))
    p = profile_of(tiny_whisper, probe=probe)
    assert p.oom is not None and p.oom.phase == "encoder"
    assert "1 x audio items of 1500 tokens" in p.oom.detail
    assert probe.allocated() == 0  # model, inputs and outputs all released


def test_profile_json_round_trip_and_atomic_write(tiny_whisper, tmp_path: Path):
    p = profile_of(tiny_whisper, warmup=False)
    path = tmp_path / "profile.json"
    save_profile(p, path)
    assert load_profile(path) == p

    class Boom(KeyboardInterrupt):
        pass

    target = tmp_path / "interrupted.json"
    import capacity.memory.measured_profile as profile_module

    original = profile_module.os.replace

    def interrupted(src: str, dst: object) -> None:
        raise Boom()

    profile_module.os.replace = interrupted
    try:
        with pytest.raises(Boom):
            save_profile(p, target)
    finally:
        profile_module.os.replace = original
    assert not target.exists()
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []


def test_profile_file_mode_follows_the_umask(tiny_whisper, tmp_path: Path):
    """mkstemp makes 0600 files; a saved profile gets 0666 & ~umask, like the reports' exports."""
    from reports.export import write_files

    p = profile_of(tiny_whisper, warmup=False)
    for umask, mode in ((0o022, 0o644), (0o002, 0o664), (0o077, 0o600)):
        previous = os.umask(umask)
        try:
            save_profile(p, tmp_path / f"profile-{umask:o}.json")
            write_files({tmp_path / f"plan-{umask:o}.json": ("--json", b"{}")})
        finally:
            os.umask(previous)
        assert stat.S_IMODE((tmp_path / f"profile-{umask:o}.json").stat().st_mode) == mode
        assert stat.S_IMODE((tmp_path / f"plan-{umask:o}.json").stat().st_mode) == mode


def test_plan_from_profile_uses_measured_terms(tiny_whisper):
    source, spec, gpu, serving = tiny_whisper
    p = profile_of(tiny_whisper, warmup=False)
    plan = build_plan(source, spec, gpu, serving, profile=p)
    m = plan.memory
    assert m["weights"].kind == m["encoder_cache"].kind == m["activation_peak"].kind == m["non_torch"].kind == "measured"
    assert m["weights"].bytes == p.weights_bytes
    assert m["encoder_cache"].bytes + m["activation_peak"].bytes == p.transient_peak_headroom_bytes
    assert m["weights"].bytes + m["non_torch"].bytes == max(p.total_consumed_bytes, p.weights_bytes)
    assert "profile_from_cpu_probe" in {h.id for h in plan.hazards}
    assert "profile_knobs_differ" not in {h.id for h in plan.hazards}

    bigger = replace(serving, max_num_batched_tokens=4096)
    replanned = build_plan(source, spec, gpu, bigger, profile=p)
    differ = [h for h in replanned.hazards if h.id == "profile_knobs_differ"]
    assert differ and "max_num_batched_tokens 2048 profiled, 4096 now" in differ[0].message
    assert "more encoder items per batch than profiled" in differ[0].message  # 4096 // 1500 = 2 items now


def test_oom_profile_makes_the_plan_fail(tiny_whisper):
    source, spec, gpu, serving = tiny_whisper
    p = profile_of(tiny_whisper, probe=CpuProbe(limit_bytes=weights_only_limit(tiny_whisper)))
    plan = build_plan(source, spec, gpu, serving, profile=p)
    assert "profile_out_of_memory" in {h.id for h in plan.hazards}
    assert plan.verdict == "does_not_fit"


TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 500,
    "max_position_embeddings": 256,
    "torch_dtype": "float32",
}


def test_decoder_only_profile_has_no_encoder_phase(tmp_path: Path):
    model = folder_model(tmp_path / "tiny-llama", TINY_LLAMA, max_num_batched_tokens=512, max_num_seqs=8, dtype="float32")
    seen: list[str] = []
    p = profile_model_of(model, on_phase=lambda n, d: seen.append(n))
    assert seen == ["weights", "decoder", "sampler", "sampler_warmup", "warmup_prefill", "warmup_decode"]
    assert (p.encoder_items, p.encoder_cache_bytes) == (0, 0)
    # 512 tokens as 8 requests x 64; the sampler's fp32 copy of 8 x 500 logits is at least 16,000 B
    assert "512 tokens as 8 requests x 64" in p.phase("decoder").detail
    assert p.phase("sampler").peak_above_start_bytes >= 8 * 500 * 4


def test_unprofilable_family_says_so(spec_of, monkeypatch):
    """Every family has hooks today; one without them (profilable False) is refused in one line."""
    from capacity.errors import BadInput
    from capacity.model.family import family_named
    from profilers.run import profilable_family

    monkeypatch.setattr(type(family_named("minicpmv")), "profilable", False)
    with pytest.raises(BadInput, match="profiling minicpmv .* not implemented yet.*--offline"):
        profilable_family(spec_of("openbmb/MiniCPM-Llama3-V-2_5"))


TINY_BART = {
    "architectures": ["BartForConditionalGeneration"],
    "model_type": "bart",
    "d_model": 64,
    "encoder_layers": 1,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "max_position_embeddings": 128,
    "vocab_size": 300,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "torch_dtype": "float32",
}


def test_text_encoder_decoder_profile_has_no_encoder_items(tmp_path: Path):
    model = folder_model(tmp_path / "tiny-bart", TINY_BART, max_num_batched_tokens=256, max_num_seqs=4, dtype="float32")
    seen: list[str] = []
    p = profile_model_of(model, on_phase=lambda n, d: seen.append(n))
    assert seen == ["weights", "decoder", "sampler", "sampler_warmup", "warmup_prefill", "warmup_decode"]
    # warmup requests carry max_encoder_len = max_model_len = 128 encoder positions (no max_source_positions)
    assert "128 encoder positions each" in p.phase("warmup_prefill").detail
    assert p.oom is None and p.encoder_items == 0


def _folder_with_weights(tmp_path: Path, shape: tuple[int, int]) -> Path:
    from safetensors.torch import save_file

    folder = tmp_path / "tiny-whisper-weights"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_WHISPER))
    save_file({"model.decoder.embed_tokens.weight": torch.ones(*shape)}, str(folder / "model.safetensors"))
    return folder


def test_real_weights_are_loaded_when_the_folder_has_them(tmp_path: Path):
    folder = _folder_with_weights(tmp_path, (1000, 64))  # vocab 1000 x d_model 64, as the config builds it
    model = folder_model(folder, max_num_batched_tokens=2048, max_num_seqs=16, dtype="float32")
    p = profile_model_of(model, warmup=False)
    assert p.fingerprint.weights == "real (safetensors, 1 tensors)"


def test_weights_of_another_shape_are_refused(tmp_path: Path):
    from capacity.errors import BadInput

    model = folder_model(_folder_with_weights(tmp_path, (999, 64)), max_num_batched_tokens=2048, max_num_seqs=16, dtype="float32")
    with pytest.raises(BadInput, match=r"has shape \(999, 64\) but config.json builds \(1000, 64\)"):
        profile_model_of(model, warmup=False)


TINY_QWEN_VL = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 2048,
    "vocab_size": 500,
    "rope_scaling": {"mrope_section": [2, 3, 3], "rope_type": "default", "type": "default"},
    "torch_dtype": "bfloat16",
    "vision_config": {
        "model_type": "qwen2_5_vl",
        "depth": 2,
        "hidden_size": 32,
        "num_heads": 2,
        "intermediate_size": 64,
        "out_hidden_size": 64,
        "fullatt_block_indexes": [1],
        "window_size": 112,
        "spatial_patch_size": 14,
    },
}


def test_qwen_vision_tower_traces_under_fake_tensors(tmp_path: Path):
    """The per-family fallback for data-dependent ops: host-computed indices, per-frame attention lengths."""
    from profilers.probes import FakeProbe

    model = folder_model(tmp_path / "tiny-qwen-vl", TINY_QWEN_VL)
    source, spec, gpu, serving = model
    budget = build_budget(spec, serving)
    # default max_pixels 12,845,056 -> 16,384 tokens per image; a video of one frame pair at max_model_len 2048
    assert budget.max_tokens_per_item == {"image": 16_384, "video": 16_384}
    p = run_profile(source, spec, serving, budget, gpu, FakeProbe(), capture_graphs=False, warmup=False)
    assert p.oom is None and p.encoder_items == 1
    assert p.encoder_cache_bytes == 16_384 * 64 * 2  # merged tokens x out_hidden_size x bfloat16
    assert p.phase("encoder").peak_above_start_bytes > 65_536 * 32 * 2  # at least the 4 x 16,384 patches, 32 wide


def test_a_fake_trace_collects_only_what_its_phases_make(tiny_whisper):
    """Torch, transformers and (once built) the model are frozen while the phases run, so each phase's gc.collect
    walks only what the phases made; the collector is on during the phases, and the heap comes back as it was."""
    import gc

    from profilers.probes import FakeProbe

    if gc.get_freeze_count():
        pytest.skip("this process froze its heap already")
    seen: dict[str, tuple[bool, bool, bool]] = {}

    def on_phase(name: str, detail: str) -> None:
        tracked = gc.get_objects()  # the frozen heap is not among them
        seen[name] = (gc.isenabled(), any(o is torch.nn.Linear for o in tracked), any(isinstance(o, torch.nn.Module) for o in tracked))

    p = profile_of(tiny_whisper, probe=FakeProbe(), on_phase=on_phase)
    assert p.oom is None
    assert seen["weights"] == (True, False, False)  # torch's classes frozen before the model is built
    assert seen["decoder"] == seen["warmup_decode"] == (True, False, False)  # the model (its modules) frozen once built
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_host_allocation_failure_is_an_out_of_memory_result():
    from profilers.run import PhaseOOM, _Phases

    phases = _Phases(CpuProbe(), None)
    with pytest.raises(PhaseOOM) as caught, phases.phase("kv_pool", "the planned pool"):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to allocate 137771810816 bytes")
    assert (caught.value.phase, caught.value.detail) == ("kv_pool", "the planned pool")
    with pytest.raises(RuntimeError, match="another error"), phases.phase("decoder", "x"):
        raise RuntimeError("another error")


def test_profile_of_the_whole_model_replanned_at_tp2_gives_one_ranks_terms(tiny_whisper):
    """On the profile path too: a single-GPU profile (the whole model) re-planned at TP 2 plans one
    rank: the weights are the formula path's per-rank figure, the activations divided as the formula divides them."""
    source, spec, gpu, serving = tiny_whisper
    p = profile_of(tiny_whisper, warmup=False)
    assert p.measured_tensor_parallel_size == 1
    at_tp2 = replace(serving, tensor_parallel_size=2)
    plan = build_plan(source, spec, gpu, at_tp2, profile=p)
    formula = build_plan(source, spec, gpu, at_tp2)
    # tiny Whisper (d 64, 2 + 2 layers, FFN 128, vocab 1000, 80 mel bins, float32) has 383,744 parameters; whole on
    # every rank: conv1 64*80*3+64 = 15,424; conv2 64*64*3+64 = 12,352; positions 1500*64 + 448*64 = 124,672; decoder
    # embed_tokens 1000*64 = 64,000; layer norms 2*2*128 + 128 + 2*3*128 + 128 = 1,536; row-parallel biases
    # 2*2*64 + 2*3*64 = 640: 218,624. The other 165,120 halve: 82,560. vLLM's fused qkv / kv projections add a K
    # bias (6 attentions x 64, halved: 192). (218,624 + 82,560 + 192) x 4 B = 1,205,504 B.
    assert plan.memory["weights"].bytes == formula.memory["weights"].bytes == 1_205_504
    assert p.weights_bytes > 1_205_504  # the profile measured the whole model
    act = plan.memory["activation_peak"]
    assert act.kind == "estimated" and "measured at TP 1, per rank at TP 2" in act.method
    assert act.bytes <= build_plan(source, spec, gpu, serving, profile=p).memory["activation_peak"].bytes
