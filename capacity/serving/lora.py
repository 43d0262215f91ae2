"""vLLM's LoRA knobs (--enable-lora and the rest), checked and defaulted as vLLM 0.33's LoRAConfig does.

`LoraConfig` is what the plan sizes the LoRA buffers with (capacity/memory/lora.py); None in ServingConfig means
LoRA is off, and then the plan is exactly the plan without these knobs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from capacity.errors import BadInput

MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm/config/lora.py: MaxLoRARanks
LORA_DTYPES = ("auto", "float16", "bfloat16")  # vllm/config/lora.py: LoRADType
DEFAULT_MAX_LORAS = 1  # LoRAConfig.max_loras
DEFAULT_MAX_LORA_RANK = 16  # LoRAConfig.max_lora_rank


@dataclass(frozen=True)
class LoraConfig:
    """LoRAConfig after vLLM's validation: every field concrete."""

    max_loras: int  # GPU slots: each wrapped layer's stacked buffers hold this many adapters
    max_lora_rank: int
    max_cpu_loras: int  # adapters cached on the host (no GPU memory)
    lora_dtype: str  # "auto" resolved to the model dtype (LoRAConfig.verify_with_model_config)
    fully_sharded_loras: bool
    extra_vocab_size: int | None = None  # --lora-extra-vocab-size as given (vLLM 0.8-0.11 only; the planner checks it)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoraArgs:
    """The LoRA knobs as given (None: vLLM's default)."""

    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    lora_dtype: str | None = None
    fully_sharded_loras: bool = False
    lora_extra_vocab_size: int | None = None  # vLLM 0.8-0.11 only (removed in 0.12.0): checked by the planner


def resolve_lora(args: LoraArgs, model_dtype: str, tensor_parallel_size: int) -> LoraConfig | None:
    """vLLM's EngineArgs.create_engine_config + LoRAConfig._validate_lora_config: None without --enable-lora."""
    if not args.enable_lora:
        given = [
            flag
            for flag, value in (
                ("--max-loras", args.max_loras),
                ("--max-lora-rank", args.max_lora_rank),
                ("--max-cpu-loras", args.max_cpu_loras),
                ("--lora-dtype", args.lora_dtype),
                ("--fully-sharded-loras", args.fully_sharded_loras or None),
                ("--lora-extra-vocab-size", args.lora_extra_vocab_size),
            )
            if value is not None
        ]
        if given:
            raise BadInput(f"{', '.join(given)} without --enable-lora: vLLM ignores LoRA settings unless LoRA is enabled; add --enable-lora or drop them")
        return None
    max_loras = DEFAULT_MAX_LORAS if args.max_loras is None else args.max_loras
    if max_loras < 1:
        raise BadInput(f"--max-loras must be >= 1 (vLLM's LoRAConfig), got {max_loras}")
    rank = DEFAULT_MAX_LORA_RANK if args.max_lora_rank is None else args.max_lora_rank
    if rank not in MAX_LORA_RANKS:
        raise BadInput(f"--max-lora-rank {rank}: vLLM accepts only {', '.join(map(str, MAX_LORA_RANKS))}")
    # EngineArgs: max_cpu_loras if max_cpu_loras and max_cpu_loras > 0 else None; None then becomes max_loras
    cpu = args.max_cpu_loras if args.max_cpu_loras and args.max_cpu_loras > 0 else max_loras
    if cpu < max_loras:
        raise BadInput(f"--max-cpu-loras ({cpu}) must be >= --max-loras ({max_loras}), as vLLM's LoRAConfig requires")
    dtype = args.lora_dtype or "auto"
    if dtype not in LORA_DTYPES:
        raise BadInput(f"--lora-dtype {dtype!r} is not one of {', '.join(LORA_DTYPES)}")
    if args.fully_sharded_loras and tensor_parallel_size > 1 and rank % tensor_parallel_size:
        # the sharded column layers' lora_a holds divide(max_lora_rank, tp_size) rows: vLLM's divide() asserts
        raise BadInput(f"--fully-sharded-loras: --max-lora-rank {rank} is not divisible by --tensor-parallel-size {tensor_parallel_size}, which vLLM asserts")
    return LoraConfig(
        max_loras=max_loras,
        max_lora_rank=rank,
        max_cpu_loras=cpu,
        lora_dtype=model_dtype if dtype == "auto" else dtype,
        fully_sharded_loras=args.fully_sharded_loras,
        extra_vocab_size=args.lora_extra_vocab_size,
    )


def refuse_lora_with_speculation(lora: LoraConfig | None, max_num_batched_tokens: int, max_num_seqs: int, k: int) -> None:
    """EngineArgs.create_engine_config: LoRA with speculative decoding needs max_num_seqs x (k + 1) batched tokens."""
    if lora is not None and k > 0 and max_num_batched_tokens < max_num_seqs * (k + 1):
        raise BadInput(
            f"--enable-lora with {k} speculative tokens: vLLM needs --max-num-batched-tokens >= max_num_seqs x (k + 1) = "
            f"{max_num_seqs * (k + 1)}, got {max_num_batched_tokens}; raise it or lower --num-speculative-tokens"
        )
