"""`MemoryProfile`: what a profiler measured, as frozen dataclasses that round-trip through JSON.

A profile taken on a GPU is saved with a fingerprint (GPU, driver, CUDA, torch, transformers,
capacity version, config hash, knobs) and can be re-planned anywhere, GPU or not.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from capacity.errors import BadInput
from capacity.user_files import read_text

PROFILE_FORMAT = 2  # 2: per-rank fields and `ranks` (tensor parallelism); 1 (single rank) still loads
READABLE_FORMATS = (1, 2)
RANDOM_WEIGHTS = "random (same memory as real weights)"
UNQUANTIZED_WEIGHTS = "random, built unquantized"  # a quantized checkpoint's layers in the serving dtype: more memory than vLLM loads


def random_weights_kind(quant_method: str | None, dtype: str) -> str:
    """How a profile's random weights were built: as the checkpoint stores them, or (a quantized checkpoint: the
    profilers build plain layers) unquantized, so its measured weights are not the checkpoint's."""
    if quant_method is None:
        return RANDOM_WEIGHTS
    return f"{UNQUANTIZED_WEIGHTS} ({quant_method} layers in {dtype})"


@dataclass(frozen=True)
class Fingerprint:
    model_name: str
    config_sha256: str
    device: str  # "cuda" or "cpu" (CPU probe: tests and dry runs)
    gpu_name: str
    gpu_total_memory_bytes: int
    driver: str
    cuda: str
    torch: str
    transformers: str
    capacity: str
    python: str
    created: str
    dtype: str
    attn_implementation: str
    weights: str  # "real (safetensors)" | "random (same memory as real)"
    inputs: str  # how the dummy inputs were made
    knobs: dict[str, Any]  # the serving knobs and budget the phases were sized by


@dataclass(frozen=True)
class PhaseMeasurement:
    name: str
    detail: str
    wall_s: float
    allocated_before_bytes: int
    allocated_after_bytes: int
    peak_allocated_bytes: int  # torch allocated peak during the phase
    reserved_bytes: int
    device_used_bytes: int | None  # cudaMemGetInfo total - free after the phase (None on CPU)
    nvml_process_bytes: int | None  # NVML: this process's memory on the GPU
    nvml_device_bytes: int | None  # NVML: the whole device, other processes included

    @property
    def peak_above_start_bytes(self) -> int:
        return self.peak_allocated_bytes - self.allocated_before_bytes


@dataclass(frozen=True)
class OomResult:
    phase: str
    detail: str
    message: str


@dataclass(frozen=True)
class CudaGraphMeasurement:
    sizes: tuple[int, ...]  # the FULL decode sizes vLLM would capture
    sampled_sizes: tuple[int, ...]  # the two largest, captured here
    samples_bytes: tuple[int, ...]  # device-memory drop of each capture (shared pool)
    estimate_bytes: int  # s1 + (N - 1) x max(s2, 1 MiB), MRV2's extrapolation


