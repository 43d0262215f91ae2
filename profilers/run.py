"""The profile run: replay what vLLM 0.33's Model Runner V2 does at startup and measure each phase.

Phases (../shared/reference/vllm-memory-model.md §2-§5):
  init      CUDA context + cuBLAS handles, then the baseline snapshot
  weights   the real architecture built on the device in the target dtype (model_memory_usage)
  encoder   max_items_per_batch copies of the max-size item through the real encoder; outputs kept
  decoder   max_num_batched_tokens tokens over min(tokens, max_num_seqs) requests; as in vLLM's
            dummy run, cross-attention gets no encoder K/V (a single zero key)
  sampler   one logits row per request in the model dtype: vLLM 0.33's default pass
  sampler_warmup  the same logits, the SamplingParams.for_sampler_warmup() pass (fp32 copy; on FlashInfer GPUs
            also the top-k-masked copy and its softmax)
  (end)     encoder outputs released: total_consumed and transient_peak_headroom as vLLM computes them
  graphs    the two largest FULL decode CUDA graphs captured in one pool, extrapolated like MRV2
  warmup    prefill of 2+k and decode of 1+k tokens per request, encoder-decoder requests carrying
            max_encoder_len encoder positions
"""

from __future__ import annotations

import datetime
import functools
import gc
import platform
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol

from capacity import __version__
from capacity.errors import BadInput
from capacity.gpu.catalog import Gpu
from capacity.memory.cuda_graphs import MIN_GRAPH_BYTES, capture_sizes, full_decode_graph_sizes, preset_max_capture_size
from capacity.memory.measured_profile import RANDOM_WEIGHTS, CudaGraphMeasurement, Fingerprint, MemoryProfile, OomResult, PhaseMeasurement, random_weights_kind
from capacity.memory.sampler import sampler_form
from capacity.model.family import Family
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.serving.encoder_budget import MultiModalBudget
from capacity.source.resolve import ModelSource
from capacity.weights.quant_schemes import quant_method
from profilers.probes import CpuProbe, MemoryProbe
from profilers.startup import RUN_MODULES, Timings, collector_paused, freeze_heap, import_modules, thaw_heap, without_unused_optional_imports

PhaseCallback = Callable[[str, str], None]

DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


class PhaseOOM(Exception):
    def __init__(self, phase: str, detail: str, message: str) -> None:
        super().__init__(message)
        self.phase, self.detail, self.message = phase, detail, message


def sampler_default_pass(logits: Any) -> None:
    """vLLM 0.33's default sampler pass in profile_run: no request is registered, so Sampler.apply_sampling_params
    returns the model-dtype logits untouched and gumbel_sample takes a per-block argmax of them (small buffers)."""
    logits.argmax(dim=-1)


def sampler_pass(logits: Any, flashinfer: bool = True) -> None:
    """One MRV2 sampler call with SamplingParams.for_sampler_warmup() on every row (profile_run's second pass and
    warmup_kernels), allocating what vLLM 0.33's does: one fp32 copy of the logits (apply_sampling_params) that
    logit bias, penalties, bad words, temperature and min-p modify in place (triton kernels); then, on a FlashInfer
    GPU (capacity.memory.sampler.sampler_form), top_k_top_p_sampling_from_logits' top-k-masked copy and its softmax, all
    alive together; elsewhere vLLM's Triton top-k/top-p masks the copy in place; then the top-5 logprobs of the
    raw logits (compute_topk_scores: topk and a per-row log-softmax kernel, small)."""
    import torch

    x = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    x.sub_(0.1).div_(0.9)
    kth = torch.topk(x, k=min(50, x.shape[-1]), dim=-1).values[:, -1:]
    if flashinfer:
        masked = x.clone()  # flashinfer top_k_mask_logits: torch.empty_like(logits)
        masked.masked_fill_(masked < kth, float("-inf"))
        probs = torch.softmax(masked, dim=-1)  # top_k_top_p_sampling_from_logits: torch.softmax(masked_logits)
        probs.argmax(dim=-1)
        del masked, probs
    else:
        x.masked_fill_(x < kth, float("-inf"))
        x.argmax(dim=-1)
    torch.topk(logits, k=min(5, logits.shape[-1]), dim=-1)


