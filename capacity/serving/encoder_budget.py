"""`MultiModalBudget` with vLLM 0.33's semantics (vllm/multimodal/encoder_budget.py).

Counts are embedding tokens, not bytes. `enable_cache=False` is how MRV2's profile_run builds it:
no processor cache, so every profiled item is processed afresh; the GPU-side numbers are the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from capacity.errors import BadInput
from capacity.model.spec import Modality, ModelSpec
from capacity.serving.config import ServingConfig
from capacity.units import cdiv


def video_frames(modality: Modality, max_model_len: int) -> int:
    """Qwen2-VL rule: the most frames (<= cap) whose tokens fit max_model_len, at least 1."""
    assert modality.frame_pair_tokens is not None and modality.max_frames is not None
    frames = 0
    n = 1
    while cdiv(n, 2) * modality.frame_pair_tokens <= max_model_len and n <= modality.max_frames:
        frames = n
        n += 1
    return max(frames, 1)


def max_tokens_per_item(modality: Modality, max_model_len: int, image_tokens: int = 0) -> int:
    """Embeddings of one max-size item (vLLM: get_mm_max_toks_per_item with one item per modality).

    `image_tokens`: the largest image's tokens when the dummy inputs hold one image beside this item (InternVL's
    videos take what the sequence leaves after it)."""
    if modality.sized_by_max_model_len:
        return max_model_len
    if modality.frame_tokens is not None:
        # InternVL get_num_frames_with_most_features: (seq_len - max image tokens x images) // tokens per frame, >= 1
        return max((max_model_len - image_tokens) // modality.frame_tokens, 1) * modality.frame_tokens
    if modality.tokens_by_frames:
        # Glm4vProcessingInfo._get_max_video_frames: the frame count with the most tokens within the rest of the
        # sequence (1 when none fits); the dummy video holds at least 2 frames
        fits = [t for t in modality.tokens_by_frames if 0 < t <= max_model_len - image_tokens]
        return max(fits) if fits else modality.tokens_by_frames[1]
    if modality.frame_pair_tokens is None:
        return modality.max_tokens_per_item
    # Frames are padded to pairs (temporal patch 2): tokens = ceil(frames / 2) * tokens per pair.
    return cdiv(video_frames(modality, max_model_len), 2) * modality.frame_pair_tokens


def tokens_per_item(modalities: list[Modality], max_model_len: int) -> dict[str, int]:
    """Each modality's max-size item tokens as the budget counts them (vLLM: get_mm_max_toks_per_item): the dummy
    inputs hold one item of every modality given (mm_counts 1 each), so a video shares the sequence with an image."""
    image = next((m for m in modalities if m.name == "image"), None)
    image_tokens = max_tokens_per_item(image, max_model_len) if image is not None else 0
    return {m.name: max_tokens_per_item(m, max_model_len, image_tokens if m is not image else 0) for m in modalities}


@dataclass(frozen=True)
class MultiModalBudget:
    enable_cache: bool
    allowed_limits: dict[str, int]  # per prompt, after the model's supported limits
    max_tokens_per_item: dict[str, int]  # tower modalities only
    encoder_compute_budget: int  # vLLM: max(max_num_encoder_input_tokens, M)
    encoder_cache_size: int  # vLLM: max(encoder_cache_size, M)
    max_items_per_prompt: dict[str, int]
    max_items_per_batch: dict[str, int]
    modality_with_max_tokens: str | None
    chunked_mm_input_error: str | None  # the ValueError vLLM raises, if any
    # Tokens of the item profile_run encodes: get_dummy_encoder_profile_inputs builds it alone (mm_counts = {modality: 1}),
    # which gives an InternVL video the whole sequence, more than its budget figure. 0 = max_tokens_per_item's.
    profile_item_tokens: int = 0

    @property
    def encoder_budget(self) -> int:
        """vLLM: get_encoder_budget = min(compute budget, cache size)."""
        return min(self.encoder_compute_budget, self.encoder_cache_size)

    @property
    def profile_items(self) -> int:
        """Items MRV2's profile_run pushes through the encoder (get_dummy_encoder_profile_inputs)."""
        if self.encoder_budget <= 0 or self.modality_with_max_tokens is None:
            return 0
        return self.max_items_per_batch[self.modality_with_max_tokens]

    @property
    def profile_tokens_per_item(self) -> int:
        """Tokens of the one item profile_run encodes max_items_per_batch times."""
        if self.modality_with_max_tokens is None:
            return 0
        return self.profile_item_tokens or self.max_tokens_per_item[self.modality_with_max_tokens]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["encoder_budget"] = self.encoder_budget
        out["profile_items"] = self.profile_items
        return out


