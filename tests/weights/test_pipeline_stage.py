"""The tensors one pipeline stage loads (capacity/weights/pipeline_stage.py) and their bytes per rank, worked out by
hand from vLLM 0.33's llama.py (embedding first, and last when tied; final norm and LM head last; make_layers'
[start, end)) and its parallel layers (VocabParallelEmbedding pads the vocabulary to 64, then / TP)."""

from __future__ import annotations

import pytest

from capacity.errors import BadInput
from capacity.serving.pipeline import pipeline_stages
from capacity.weights.parallel_layers import Parallelism, WeightLayout
from capacity.weights.per_rank import weights_per_rank
from capacity.weights.pipeline_stage import StageSlice, stage_tensors
from capacity.weights.stored_tensor import MODEL_DTYPE, StoredTensor


def t(name: str, *shape: int) -> StoredTensor:
    return StoredTensor(name, tuple(shape), MODEL_DTYPE)


# Llama-like: hidden 64, 4 query heads and 2 KV heads of 16, FFN 128, vocab 100, 4 layers.
LLAMA = WeightLayout(num_attention_heads=4, num_kv_heads=2, head_size=16)
LAYERS = 4


def _layer(i: int) -> list[StoredTensor]:
    p = f"model.layers.{i}."
    return [
        t(p + "input_layernorm.weight", 64),
        t(p + "self_attn.q_proj.weight", 64, 64),
        t(p + "self_attn.k_proj.weight", 32, 64),
        t(p + "self_attn.v_proj.weight", 32, 64),
        t(p + "self_attn.o_proj.weight", 64, 64),
        t(p + "post_attention_layernorm.weight", 64),
        t(p + "mlp.gate_proj.weight", 128, 64),
        t(p + "mlp.up_proj.weight", 128, 64),
        t(p + "mlp.down_proj.weight", 64, 128),
    ]


BODY = [x for i in range(LAYERS) for x in _layer(i)]
UNTIED = [t("model.embed_tokens.weight", 100, 64), *BODY, t("model.norm.weight", 64), t("lm_head.weight", 100, 64)]
TIED = [t("model.embed_tokens.weight", 100, 64), *BODY, t("model.norm.weight", 64)]  # a tied checkpoint stores no head

# One layer at TP 1: 64 + 64*64 + 2*32*64 + 64*64 + 64 + 3*128*64 = 36,992 parameters x 2 B = 73,984 B.
# At TP 2: norms whole (2 x 64), q 32 rows, k and v 16 rows each, o 32 columns, gate and up 64 rows each, down 64
# columns: 128 + 2,048 + 2 x 1,024 + 2,048 + 2 x 4,096 + 4,096 = 18,560 parameters = 37,120 B.
# Embedding or LM head: 100 rows padded to 128: 128 x 64 x 2 B = 16,384 B at TP 1, 8,192 B at TP 2. Final norm 128 B.
LAYER_TP1, LAYER_TP2, VOCAB_TP1, VOCAB_TP2, NORM = 73_984, 37_120, 16_384, 8_192, 128


def _stage_bytes(tensors: list[StoredTensor], pp: int, tp: int, tied: bool = False) -> list[int]:
    layout = WeightLayout(num_attention_heads=4, num_kv_heads=2, head_size=16, tie_word_embeddings=tied)
    out = []
    for stage in pipeline_stages(LAYERS, pp):
        placed = stage_tensors(tensors, stage.weights_slice(LAYERS, tied))
        out.append(weights_per_rank(placed, layout, Parallelism(tp, dtype_bytes=2)).total_bytes)
    return out


def test_pp2_embedding_on_the_first_stage_norm_and_head_on_the_last() -> None:
    assert _stage_bytes(UNTIED, 2, 1) == [VOCAB_TP1 + 2 * LAYER_TP1, 2 * LAYER_TP1 + NORM + VOCAB_TP1]  # 164,352 and 164,480
    assert _stage_bytes(UNTIED, 2, 2) == [VOCAB_TP2 + 2 * LAYER_TP2, 2 * LAYER_TP2 + NORM + VOCAB_TP2]  # 82,432 and 82,560


