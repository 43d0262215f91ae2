"""One tensor-parallel rank's shard of a model, laid out as vLLM 0.33's parallel layers lay it out.

The model is built on the meta device (the same architecture builders as a single-GPU profile), its
nn.Linear / nn.Embedding modules are replaced by role, found by name per family, and only then is the rank's
shard materialised on its device:

- column-parallel (`ColumnParallelLinear`, `QKVParallelLinear`, `MergedColumnParallelLinear`): q/k/v, gate/up,
  fc1: the output features divided by TP (bias with them); a K/V projection with fewer KV heads than ranks
  keeps one head (`QKVParallelLinear`: num_kv_heads = max(1, total // tp));
- row-parallel (`RowParallelLinear`): o/out_proj/down/fc2: the input features divided, the bias whole (added on
  rank 0 only, as vLLM does), then an all-reduce of the output;
- vocab-parallel embedding (`VocabParallelEmbedding`): `pad_vocab_size(vocab, 64) / tp` rows, ids outside the
  rank's range masked to zero, then an all-reduce;
- LM head (`ParallelLMHead` + `LogitsProcessor._gather_logits`): the rank's rows, logits all-gathered over the
  ranks and cut to the vocabulary (`logits[..., :org_vocab_size]`); a head tied to an embedding uses that
  embedding's weight as it is on the rank (Whisper: a whole `nn.Embedding`, so every rank computes all logits
  and the all-gather returns TP copies, as in vLLM 0.33);
- the multimodal encoder: sharded like the decoder with `--mm-encoder-tp-mode weights` (vLLM's default), whole
  on every rank with `data` where the family supports it (vLLM falls back to `weights` otherwise).

Attention modules whose forward reads a head count (not `-1`) get it divided (`num_heads`, ViT-style
`num_attention_heads` / `all_head_size`), and `num_key_value_groups` recomputed for the rank.
No module-level torch import: torch is imported inside the functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from capacity.errors import BadInput
from capacity.kv.specs import kv_heads_per_rank
from capacity.model.shard_rules import ShardRules
from capacity.weights.parallel_layers import pad_vocab_size

if TYPE_CHECKING:
    import torch
    from torch import nn

    from capacity.model.family import Family

ENCODER_TP_MODES = ("weights", "data")


class Collectives(Protocol):
    """The collectives a shard needs: torch.distributed on one group (NCCL on GPUs, gloo on CPUs)."""

    rank: int
    world_size: int

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor: ...
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor: ...


class TorchCollectives:
    """torch.distributed's default group, or `group` (a TP group of a TP x PP run); all-gather as vLLM's
    GroupCoordinator.all_gather lays it out. `rank` is the rank within the group."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        self.dist.all_reduce(tensor, group=self.group)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Gather along the last dimension: a (world, *shape) buffer, then moved to the last dim (one copy)."""
        import torch

        out = torch.empty((self.world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
        if self.backend == "nccl":
            self.dist.all_gather_into_tensor(out, tensor.contiguous(), group=self.group)
        else:
            self.dist.all_gather(list(out.unbind(0)), tensor.contiguous(), group=self.group)
        return out.movedim(0, -2).reshape(*tensor.shape[:-1], self.world_size * tensor.shape[-1])


def shard_rules(family: Family) -> ShardRules:
    """The family's `tensor_parallel_rules`; a family without them is refused in one line."""
    rules = family.tensor_parallel_rules
    if rules is None:
        from capacity.model.family import all_families

        sharded = ", ".join(f.name for f in all_families() if f.tensor_parallel_rules is not None)
        raise BadInput(
            f"tensor-parallel profiling of {family.name} is not implemented (sharded families: {sharded}); "
            "plan it with --tensor-parallel-size (arithmetic), or profile it at TP 1"
        )
    return rules


def encoder_whole(rules: ShardRules, mode: str) -> bool:
    """vLLM: --mm-encoder-tp-mode data replicates the encoder where the model supports it, else falls back to weights."""
    if mode not in ENCODER_TP_MODES:
        raise BadInput(f"--mm-encoder-tp-mode {mode!r}: use weights or data")
    return mode == "data" and rules.encoder_data_parallel


def split(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise BadInput(f"{what} ({n}) is not divisible by --tensor-parallel-size {tp}; vLLM refuses it too")
    return n // tp


# --- the parallel modules (built on meta, materialised later) ----------------------------------------------


def _parallel_modules() -> dict[str, type]:
    """The module classes, defined on first use so that importing this file needs no torch."""
    if _CLASSES:
        return _CLASSES
    import torch
    import torch.nn.functional as F
    from torch import nn

    class ColumnParallelLinear(nn.Linear):
        """nn.Linear holding the rank's output features; its output stays split (or is gathered)."""

        def __init__(self, source: nn.Linear, out_features: int, comm: Collectives, gather: bool) -> None:
            nn.Module.__init__(self)
            self.in_features, self.out_features = source.in_features, out_features
            dtype = source.weight.dtype
            self.weight = nn.Parameter(torch.empty(out_features, source.in_features, device="meta", dtype=dtype), requires_grad=False)
            self.bias = None if source.bias is None else nn.Parameter(torch.empty(out_features, device="meta", dtype=dtype), requires_grad=False)
            self.comm, self.gather = comm, gather

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = F.linear(x, self.weight, self.bias)
            return self.comm.all_gather(out) if self.gather else out

    class RowParallelLinear(nn.Module):
        """The rank's input features; bias added on rank 0 before the all-reduce (vLLM RowParallelLinear)."""

        def __init__(self, source: nn.Linear, in_features: int, comm: Collectives) -> None:
            super().__init__()
            self.in_features, self.out_features = in_features, source.out_features
            dtype = source.weight.dtype
            self.weight = nn.Parameter(torch.empty(source.out_features, in_features, device="meta", dtype=dtype), requires_grad=False)
            self.bias = None if source.bias is None else nn.Parameter(torch.empty(source.out_features, device="meta", dtype=dtype), requires_grad=False)
            self.comm = comm

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = F.linear(x, self.weight, self.bias if self.comm.rank == 0 else None)
            return self.comm.all_reduce(out)

    class VocabParallelEmbedding(nn.Module):
        """pad_vocab_size(vocab) / tp rows; ids outside [start, end) give zeros, then an all-reduce."""

        def __init__(self, source: nn.Embedding, comm: Collectives) -> None:
            super().__init__()
            self.org_vocab_size = source.num_embeddings
            self.rows = split(pad_vocab_size(source.num_embeddings), comm.world_size, "the padded vocabulary")
            self.start = comm.rank * self.rows
            self.embedding_dim = source.embedding_dim
            self.padding_idx = None
            self.weight = nn.Parameter(torch.empty(self.rows, source.embedding_dim, device="meta", dtype=source.weight.dtype), requires_grad=False)
            self.embed_scale = getattr(source, "embed_scale", None)  # BartScaledWordEmbedding multiplies its output
            self.comm = comm

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            outside = (ids < self.start) | (ids >= self.start + self.rows)
            local = (ids - self.start).masked_fill_(outside, 0)
            out = F.embedding(local, self.weight)
            out.masked_fill_(outside.unsqueeze(-1), 0)
            out = self.comm.all_reduce(out)
            return out * self.embed_scale if self.embed_scale is not None else out

    class ParallelLMHead(nn.Module):
        """The rank's rows (or a tied embedding's weight as the rank holds it); logits all-gathered, cut to the vocabulary."""

        def __init__(self, source: nn.Linear, comm: Collectives, tied: nn.Parameter | None) -> None:
            super().__init__()
            self.org_vocab_size = source.out_features
            if tied is not None:
                self.weight = tied
            else:
                rows = split(pad_vocab_size(source.out_features), comm.world_size, "the padded vocabulary")
                self.weight = nn.Parameter(torch.empty(rows, source.in_features, device="meta", dtype=source.weight.dtype), requires_grad=False)
            self.bias = None
            self.comm = comm

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            logits = self.comm.all_gather(F.linear(hidden, self.weight))
            return logits[..., : self.org_vocab_size]

    _CLASSES.update(
        column=ColumnParallelLinear, row=RowParallelLinear, vocab_embedding=VocabParallelEmbedding, lm_head=ParallelLMHead
    )
    return _CLASSES


_CLASSES: dict[str, type] = {}


@dataclass(frozen=True)
class ShardReport:
    """What the sharding did, for the profile's notes."""

    replaced: dict[str, int]  # role -> modules replaced
    replicated_kv_heads: bool
    encoder_whole: bool

    def describe(self) -> str:
        parts = ", ".join(f"{n} {role.replace('_', ' ')}" for role, n in sorted(self.replaced.items()))
        extra = "; KV heads replicated (fewer than ranks)" if self.replicated_kv_heads else ""
        enc = "; multimodal encoder whole on every rank (mm_encoder_tp_mode data)" if self.encoder_whole else ""
        return f"sharded as vLLM's parallel layers: {parts}{extra}{enc}"


def shard_module(model: nn.Module, rules: ShardRules, comm: Collectives, *, whole_encoder: bool = False) -> ShardReport:
    """Replace the model's layers (on the meta device) by this rank's parallel layers, in place."""
    from torch import nn

    classes = _parallel_modules()
    tp = comm.world_size
    named = dict(model.named_modules())
    replaced: dict[str, int] = {}
    replicated = False
    new_embeddings: dict[int, nn.Parameter] = {}  # id(old embedding weight) -> the rank's weight
    lm_heads: list[tuple[str, nn.Linear]] = []
    for name, module in list(named.items()):
        role = rules.role(name, whole_encoder)
        if role is None:
            continue
        if role == "lm_head":
            lm_heads.append((name, module))  # after the embeddings: a tied head takes the embedding's new weight
            continue
        if role in ("column", "gathered_column") and isinstance(module, nn.Linear):
            out = module.out_features
            if re.search(rules.kv_projection, name):
                out, rep = _kv_out_features(named, name, module, tp)
                replicated |= rep
            else:
                out = split(out, tp, f"{name} output features")
            new = classes["column"](module, out, comm, gather=role == "gathered_column")
        elif role == "row" and isinstance(module, nn.Linear):
            new = classes["row"](module, split(module.in_features, tp, f"{name} input features"), comm)
        elif role == "vocab_embedding" and isinstance(module, nn.Embedding):
            new = classes["vocab_embedding"](module, comm)
            new_embeddings[id(module.weight)] = new.weight
        else:
            continue
        _set_module(model, name, new)
        replaced[role] = replaced.get(role, 0) + 1
    for name, module in lm_heads:
        tied = new_embeddings.get(id(module.weight))
        if tied is None and any(module.weight is p for n, p in model.named_parameters(remove_duplicate=False) if not n.startswith(name + ".")):
            tied = module.weight  # tied to an embedding vLLM keeps whole (Whisper)
        _set_module(model, name, classes["lm_head"](module, comm, tied))
        replaced["lm_head"] = replaced.get("lm_head", 0) + 1
    _divide_head_counts(model, tp, whole_encoder, rules)
    return ShardReport(replaced, replicated, whole_encoder)


def _kv_out_features(named: dict[str, Any], name: str, module: Any, tp: int) -> tuple[int, bool]:
    """A K/V projection's per-rank width: max(1, kv_heads // tp) heads (vLLM QKVParallelLinear)."""
    parent = named.get(name.rsplit(".", 1)[0])
    head_dim = getattr(parent, "head_dim", None)
    if not head_dim:
        return split(module.out_features, tp, f"{name} output features"), False
    total = module.out_features // head_dim
    if (total >= tp and total % tp) or (total < tp and tp % total):  # vLLM QKVParallelLinear asserts the same
        raise BadInput(f"{name}: {total} KV heads and TP {tp}: vLLM needs one to divide the other")
    return kv_heads_per_rank(total, tp) * head_dim, total < tp


def _divide_head_counts(model: Any, tp: int, whole_encoder: bool, rules: ShardRules) -> None:
    """Attention modules that reshape with their head count (not -1): the rank's heads."""
    for name, module in model.named_modules():
        if not type(module).__name__.endswith(("Attention", "SelfAttention")):
            continue
        if whole_encoder and rules.encoder and re.search(rules.encoder, name + "."):
            continue
        for attr in ("num_heads", "num_attention_heads", "all_head_size"):  # ViT-style modules reshape with these
            value = getattr(module, attr, None)
            if isinstance(value, int) and value % tp == 0:
                setattr(module, attr, value // tp)
        kv = getattr(module, "num_key_value_heads", None)
        if isinstance(kv, int):
            module.num_key_value_heads = kv_heads_per_rank(kv, tp)
        groups = getattr(module, "num_key_value_groups", None)
        config = getattr(module, "config", None)
        if isinstance(groups, int) and config is not None and getattr(config, "num_key_value_heads", None):
            q_rank = config.num_attention_heads // tp
            module.num_key_value_groups = q_rank // kv_heads_per_rank(config.num_key_value_heads, tp)


def _set_module(model: Any, name: str, new: Any) -> None:
    parent_name, _, leaf = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, leaf, new)


def materialize(model: nn.Module, device: str) -> int:
    """Allocate the meta parameters on `device` (uninitialised; the caller randomises them), tied ones once.
    Buffers were built on the host with their values and are moved. Returns the parameter bytes allocated."""
    import torch
    from torch import nn

    done: dict[int, nn.Parameter] = {}
    allocated = 0
    for module in model.modules():
        for key, param in list(module._parameters.items()):
            if param is None:
                continue
            if id(param) not in done:
                tensor = torch.empty(param.shape, dtype=param.dtype, device=device) if param.is_meta else param.data.to(device)
                done[id(param)] = nn.Parameter(tensor, requires_grad=False)
                allocated += tensor.numel() * tensor.element_size()
            module._parameters[key] = done[id(param)]
        for key, buf in list(module._buffers.items()):
            if buf is not None:
                module._buffers[key] = torch.empty(buf.shape, dtype=buf.dtype, device=device) if buf.is_meta else buf.to(device)
    return allocated


def build_on_meta_with_host_buffers(build: Any) -> Any:
    """Run `build()` (an architecture builder on the host, uninitialised) with every parameter moved to the meta
    device as it is registered: no parameter memory, while buffers (RoPE frequencies, fixed tables) keep values."""
    import torch
    from torch import nn

    original = nn.Module.register_parameter

    def register_parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(self, name, param)
        if param is not None and not param.is_meta:
            self._parameters[name] = nn.Parameter(param.data.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
    try:
        with torch.device("cpu"):
            return build()
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]