def allowed_limit(modality: Modality, serving: ServingConfig) -> int:
    """min(user --limit-mm-per-prompt (default 999), the model's supported limit)."""
    user = serving.limit_mm_per_prompt.get(modality.name, 999)
    return user if modality.supported_limit is None else min(user, modality.supported_limit)


def build_budget(spec: ModelSpec, serving: ServingConfig, *, enable_cache: bool = False) -> MultiModalBudget:
    """MultiModalBudget(vllm_config, mm_registry, enable_cache=...) for this model and these knobs."""
    allowed = {m.name: allowed_limit(m, serving) for m in spec.modalities}
    tower = [m for m in spec.modalities if allowed[m.name] > 0]
    unmodelled = [m for m in tower if m.unmodelled]
    if unmodelled:  # resolve_serving refuses these first; a budget is never built from a modality not counted
        raise BadInput(f"{spec.name}: {unmodelled[0].unmodelled}; plan with --limit-mm-per-prompt {unmodelled[0].name}=0")
    tokens = tokens_per_item(tower, serving.max_model_len)
    mnbt = serving.max_num_batched_tokens
    # compute_mm_encoder_budget: both scheduler fields equal max_num_batched_tokens in 0.33.
    largest = max(tokens.values(), default=0)
    error = None
    if largest == 0:
        compute_budget = cache_size = 0
    else:
        if serving.disable_chunked_mm_input and largest > mnbt:
            error = (
                f"Chunked MM input disabled but max_tokens_per_mm_item ({largest}) is larger than "
                f"max_num_batched_tokens ({mnbt}). Please increase max_num_batched_tokens."
            )
        compute_budget = max(mnbt, largest)
        cache_size = max(mnbt, largest)
    encoder_budget = min(compute_budget, cache_size)
    per_prompt: dict[str, int] = {}
    per_batch: dict[str, int] = {}
    for m in tower:
        t = tokens[m.name]
        if t == 0 or encoder_budget == 0:
            per_prompt[m.name], per_batch[m.name] = 0, 0
            continue
        # vLLM: MultiModalBudget._get_max_items
        enc_items = encoder_budget // t
        prompt_items = max(1, min(allowed[m.name], serving.max_model_len // t))
        reqs = serving.max_num_seqs
        if not serving.enable_chunked_prefill:
            reqs = min(reqs, mnbt // t)
        per_prompt[m.name] = prompt_items
        per_batch[m.name] = max(1, min(enc_items, reqs * prompt_items))
    # get_modality_with_max_tokens: largest T, ties broken by the larger modality name.
    top = max(tokens.items(), key=lambda kv: (kv[1], kv[0]))[0] if tokens else None
    profiled = next(m for m in tower if m.name == top) if top is not None else None
    return MultiModalBudget(
        enable_cache=enable_cache,
        allowed_limits=allowed,
        max_tokens_per_item=tokens,
        encoder_compute_budget=compute_budget,
        encoder_cache_size=cache_size,
        max_items_per_prompt=per_prompt,
        max_items_per_batch=per_batch,
        modality_with_max_tokens=top,
        chunked_mm_input_error=error,
        profile_item_tokens=max_tokens_per_item(profiled, serving.max_model_len) if profiled is not None else 0,
    )