@dataclass(frozen=True)
class MemoryProfile:
    fingerprint: Fingerprint
    baseline_device_used_bytes: int  # CUDA context + cuBLAS before the model (vLLM's init snapshot)
    weights_bytes: int  # allocated growth across model load (vLLM: model_memory_usage)
    encoder_items: int
    encoder_tokens_per_item: int
    encoder_cache_bytes: int  # bytes of the encoder outputs held through the decoder pass
    total_consumed_bytes: int  # device memory used after the profile minus the baseline (vLLM total_consumed)
    transient_peak_headroom_bytes: int  # peak - allocated after the profile (vLLM transient_peak_headroom)
    warmup_peak_bytes: int | None  # transient peak of the warmup batches above their start
    cuda_graphs: CudaGraphMeasurement | None
    phases: tuple[PhaseMeasurement, ...]
    oom: OomResult | None = None
    notes: tuple[str, ...] = field(default=())
    parameter_count: int = 0  # parameters of the model the profile built (0: not built)
    uses_convolution: bool | None = None  # a fake trace saw convolutions (cuDNN on a GPU); None: not traced
    rank: int = 0  # this rank's index in its tensor-parallel group
    # Ranks the measured model was split over (1: the whole model on one device, as a single-process
    # profile or a fake trace builds it); a plan at another TP converts the terms to one rank's.
    measured_tensor_parallel_size: int = 1
    # Device memory growth across init_process_group and the first collectives (NCCL's communicator), measured
    # before the baseline snapshot; None: one rank, or not measured (the CPU/gloo path).
    communicator_bytes: int | None = None
    # Every rank of a tensor-parallel profile (each with its own `rank`); this profile's own fields are those of
    # the rank with the least KV budget (`deciding_rank`), the one vLLM's minimum over ranks follows.
    ranks: tuple[MemoryProfile, ...] = field(default=())
    # Layers that ran as vLLM allocates for them rather than as transformers computes them, in words (every figure
    # measured with them says so); "": every layer ran transformers' own code.
    modelled_layers: str = ""
    # Wall seconds of each step of the run that measured this profile (time.perf_counter), in the order they ran:
    # the CLI's own start (importing torch), the model's config, CUDA init, each phase, the plans; {} for a
    # fake-tensor trace (no time of it is kept, so its plans are the same bytes in every run) and for older files.
    timings_s: dict[str, float] = field(default_factory=dict)
    # A pipeline-parallel profile (`capacity profile --pipeline-parallel-size`): this rank's stage and the stages
    # measured; `rank` is then the global rank (TP rank rank % TP of stage rank // TP, vLLM's layout). Not written
    # when 1 (profiles without stages read as before).
    pipeline_rank: int = 0
    measured_pipeline_parallel_size: int = 1

    @property
    def activation_peak_bytes(self) -> int:
        """Transient peak without the encoder outputs it held (those are their own term)."""
        return max(self.transient_peak_headroom_bytes - self.encoder_cache_bytes, 0)

    @property
    def non_torch_and_reserve_bytes(self) -> int:
        """total_consumed minus the weights: non-torch growth plus the caching allocator's reserve."""
        return max(self.total_consumed_bytes - self.weights_bytes, 0)

    @property
    def non_kv_measured_bytes(self) -> int:
        """What vLLM subtracts from the requested memory on this rank: total_consumed + transient peak + graphs."""
        graphs = self.cuda_graphs.estimate_bytes if self.cuda_graphs is not None else 0
        return self.total_consumed_bytes + self.transient_peak_headroom_bytes + graphs

    def phase(self, name: str) -> PhaseMeasurement | None:
        return next((p for p in self.phases if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        data = {"capacity_profile_format": PROFILE_FORMAT, **asdict(self)}
        _drop_empty_timings(data)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryProfile:
        if data.get("capacity_profile_format") not in READABLE_FORMATS:
            raise BadInput(f"profile format {data.get('capacity_profile_format')!r} is not one of {READABLE_FORMATS}: re-run `capacity profile`")
        try:
            ranks = tuple(cls._one(r) for r in data.get("ranks") or ())
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"profile JSON is missing or has a wrong field in `ranks` ({exc}): re-run `capacity profile`") from exc
        return combine_ranks(ranks) if ranks else cls._one(data)

    @classmethod
    def _one(cls, data: dict[str, Any]) -> MemoryProfile:
        try:
            graphs = data.get("cuda_graphs")
            oom = data.get("oom")
            comm = data.get("communicator_bytes")
            return cls(
                fingerprint=Fingerprint(**data["fingerprint"]),
                baseline_device_used_bytes=int(data["baseline_device_used_bytes"]),
                weights_bytes=int(data["weights_bytes"]),
                encoder_items=int(data["encoder_items"]),
                encoder_tokens_per_item=int(data["encoder_tokens_per_item"]),
                encoder_cache_bytes=int(data["encoder_cache_bytes"]),
                total_consumed_bytes=int(data["total_consumed_bytes"]),
                transient_peak_headroom_bytes=int(data["transient_peak_headroom_bytes"]),
                warmup_peak_bytes=None if data.get("warmup_peak_bytes") is None else int(data["warmup_peak_bytes"]),
                cuda_graphs=None if graphs is None else CudaGraphMeasurement(**{k: tuple(v) if isinstance(v, list) else v for k, v in graphs.items()}),
                phases=tuple(PhaseMeasurement(**p) for p in data["phases"]),
                oom=None if oom is None else OomResult(**oom),
                notes=tuple(data.get("notes", ())),
                parameter_count=int(data.get("parameter_count", 0)),
                uses_convolution=data.get("uses_convolution"),
                rank=int(data.get("rank", 0)),
                measured_tensor_parallel_size=int(data.get("measured_tensor_parallel_size", 1)),
                communicator_bytes=None if comm is None else int(comm),
                modelled_layers=str(data.get("modelled_layers", "")),
                timings_s={str(k): float(v) for k, v in dict(data.get("timings_s") or {}).items()},
                pipeline_rank=int(data.get("pipeline_rank", 0)),
                measured_pipeline_parallel_size=int(data.get("measured_pipeline_parallel_size", 1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"profile JSON is missing or has a wrong field ({exc}): re-run `capacity profile`") from exc


def _drop_empty_timings(data: dict[str, Any]) -> None:
    """A profile without timings (a fake-tensor trace) is written as before they existed, ranks too; so is one
    without pipeline stages."""
    if not data.get("timings_s"):
        data.pop("timings_s", None)
    if data.get("measured_pipeline_parallel_size", 1) == 1:
        data.pop("pipeline_rank", None)
        data.pop("measured_pipeline_parallel_size", None)
    for rank in data.get("ranks") or ():
        _drop_empty_timings(rank)


def deciding_rank(ranks: tuple[MemoryProfile, ...]) -> MemoryProfile:
    """The rank with the least KV budget: the most non-KV memory (every rank requests total x utilization of an
    identical GPU). vLLM 0.33 sets every rank's num_blocks to the minimum over ranks (get_kv_cache_configs);
    a rank that failed decides first (its run is the result). Ties go to the lowest rank."""
    failed = [r for r in ranks if r.oom is not None]
    if failed:
        return min(failed, key=lambda r: r.rank)
    return max(ranks, key=lambda r: (r.non_kv_measured_bytes, -r.rank))


def combine_ranks(ranks: tuple[MemoryProfile, ...], notes: tuple[str, ...] = ()) -> MemoryProfile:
    """One profile of a tensor-parallel run: the deciding rank's fields, every rank under `ranks`."""
    ordered = tuple(sorted((replace(r, ranks=()) for r in ranks), key=lambda r: r.rank))
    decider = deciding_rank(ordered)
    return replace(decider, ranks=ordered, notes=decider.notes + notes)


def tensor_parallel_of(profile: MemoryProfile, requested: int | None) -> int | None:
    """The TP a plan from `profile` runs at: a tensor-parallel profile's own (its terms are one rank's at that TP)."""
    tp = profile.measured_tensor_parallel_size
    if tp == 1:
        return requested
    if requested not in (None, tp):
        raise BadInput(f"--tensor-parallel-size {requested}: the profile measured ranks of TP {tp}; plan it at TP {tp}, or profile at TP {requested}")
    return tp


def require_profile_of(profile: MemoryProfile, source: Any) -> None:
    """A profile's measurements belong to one model config: refuse to plan another with them. A profile of
    pipeline stages is refused too: a plan per stage is not built yet."""
    if profile.measured_pipeline_parallel_size > 1:
        raise BadInput(
            f"the profile measured {profile.measured_pipeline_parallel_size} pipeline stages; plans from per-stage profiles are not built yet: "
            "read the stages' figures in the profile JSON, or profile at --pipeline-parallel-size 1"
        )
    fp = profile.fingerprint
    if fp.config_sha256 != source.config_sha256:
        raise BadInput(
            f"the profile was taken of {fp.model_name} (config sha256 {fp.config_sha256[:12]}), not of {source.name} "
            f"({source.config_sha256[:12]}): profile this model, or plan the profiled one"
        )


def save_profile(profile: MemoryProfile, path: Path) -> None:
    """Write atomically: a temp file in the same folder, then rename (no partial file on error or Ctrl-C)."""
    write_text_atomic(path, json.dumps(profile.to_dict(), indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise BadInput(f"cannot write {path}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as exc:  # a name the file system refuses (too long), no permission
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file follows the umask like any other
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def load_profile(path: Path) -> MemoryProfile:
    text = read_text(path, "--profile")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"--profile {path} is not valid JSON (line {exc.lineno}): re-run `capacity profile`") from exc
    if not isinstance(data, dict):
        raise BadInput(f"--profile {path} must hold a JSON object written by `capacity profile`")
    return MemoryProfile.from_dict(data)

