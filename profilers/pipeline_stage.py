"""One pipeline stage of a decoder-only text model in the profiler, and the intermediate tensors between stages.

A rank at pipeline rank p builds only its stage (capacity/serving/pipeline.py: vLLM 0.33's get_pp_indices): decoder
layers [start, end); the embedding on the first stage (and on the last when the LM head is tied to it, llama.py);
the final norm and the LM head on the last. Between stages it passes vLLM's IntermediateTensors of Llama and its
kin, {"hidden_states", "residual"}, each [tokens, hidden] in the model dtype:

- every stage but the first holds the receive buffer for good (GPUModelRunner.load_model:
  `make_empty_intermediate_tensors(batch_size=max_num_tokens)`): [max_num_batched_tokens, hidden] per key;
- a sender sends each key's 1/TP slice to the same TP position on the next stage when the tensor's elements divide
  by TP (GroupCoordinator.isend_tensor_dict with all_gather_group = the TP group), else all of it; the receiver
  receives its slice into its buffer and all-gathers the rest over its TP group (irecv_tensor_dict's postprocess).

transformers' decoder layers keep the residual stream inside hidden_states; vLLM's hand the next layer (mlp output,
residual) to be summed by its input norm. A stage here sends (hidden_states, zeros): the same bytes and the same
sum on the next stage. vLLM's profile run itself sends nothing (each stage profiles its dummy run over its buffer);
the profiler runs the stages in turn over real send/recv, which touches the same buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from capacity.errors import BadInput
from capacity.model.spec import ModelSpec
from capacity.serving.pipeline import StageLayers

INTERMEDIATE_KEYS = ("hidden_states", "residual")  # vLLM llama.py make_empty_intermediate_tensors_factory


def refuse_unstaged(spec: ModelSpec) -> None:
    """Only decoder-only text models are built stage by stage here (one line for the rest)."""
    if spec.family.name != "decoder_only" or spec.is_encoder_decoder:
        raise BadInput(
            f"profiling --pipeline-parallel-size > 1 builds the stages of decoder-only text models (decoder_only family); "
            f"{spec.architecture} ({spec.family.name}) is not one: profile it at --pipeline-parallel-size 1"
        )


def slice_elements(numel: int, tp: int) -> int:
    """The elements one rank sends of a tensor of `numel` (GroupCoordinator._should_use_all_gather: a 1/TP slice
    when numel divides by TP, else the whole tensor)."""
    return numel // tp if numel % tp == 0 else numel


def sent_bytes(tokens: int, hidden_size: int, dtype_bytes: int, tp: int) -> dict[str, int]:
    """Bytes one rank sends per key for a step of `tokens` tokens."""
    return {key: slice_elements(tokens * hidden_size, tp) * dtype_bytes for key in INTERMEDIATE_KEYS}


def keep_stage(model: Any, stage: StageLayers) -> None:
    """Drop (on the meta device, before anything is allocated) what the stage does not build, as vLLM's
    PPMissingLayer leaves it out: other stages' layers, the embedding off the first stage (kept on the last when
    tied: the LM head holds the same parameter), the final norm and LM head off the last."""
    import torch

    text = model.model
    text.layers = torch.nn.ModuleList(list(text.layers)[stage.start : stage.end])
    layer_types = getattr(text.config, "layer_types", None)
    if isinstance(layer_types, list):  # the masks' kinds follow the kept layers
        text.config.layer_types = layer_types[stage.start : stage.end]
    if not stage.first:
        text.embed_tokens = None
    if not stage.last:
        text.norm = torch.nn.Identity()
        model.lm_head = None


@dataclass
class StageTransport:
    """Send / receive of the intermediate tensors over torch.distributed, as vLLM 0.33's PP group does it."""

    rank: int
    tp: int
    tp_position: int
    tp_group: Any  # the torch.distributed group of this rank's TP ranks
    prev_rank: int | None
    next_rank: int | None
    backend: str
    sent: dict[str, int] = field(default_factory=dict)  # bytes this rank sent, per key (the last step)
    received: dict[str, int] = field(default_factory=dict)  # bytes this rank received, per key (the last step)

    def send(self, tensors: dict[str, Any]) -> None:
        import torch.distributed as dist

        assert self.next_rank is not None
        for key in INTERMEDIATE_KEYS:
            t = tensors[key].contiguous()
            part = t.reshape(self.tp, -1)[self.tp_position] if slice_elements(t.numel(), self.tp) != t.numel() else t.reshape(-1)
            dist.send(part, dst=self.next_rank)
            self.sent[key] = part.numel() * part.element_size()

    def receive_into(self, buffers: dict[str, Any]) -> None:
        """Fill the stage's receive buffers (views of its persistent ones, the step's tokens)."""
        import torch.distributed as dist

        assert self.prev_rank is not None
        for key in INTERMEDIATE_KEYS:
            full = buffers[key]
            flat = full.view(-1)
            if slice_elements(flat.numel(), self.tp) == flat.numel():
                dist.recv(flat, src=self.prev_rank)
                self.received[key] = flat.numel() * flat.element_size()
                continue
            parts = flat.view(self.tp, -1)
            dist.recv(parts[self.tp_position], src=self.prev_rank)
            self.received[key] = parts[self.tp_position].numel() * flat.element_size()
            if self.backend == "nccl":
                dist.all_gather_into_tensor(flat, parts[self.tp_position], group=self.tp_group)
            else:
                dist.all_gather(list(parts.unbind(0)), parts[self.tp_position].clone(), group=self.tp_group)


class PipelineStage:
    """What a rank does for its stage: the receive buffers, and the stage's share of a decoder pass."""

    def __init__(self, layers: StageLayers, transport: StageTransport) -> None:
        self.layers = layers
        self.transport = transport
        self.buffers: dict[str, Any] = {}

    def describe(self) -> str:
        s = self.layers
        return f"stage {s.rank} (decoder layers {s.start}-{s.end - 1}{', embedding' if s.first else ''}{', norm + LM head' if s.last else ''})"

    def buffers_detail(self, max_tokens: int, hidden_size: int) -> str:
        return f"{len(INTERMEDIATE_KEYS)} x [{max_tokens}, {hidden_size}] receive buffers ({', '.join(INTERMEDIATE_KEYS)}; vLLM's intermediate_tensors)"

    def allocate_buffers(self, max_tokens: int, hidden_size: int, dtype: Any, device: str) -> None:
        """GPUModelRunner.load_model on a non-first stage: one zeroed [max_num_tokens, hidden] tensor per key."""
        import torch

        if not self.layers.first:
            self.buffers = {key: torch.zeros(max_tokens, hidden_size, dtype=dtype, device=device) for key in INTERMEDIATE_KEYS}

    def decode(self, model: Any, input_ids: Any) -> Any:
        """The stage's layers over `input_ids`' tokens: embedded on the first stage, received from the one before
        elsewhere; sent on to the next stage unless this is the last. Returns the stage's hidden states."""
        import torch

        text = model.model
        reqs, length = input_ids.shape
        tokens = reqs * length
        if self.layers.first:
            hidden = text.embed_tokens(input_ids)
        else:
            views = {key: buf[:tokens] for key, buf in self.buffers.items()}
            self.transport.receive_into(views)
            hidden = (views["hidden_states"] + views["residual"]).view(reqs, length, -1)
            del views
        out = text(inputs_embeds=hidden, use_cache=False).last_hidden_state
        del hidden
        if not self.layers.last:
            self.transport.send({"hidden_states": out, "residual": torch.zeros_like(out)})
        return out