def _randomize(model: Any) -> None:
    """Random weights (same memory as real ones): small normal values, so activations stay finite."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.normal_(0.0, 0.02)


def _load_real_weights(model: Any, source: ModelSource, device: str) -> int:
    """Copy safetensors tensors into matching parameters (shapes checked); returns tensors loaded."""
    from safetensors import safe_open

    params = dict(model.named_parameters())
    loaded = 0
    for shard in source.safetensors:
        with safe_open(shard, framework="pt", device=str(device)) as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                target = params.get(name)
                if target is None:
                    target = params.get(name.removeprefix("model."))
                if target is None:
                    continue
                tensor = f.get_tensor(name)
                if tuple(tensor.shape) != tuple(target.shape):
                    raise BadInput(
                        f"{shard}: tensor {name} has shape {tuple(tensor.shape)} but config.json builds {tuple(target.shape)}: "
                        "the weights do not belong to this config"
                    )
                target.data.copy_(tensor)
                loaded += 1
    return loaded


@contextmanager
def released(state: dict[str, Any], probe: MemoryProbe, frozen: list[bool] | None = None, release: bool = True) -> Any:
    """Turn a phase's out-of-memory error into a result, and always release what the run held (the cached blocks
    too, unless `release` is False: a process that exits next leaves them to the driver).

    `frozen` holds True once the run froze the heap (startup.freeze_heap): the collections here walk only what the
    phases made (an out-of-memory error's frames among it), then the heap is thawed for the run's last collection."""
    caught: list[OomResult] = []
    try:
        yield caught
    except PhaseOOM as exc:
        caught.append(OomResult(exc.phase, exc.detail, exc.message))
    finally:
        state.clear()
        gc.collect()
        if release:
            probe.empty_cache()
        thaw_heap(any(frozen or ()))


class _Phases:
    """Measures phases on a probe; turns an out-of-memory error into a PhaseOOM naming the phase."""

    def __init__(self, probe: MemoryProbe, on_phase: PhaseCallback | None) -> None:
        self.probe = probe
        self.on_phase = on_phase
        self.done: list[PhaseMeasurement] = []

    @contextmanager
    def phase(self, name: str, detail: str) -> Any:
        import torch

        probe = self.probe
        if self.on_phase:
            self.on_phase(name, detail)
        probe.sync()
        probe.reset_peak()
        before = probe.allocated()
        start = time.perf_counter()
        try:
            yield
            probe.sync()
        except torch.cuda.OutOfMemoryError as exc:
            raise PhaseOOM(name, detail, str(exc).splitlines()[0] if str(exc) else "CUDA out of memory") from None
        except RuntimeError as exc:  # the CPU probe's host allocator refusing an allocation is its out-of-memory
            if "can't allocate memory" not in str(exc):
                raise
            raise PhaseOOM(name, detail, " ".join(str(exc).split())[:200]) from None
        process, device = probe.nvml()
        self.done.append(
            PhaseMeasurement(
                name=name,
                detail=detail,
                wall_s=round(time.perf_counter() - start, 4),
                allocated_before_bytes=before,
                allocated_after_bytes=probe.allocated(),
                peak_allocated_bytes=probe.peak(),
                reserved_bytes=probe.reserved(),
                device_used_bytes=probe.device_used(),
                nvml_process_bytes=process,
                nvml_device_bytes=device,
            )
        )


class Placement(Protocol):
    """How the model reaches the device, and who encodes the multimodal items."""

    rank: int
    world_size: int
    communicator_bytes: int | None

    def describe(self) -> str: ...
    def load(self, spec: ModelSpec, source: ModelSource, serving: ServingConfig, probe: MemoryProbe, device: str, attn: str) -> tuple[Any, str]: ...
    def encode(self, family: Any, model: Any, item: Any, count: int) -> list[Any]: ...
    def knobs(self) -> dict[str, Any]: ...


def hidden_of(spec: ModelSpec) -> int:
    return spec.decoder.hidden_size


def placement_decode(placement: Any, family: Family, model: Any, ids: Any, encoder_states: Any) -> Any:
    """The decoder pass as the placement runs it: a pipeline stage runs its own layers (profilers/pipeline_stage.py)."""
    decode = getattr(placement, "decode", None)
    return family.decode(model, ids, encoder_states) if decode is None else decode(family, model, ids, encoder_states)


class WholeModel:
    """The whole model on one device: real safetensors weights when the folder has them, else random ones."""

    rank = 0
    world_size = 1
    communicator_bytes = None

    def describe(self) -> str:
        return "built"

    def load(self, spec: ModelSpec, source: ModelSource, serving: ServingConfig, probe: MemoryProbe, device: str, attn: str) -> tuple[Any, str]:
        if probe.describe()["device"] == "fake":  # build on meta (no values needed), then fake tensors the probe counts
            with probe.host():
                meta = spec.family.build_module(dict(source.config), device="meta", dtype=serving.dtype, attn_implementation=attn)
            return probe.adopt_module(meta).eval(), RANDOM_WEIGHTS  # type: ignore[attr-defined]
        model = spec.family.build_module(dict(source.config), device=device, dtype=serving.dtype, init_weights=False, attn_implementation=attn).eval()
        if source.safetensors:
            loaded = _load_real_weights(model, source, device)
            return model, f"real (safetensors, {loaded} tensors)"
        _randomize(model)
        return model, random_weights_kind(quant_method(source.config), serving.dtype)

    def encode(self, family: Any, model: Any, item: Any, count: int) -> list[Any]:
        return family.encode(model, item, count)

    def knobs(self) -> dict[str, Any]:
        return {}


def profilable_family(spec: ModelSpec) -> Family:
    """The spec's family, whose hooks the phases run; one without hooks says so (plan it offline)."""
    if not spec.family.profilable:
        from capacity.model.family import all_families

        profilable = ", ".join(f.name for f in all_families() if f.profilable)
        raise BadInput(
            f"profiling {spec.family.name} ({spec.architecture}) on a GPU is not implemented yet "
            f"(profilable: {profilable}); plan it from its config with --offline"
        )
    return spec.family


def _heap_thawed_after(run: Callable[..., MemoryProfile]) -> Callable[..., MemoryProfile]:
    """The heap leaves the run as it came in: a run that froze it (startup.freeze_heap) and stopped before
    `released` thawed it is thawed here; a heap its caller froze stays frozen."""

    @functools.wraps(run)
    def thawed_after(*args: Any, **kwargs: Any) -> MemoryProfile:
        came_thawed = not gc.get_freeze_count()
        try:
            return run(*args, **kwargs)
        finally:
            thaw_heap(came_thawed)

    return thawed_after


@_heap_thawed_after
def run_profile(
    source: ModelSource,
    spec: ModelSpec,
    serving: ServingConfig,
    budget: MultiModalBudget,
    gpu: Gpu,
    probe: MemoryProbe,
    *,
    attn_implementation: str = "sdpa",
    on_phase: PhaseCallback | None = None,
    capture_graphs: bool = True,
    warmup: bool = True,
    placement: Placement | None = None,
    timings: Timings | None = None,
    release_memory: bool = True,
) -> MemoryProfile:
    """Run the MRV2 startup phases on `probe`'s device and return what was measured.

    `placement` puts the model on the device: the whole model (default), or one tensor-parallel rank's shard
    (profilers/tensor_parallel.py), which then runs these same phases with its collectives.
    A CUDA out-of-memory error in any phase is a result: the profile comes back with `oom` set,
    after every tensor of the run is released.
    `timings` (the caller's, begun where its own steps began) gets the wall time of each step of the run; a profile
    measured on a device records them all (`timings_s`), a fake-tensor trace none (its plans stay byte-identical).
    `release_memory=False` (a CLI process that exits after planning) leaves the run's cached blocks to the driver,
    which frees them at exit, instead of handing each back to CUDA first; every tensor is still released.
    """
    with collector_paused():
        import_modules(RUN_MODULES)
        # A run on a CPU or fake-tensor probe freezes the heap now, not only once the weights are built: those probes
        # count only the tensors the run makes, so nothing made before it can matter, and its first collections then
        # skip the whole heap of torch and transformers (about 0.2 s each on a 2-core machine). A run on the GPU first
        # collects what earlier work left (it may hold device memory), as vLLM does, and freezes after.
        frozen: list[bool] = [freeze_heap()] if isinstance(probe, CpuProbe) else []
    import torch
    import transformers

    timings = timings or Timings()
    timings.lap("import_transformers")
    placement = placement or WholeModel()
    family = profilable_family(spec)
    phases = _Phases(probe, on_phase)
    state: dict[str, Any] = {}
    probe.init()
    describe = probe.describe()
    device = "cuda" if describe["device"] == "cuda" else "cpu"
    device_str = getattr(probe, "device", device)
    dtype = getattr(torch, DTYPES[serving.dtype])
    probe.empty_cache()
    baseline_used = probe.device_used() or 0
    baseline_alloc = probe.allocated()
    timings.lap("cuda_init")
    notes: list[str] = []
    items, tokens_per_item = budget.profile_items, budget.profile_tokens_per_item
    reqs = min(serving.max_num_batched_tokens, serving.max_num_seqs)
    per_req = -(-serving.max_num_batched_tokens // reqs)
    result: dict[str, Any] = {"parameters": 0, "weights": 0, "encoder_cache": 0, "consumed": 0, "headroom": 0, "graphs": None, "warmup": None}
    weights_kind = RANDOM_WEIGHTS
    inputs_note = ""
    modelled_layers = ""

    def snapshot(done: tuple[PhaseMeasurement, ...] = (), oom: OomResult | None = None) -> MemoryProfile:
        """The profile of what was measured so far (the warmup is sized from one without its own phases)."""
        fingerprint = Fingerprint(
            model_name=source.name,
            config_sha256=source.config_sha256,
            device=str(describe["device"]),
            gpu_name=str(describe["gpu_name"]),
            gpu_total_memory_bytes=int(describe["gpu_total_memory_bytes"]),
            driver=str(describe["driver"]),
            cuda=str(describe["cuda"]),
            torch=torch.__version__,
            transformers=transformers.__version__,
            capacity=__version__,
            python=platform.python_version(),
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            dtype=serving.dtype,
            attn_implementation=attn_implementation,
            weights=weights_kind,
            inputs=inputs_note,
            knobs={**profiled_knobs(serving, budget), **placement.knobs()},
        )
        return MemoryProfile(
            fingerprint=fingerprint,
            baseline_device_used_bytes=baseline_used,
            weights_bytes=result["weights"],
            encoder_items=items,
            encoder_tokens_per_item=tokens_per_item,
            encoder_cache_bytes=result["encoder_cache"],
            total_consumed_bytes=result["consumed"],
            transient_peak_headroom_bytes=result["headroom"],
            warmup_peak_bytes=result["warmup"],
            cuda_graphs=result["graphs"],
            phases=done,
            oom=oom,
            notes=tuple(notes),
            parameter_count=result["parameters"],
            uses_convolution=bool(probe.convolutions) if hasattr(probe, "convolutions") else None,
            rank=placement.rank,
            measured_tensor_parallel_size=placement.world_size,
            communicator_bytes=placement.communicator_bytes,
            modelled_layers=modelled_layers,
            timings_s={} if describe["device"] == "fake" else dict(timings.seconds),
            pipeline_rank=getattr(placement, "pipeline_rank", 0),
            measured_pipeline_parallel_size=getattr(placement, "pipeline_parallel_size", 1),
        )

    with released(state, probe, frozen, release_memory) as caught, probe.tracking(), torch.inference_mode():
        weights_phase = phases.phase("weights", f"{spec.architecture} {placement.describe()} on {device_str} in {serving.dtype}")
        with weights_phase, without_unused_optional_imports():
            state["model"], weights_kind = placement.load(spec, source, serving, probe, device_str, attn_implementation)
        model = state["model"]
        modelled_layers = family.run_layers_as_vllm(model, spec)
        result["parameters"] = sum(p.numel() for p in model.parameters())
        result["weights"] = phases.done[-1].allocated_after_bytes - phases.done[-1].allocated_before_bytes
        timings.lap("weights")

        stage = getattr(placement, "stage", None)  # a pipeline stage (profilers/pipeline_stage.py), or None
        samples = stage is None or stage.layers.last  # vLLM's profile_run samples on the last stage only
        if stage is not None and not stage.layers.first:
            tokens = serving.max_num_batched_tokens
            with phases.phase("intermediate_tensors", stage.buffers_detail(tokens, hidden_of(spec))):
                stage.allocate_buffers(tokens, hidden_of(spec), dtype, device_str)

        # vLLM memory_profiling(): gc, empty_cache, reset the peak, then profile_run.
        probe.empty_cache()
        frozen.append(freeze_heap())  # all that is left is alive (modules, the model): later collections skip it
        probe.reset_peak()
        timings.lap("collect")
        before_profile_alloc = probe.allocated()
        profile_peak = before_profile_alloc
        if items:
            with phases.phase("encoder", f"{items} x {budget.modality_with_max_tokens} items of {tokens_per_item} tokens"):
                with probe.host():  # the processor runs on the host, as in vLLM
                    item = profiled_item(family, spec, source, device_str, dtype, tokens_per_item)
                item = replace(item, tensors={k: probe.adopt(v) for k, v in item.tensors.items()})
                inputs_note = item.note
                state["encoder_outputs"] = placement.encode(family, model, item, items)
                del item
            profile_peak = max(profile_peak, phases.done[-1].peak_allocated_bytes)
            result["encoder_cache"] = sum(o.numel() * o.element_size() for o in state["encoder_outputs"])
            phases.done[-1] = replace(phases.done[-1], detail=f"{phases.done[-1].detail} ({inputs_note})")
            timings.lap("encoder")
        hidden = spec.decoder.hidden_size
        with phases.phase("decoder", f"{reqs * per_req} tokens as {reqs} requests x {per_req} (max_num_batched_tokens {serving.max_num_batched_tokens})"):
            ids = torch.zeros(reqs, per_req, dtype=torch.long, device=device_str)
            one_key = torch.zeros(reqs, 1, hidden, dtype=dtype, device=device_str) if spec.is_encoder_decoder else None
            state["hidden"] = placement_decode(placement, family, model, ids, one_key)
            del ids, one_key
        profile_peak = max(profile_peak, phases.done[-1].peak_allocated_bytes)
        timings.lap("decoder")
        if samples:
            flashinfer = sampler_form(gpu, warmup_pass=True).flashinfer
            with phases.phase("sampler", f"{reqs} logits rows x {spec.decoder.vocab_size} vocab, default pass"):
                state["logits"] = family.lm_head(model, state["hidden"][:, -1, :])
                sampler_default_pass(state["logits"])
            profile_peak = max(profile_peak, phases.done[-1].peak_allocated_bytes)
            timings.lap("sampler")
            path = "FlashInfer top-k/top-p" if flashinfer else "Triton top-k/top-p"
            with phases.phase("sampler_warmup", f"the same logits, SamplingParams.for_sampler_warmup() pass ({path}, as on {gpu.name})"):
                sampler_pass(state.pop("logits"), flashinfer)
            profile_peak = max(profile_peak, phases.done[-1].peak_allocated_bytes)
        else:
            notes.append("no sampler on this pipeline stage: vLLM's profile_run samples on the last stage only")
        state.pop("hidden", None)
        state.pop("encoder_outputs", None)  # reset_encoder_cache()
        probe.sync()
        probe.empty_cache()
        after_alloc = probe.allocated()
        after_used = probe.device_used()
        result["headroom"] = max(profile_peak - after_alloc, 0)
        result["consumed"] = (after_used - baseline_used) if after_used is not None else (after_alloc - baseline_alloc)
        timings.lap("sampler_warmup")

        if stage is not None and (capture_graphs or warmup):  # both run the whole model's decode on one device
            notes.append("CUDA graphs and warmup batches are not run per pipeline stage yet: their terms stay estimated")
            capture_graphs = warmup = False
        if capture_graphs and device == "cuda" and not serving.enforce_eager:
            result["graphs"] = _capture_graphs(phases, probe, family, model, spec, serving, gpu, dtype, device_str, notes)
            timings.lap("cuda_graphs")
        if warmup:
            result["warmup"] = _warmup(phases, family, model, source, spec, serving, gpu, dtype, device_str, snapshot(), timings)
    oom = caught[0] if caught else None
    model = None  # the last reference: release the cached blocks too, so an OOM leaves the GPU free
    # Back at the baseline's allocation, no tensor of the run is left for a collection to free (none sits in a
    # reference cycle): skip walking the whole heap once more.
    collect = probe.allocated() > baseline_alloc
    if release_memory:
        probe.empty_cache(collect=collect)
    elif collect:
        gc.collect()
    timings.lap("release")
    return snapshot(tuple(phases.done), oom)


def profiled_item(family: Family, spec: ModelSpec, source: ModelSource, device: str, dtype: Any, tokens: int) -> Any:
    """The family's max-size encoder item; an item it cannot build here (no processor file, a processor backend
    this install lacks) is refused in one line, which the offline trace reads as its formula fallback."""
    try:
        return family.encoder_input(spec, source, device, dtype, tokens)
    except (NotImplementedError, ImportError, LookupError) as exc:
        raise BadInput(
            f"profiling {spec.name}'s encoder is not implemented yet here: the {family.name} family cannot build its "
            f"{tokens}-token item ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        ) from exc


def profiled_knobs(serving: ServingConfig, budget: MultiModalBudget) -> dict[str, Any]:
    """The knobs that size the measured phases; re-planning compares against these."""
    return {
        "max_num_batched_tokens": serving.max_num_batched_tokens,
        "max_num_seqs": serving.max_num_seqs,
        "max_model_len": serving.max_model_len,
        "num_speculative_tokens": serving.num_speculative_tokens,
        "tensor_parallel_size": serving.tensor_parallel_size,
        "dtype": serving.dtype,
        "kv_cache_dtype": serving.kv_cache_dtype,
        "block_size": serving.block_size,
        "enforce_eager": serving.enforce_eager,
        "encoder_items": budget.profile_items,
        "encoder_tokens_per_item": budget.profile_tokens_per_item,
        "mm_processor_kwargs": dict(serving.mm_processor_kwargs),
        **({"hf_overrides": dict(serving.hf_overrides)} if serving.hf_overrides else {}),
    }


def _capture_graphs(
    phases: _Phases, probe: MemoryProbe, family: Family, model: Any, spec: ModelSpec, serving: ServingConfig, gpu: Gpu, dtype: Any, device: str, notes: list[str]
) -> CudaGraphMeasurement | None:
    """Capture the two largest FULL decode graphs into one pool and extrapolate like MRV2."""
    import torch

    q = 1 + serving.num_speculative_tokens
    sizes = full_decode_graph_sizes(serving, capture_sizes(serving, gpu.sm100, preset_max_capture_size(spec.architecture)))
    if not sizes:
        return None
    sampled = sizes[::-1][:2]
    pool = torch.cuda.graph_pool_handle()
    samples: list[int] = []
    keep: list[Any] = []
    try:
        with phases.phase("cuda_graphs", f"capture FULL decode graphs of {sampled} tokens (of {len(sizes)} sizes)"):
            for size in sampled:
                batch = size // q
                ids = torch.zeros(batch, q, dtype=torch.long, device=device)
                one_key = torch.zeros(batch, 1, spec.decoder.hidden_size, dtype=dtype, device=device) if spec.is_encoder_decoder else None
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    family.lm_head(model, family.decode(model, ids, one_key))  # warm-up run before capture
                torch.cuda.current_stream().wait_stream(stream)
                torch.cuda.synchronize()
                used = probe.device_used() or 0
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = family.lm_head(model, family.decode(model, ids, one_key))
                torch.cuda.synchronize()
                samples.append(max((probe.device_used() or 0) - used, 0))
                keep.append((graph, ids, one_key, out))
    except PhaseOOM:
        raise
    except Exception as exc:  # capture can fail on host syncs inside the model code: fall back to the estimate
        notes.append(f"CUDA-graph capture failed ({type(exc).__name__}: {str(exc)[:120]}); the graph term stays estimated")
        return None
    finally:
        keep.clear()
        torch.cuda.synchronize()
    s1 = samples[0]
    s2 = samples[1] if len(samples) > 1 else 0
    estimate = s1 + (len(sizes) - 1) * max(s2, MIN_GRAPH_BYTES) if len(samples) > 1 else s1
    return CudaGraphMeasurement(tuple(sizes), tuple(sampled), tuple(samples), estimate)


def _warmup(
    phases: _Phases,
    family: Family,
    model: Any,
    source: ModelSource,
    spec: ModelSpec,
    serving: ServingConfig,
    gpu: Gpu,
    dtype: Any,
    device: str,
    measured: MemoryProfile,
    timings: Timings | None = None,
) -> int:
    """MRV2 warmup_kernels batches, sized by the plan that the measurements so far give."""
    import torch

    from capacity.planning.planner import build_plan

    timings = timings or Timings()
    with phases.probe.host():  # the plan builds the model on the meta device for its weights: not under fake tensors
        plan = build_plan(source, spec, gpu, serving, profile=measured)
    timings.lap("warmup_plan")
    w = plan.warmup
    hidden = spec.decoder.hidden_size
    # The encoder positions each warmup request carries; in vLLM their K/V sit in the KV cache.
    enc = torch.zeros(w.num_reqs, w.max_encoder_len, hidden, dtype=dtype, device=device) if spec.is_encoder_decoder else None
    peak = 0
    for name, length in (("warmup_prefill", w.prompt_len), ("warmup_decode", w.decode_query_len)):
        with phases.phase(name, f"{w.num_reqs} requests x {length} tokens" + (f", {w.max_encoder_len} encoder positions each" if enc is not None else "")):
            ids = torch.zeros(w.num_reqs, length, dtype=torch.long, device=device)
            logits = family.lm_head(model, family.decode(model, ids, enc)[:, -1, :])
            sampler_pass(logits, sampler_form(gpu, warmup_pass=True).flashinfer)  # warmup_kernels: for_sampler_warmup()
            del ids, logits
        peak = max(peak, phases.done[-1].peak_above_start_bytes)
        timings.lap(name)
    del enc
    return peak
