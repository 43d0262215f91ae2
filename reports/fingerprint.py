"""Where a plan came from, as one flat mapping: the JSON's `fingerprint`, the CSV's fingerprint.csv, the HTML's table.

No pandas here: `--json` (a CI gate's config-only plan) needs the fingerprint and nothing of the DataFrames.
"""

from __future__ import annotations

from typing import Any

import capacity
from capacity.planning.plan import Plan
from capacity.vllm.versions import LATEST


def fingerprint(plan: Plan) -> dict[str, Any]:
    """Where a plan came from: model config hash, capacity and vLLM-semantics versions (the release capacity models, or
    the range of another version's rules the plan was made with), GPU."""
    src, gpu = plan.source, plan.gpu
    out: dict[str, Any] = {
        "model": src.name,
        "model_requested": src.requested,
        "model_origin": src.origin,
        "model_path": src.path,
        "model_revision": src.revision,
        "model_commit": src.commit,
        "config_sha256": src.config_sha256,
        "architecture": plan.spec.architecture,
        "family": plan.spec.family.name,
        "parameters": plan.parameter_count,
        "capacity_version": capacity.__version__,
        "vllm_semantics_version": capacity.VLLM_VERSION if plan.semantics.name == LATEST.name else plan.semantics.name,
        # the release planned for (--vllm-version; a log's range of rules when a log set it) and whose rules were used
        "vllm_version": plan.semantics.release or plan.semantics.name,
        "vllm_rules": plan.semantics.name,
        "gpu": gpu.name,
        "gpu_total_memory_bytes": gpu.total_memory_bytes,
        "gpu_source": gpu.source,
        "gpu_provenance": gpu.provenance,
        "gpu_defaulted": gpu.defaulted,
    }
    if plan.profile is not None:
        fp = plan.profile.fingerprint
        out.update(
            profile_gpu=fp.gpu_name,
            profile_created=fp.created,
            profile_device=fp.device,
            profile_driver=fp.driver,
            profile_cuda=fp.cuda,
            profile_torch=fp.torch,
            profile_transformers=fp.transformers,
            profile_weights=fp.weights,
            profile_attn_implementation=fp.attn_implementation,
            profile_inputs=fp.inputs,
        )
    return out
