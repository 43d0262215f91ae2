"""Pipeline parallelism's own memory on a stage, as vLLM 0.33 allocates it (facts; not yet wired into the plan).

- The intermediate tensors a stage receives from the one before (vllm/v1/worker/gpu_model_runner.py, the dummy
  run): every stage but the first allocates, once and for good, `make_empty_intermediate_tensors(batch_size=
  max_num_tokens, dtype=model dtype)`: one [max_num_batched_tokens, hidden_size] tensor per key the model sends
  (vllm/model_executor/models/utils.py: make_empty_intermediate_tensors_factory). In vLLM 0.33's models 62 files
  send ["hidden_states", "residual"] (Llama and its kin: 2 keys) and 12 send ["hidden_states"] only; the key count
  is the model class's and must come from the family.
- `VllmConfig.max_concurrent_batches` (vllm/config/vllm.py): with async scheduling on the V2 model runner PP + 1;
  with async scheduling on the V1 runner 2 at PP 1; otherwise PP. Async scheduling is on by default unless the V1
  model runner serves PP > 1 (`v1_async_sched_incompat = "pipeline parallelism"`), a pooling model, or an executor
  without it; the V2 runner is the default unless a feature it lacks is asked for.
"""

from __future__ import annotations


def max_concurrent_batches(pipeline_parallel_size: int, async_scheduling: bool, v2_model_runner: bool) -> int:
    """vLLM VllmConfig.max_concurrent_batches: batches in flight at once (sliding-window layers reserve blocks for each)."""
    if async_scheduling:
        if v2_model_runner:
            return pipeline_parallel_size + 1
        if pipeline_parallel_size <= 1:
            return 2
    return pipeline_parallel_size


def intermediate_tensors_bytes(first_stage: bool, keys: int, max_num_batched_tokens: int, hidden_size: int, dtype_bytes: int) -> int:
    """The receive buffer of a stage (GPUModelRunner.intermediate_tensors): none on the first stage, else one
    [max_num_batched_tokens, hidden_size] tensor per key in the model dtype; it is not split by tensor parallelism."""
    return 0 if first_stage else keys * max_num_batched_tokens * hidden_size * dtype_bytes