def test_pp3_middle_stage_holds_only_its_layers() -> None:
    # 4 layers at PP 3: [1, 2, 1] (the remainder on the second-to-last stage)
    assert _stage_bytes(UNTIED, 3, 1) == [VOCAB_TP1 + LAYER_TP1, 2 * LAYER_TP1, LAYER_TP1 + NORM + VOCAB_TP1]


def test_tied_embeddings_are_built_on_the_first_and_the_last_stage() -> None:
    # llama.py builds embed_tokens where is_first_rank or (tie_word_embeddings and is_last_rank): at PP 2 both stages
    # hold the matrix; at PP 1 it is held once.
    assert _stage_bytes(TIED, 2, 1, tied=True) == [VOCAB_TP1 + 2 * LAYER_TP1, 2 * LAYER_TP1 + NORM + VOCAB_TP1]
    assert _stage_bytes(TIED, 1, 1, tied=True) == [VOCAB_TP1 + 4 * LAYER_TP1 + NORM]
    # an explicitly stored tied head adds nothing on the last stage (tie_weights)
    with_head = [*TIED, t("lm_head.weight", 100, 64)]
    assert _stage_bytes(with_head, 2, 1, tied=True) == [VOCAB_TP1 + 2 * LAYER_TP1, 2 * LAYER_TP1 + NORM + VOCAB_TP1]


def test_the_stages_add_up_to_the_whole_model_plus_the_repeated_embedding() -> None:
    whole = weights_per_rank(UNTIED, LLAMA, Parallelism(1, dtype_bytes=2)).total_bytes
    assert sum(_stage_bytes(UNTIED, 2, 1)) == whole == 4 * LAYER_TP1 + NORM + 2 * VOCAB_TP1


def test_multimodal_wrapper_prefixes_are_placed() -> None:
    stage = StageSlice(0, 1, 2, first=True, last=False)
    names = ["model.language_model.embed_tokens.weight", "model.language_model.layers.0.mlp.up_proj.weight", "language_model.model.layers.1.mlp.up_proj.weight"]
    assert [x.name for x in stage_tensors([t(n, 4, 4) for n in names], stage)] == names[:2]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "not modelled"),  # a tower the slice was not told of
        ("model.layers.4.mlp.up_proj.weight", "decoder layer 4 is past the model's 4 layers"),  # e.g. an MTP layer
    ],
)
def test_a_tensor_no_rule_places_is_refused_in_one_line(name: str, says: str) -> None:
    with pytest.raises(BadInput) as err:
        stage_tensors([t(name, 4, 4)], StageSlice(0, 2, LAYERS, first=True, last=False))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_towers_are_built_on_the_stage_that_builds_them_and_bare_parameters_on_every_stage() -> None:
    # MRV2: _mark_tower_model's modules on the first stage only; a bare nn.Parameter assigned there (LLaVA-NeXT's
    # image_newline) is not replaced by its module hook, so every stage keeps it
    names = ["model.vision_tower.encoder.layers.0.mlp.fc1.weight", "model.multi_modal_projector.linear_1.weight", "model.image_newline"]
    towers, every = ("vision_tower", "multi_modal_projector"), ("image_newline",)
    first = StageSlice(0, 2, LAYERS, first=True, last=False, towers=towers, builds_towers=True, every_stage=every)
    later = StageSlice(2, 4, LAYERS, first=False, last=True, towers=towers, builds_towers=False, every_stage=every)
    tensors = [t(n, 4, 4) for n in names]
    assert [x.name for x in stage_tensors(tensors, first)] == names
    assert [x.name for x in stage_tensors(tensors, later)] == ["model.image_newline"]
