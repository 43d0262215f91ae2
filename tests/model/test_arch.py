"""Tests for capacity.model.arch: exact parameter counts on the meta device + safetensors headers."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from capacity.model.arch import (
    buffer_bytes,
    dtype_breakdown,
    parameter_bytes,
    parameter_count,
)
from capacity.model.arch.florence2 import is_remote_code_format, to_native_florence2_config
from capacity.model.arch.nemotron_parse import encoder_tokens, radio_config
from capacity.model.family import family_named
from capacity.source.safetensors_header import read_safetensors_header, safetensors_parameter_bytes, safetensors_parameter_count

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

CONFIGS = ROOT / "capacity" / "source" / "catalog" / "models"  # in the repo: the suite means the same from a plain clone

# (family, config file stem, published / native parameter count)
EXPECTED: list[tuple[str, str, int]] = [
    ("whisper", "openai--whisper-tiny", 37_760_640),
    ("whisper", "openai--whisper-small", 241_734_912),
    ("whisper", "openai--whisper-large-v3", 1_543_490_560),
    ("whisper", "openai--whisper-large-v3-turbo", 808_878_080),
    ("mllama", "meta-llama--Llama-3.2-11B-Vision-Instruct", 10_670_220_835),
    ("florence2", "microsoft--Florence-2-large", 770_173_952),
    ("bart", "facebook--bart-large", 406_291_456),
    ("t5", "google-t5--t5-small", 60_506_624),
    ("qwen2_5_vl", "Qwen--Qwen2.5-VL-7B-Instruct", 8_292_166_656),
    ("gemma3", "google--gemma-3-4b-it", 4_300_079_472),
    ("nemotron_parse", "nvidia--NVIDIA-Nemotron-Parse-v1.1", 936_357_888),
    ("nemotron_parse", "nvidia--NVIDIA-Nemotron-Parse-v1.2", 903_131_136),
]


def load_config(stem: str) -> dict[str, Any]:
    folder = CONFIGS / stem  # a catalog entry's folder (config.json and its planning files), or a flat file
    path = folder / "config.json" if folder.is_dir() else CONFIGS / f"{stem}.json"
    data: dict[str, Any] = json.loads(path.read_text())  # a missing file fails, never skips
    return data


@pytest.mark.parametrize(
    ("arch", "stem", "expected"), EXPECTED, ids=[e[1] for e in EXPECTED]
)
def test_parameter_count_meta(arch: str, stem: str, expected: int) -> None:
    import torch

    config = load_config(stem)
    before = json.dumps(config, sort_keys=True)
    model = family_named(arch).build_module(config, device="meta", dtype="bfloat16")
    assert json.dumps(config, sort_keys=True) == before, (
        "config dict must not be mutated"
    )
    assert parameter_count(model) == expected
    assert parameter_bytes(model) == 2 * expected
    assert all(p.device.type == "meta" for p in model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert torch.get_default_dtype() == torch.float32, "default dtype must be restored"


def test_dtype_changes_bytes() -> None:
    config = load_config("google-t5--t5-small")
    fp32 = family_named("t5").build_module(config, dtype="float32")
    fp16 = family_named("t5").build_module(config, dtype="fp16")
    assert parameter_count(fp32) == parameter_count(fp16) == 60_506_624
    assert parameter_bytes(fp32) == 4 * 60_506_624
    assert parameter_bytes(fp16) == 2 * 60_506_624
    assert set(dtype_breakdown(fp16)["parameters"]) == {"float16"}


def test_tied_weights_counted_once() -> None:
    bart = family_named("bart").build_module(load_config("facebook--bart-large"))
    assert bart.lm_head.weight is bart.model.shared.weight
    v12 = family_named("nemotron_parse").build_module(load_config("nvidia--NVIDIA-Nemotron-Parse-v1.2"))
    assert v12.lm_head.weight is v12.decoder.embed_tokens.weight
    v11 = family_named("nemotron_parse").build_module(load_config("nvidia--NVIDIA-Nemotron-Parse-v1.1"))
    assert v11.lm_head.weight is not v11.decoder.embed_tokens.weight
    # BART's final_logits_bias is a persistent buffer, not a parameter
    assert buffer_bytes(bart) == 2 * 50265


def test_nemotron_parse_structure() -> None:
    config = load_config("nvidia--NVIDIA-Nemotron-Parse-v1.1")
    rc = radio_config(config)
    assert (rc["hidden_size"], rc["num_hidden_layers"], rc["num_attention_heads"]) == (
        1280,
        32,
        16,
    )
    assert rc["num_cls_tokens"] + rc["num_registers"] == 8
    assert rc["summary_idxs"] == [0, 1, 2]
    model = family_named("nemotron_parse").build_module(config)
    assert type(model.encoder).__name__ == "RadioModel"
    assert set(model.neck.keys()) == {
        "conv1",
        "layer_norm1",
        "conv2",
        "layer_norm2",
        "sum_proj",
        "layer_norm3",
    }
    assert parameter_count(model.decoder.embed_positions) == 0
    assert tuple(model.encoder.embeddings.position_embedding.shape) == (
        1,
        128 * 128,
        1280,
    )
    assert tuple(model.lm_head.weight.shape) == (52352, 1024)
    assert encoder_tokens(config) == 3201
    assert encoder_tokens(load_config("nvidia--NVIDIA-Nemotron-Parse-v1.2")) == 3329


def test_nemotron_parse_tiny_forward_cpu() -> None:
    import torch

    config = {
        "tie_word_embeddings": True,
        "decoder": {
            "d_model": 64,
            "decoder_layers": 1,
            "decoder_attention_heads": 4,
            "decoder_ffn_dim": 128,
            "vocab_size": 100,
        },
        "encoder": {
            "patch_size": 16,
            "args": {
                "model": "vit_tiny_patch16_224",
                "cpe_max_size": 128,
                "register_multiple": 8,
                "cls_token_per_teacher": True,
                "teachers": [{"use_summary": True}] * 3 + [{"use_summary": False}],
            },
        },
    }
    model = family_named("nemotron_parse").build_module(config, device="cpu", dtype="float32").eval()
    with torch.no_grad():
        pixels = torch.randn(2, 3, 64, 128)
        states = model.encode(pixels)
        assert (
            tuple(states.shape)
            == (2, encoder_tokens(config, 64, 128), 64)
            == (2, 4 * 2 + 1, 64)
        )
        logits = model(
            encoder_hidden_states=states,
            decoder_input_ids=torch.tensor([[2, 5, 7], [2, 3, 4]]),
        )
    assert tuple(logits.shape) == (2, 3, 100)
    assert bool(torch.isfinite(logits).all())


def test_florence2_mapping() -> None:
    config = load_config("microsoft--Florence-2-large")
    assert is_remote_code_format(config)
    native = to_native_florence2_config(config)
    assert native["text_config"]["model_type"] == "bart"
    vision = native["vision_config"]
    assert vision["model_type"] == "florence_vision"
    assert vision["embed_dim"] == [256, 512, 1024, 2048]
    assert vision["max_position_embeddings"] == 50
    assert vision["max_temporal_embeddings"] == 100
    assert not is_remote_code_format(native)
    # already-native input is accepted as is
    model = family_named("florence2").build_module(native)
    assert parameter_count(model) == 770_173_952


def test_decoder_only_tiny_llama() -> None:
    h, inter, layers, vocab, heads, kv = 64, 128, 2, 1000, 4, 2
    config = {
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
    }
    model = family_named("decoder_only").build_module(config)
    head_dim = h // heads
    per_layer = h * h * 2 + 2 * h * kv * head_dim + 3 * h * inter + 2 * h
    assert parameter_count(model) == 2 * vocab * h + layers * per_layer + h


def test_unknown_family() -> None:
    from capacity.errors import BadInput

    with pytest.raises(BadInput, match="unknown model family 'nope'"):
        family_named("nope")


def test_no_torch_at_import() -> None:
    code = (
        "import sys; import capacity.model.arch, capacity.model.arch.hf, capacity.model.arch.florence2, "
        "capacity.model.arch.nemotron_parse, capacity.source.safetensors_header; "
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# ---------------------------------------------------------------- safetensors


def _write_safetensors_by_hand(
    path: Path, tensors: dict[str, tuple[str, list[int], int]]
) -> int:
    """Write a valid safetensors file with zero-filled data; returns total data bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, itemsize) in tensors.items():
        n = itemsize
        for d in shape:
            n *= d
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + n],
        }
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


def test_safetensors_single_file(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    save_file(
        {
            "a": np.zeros((3, 4), dtype=np.float32),
            "b": np.zeros((5,), dtype=np.float16),
            "c": np.zeros((2, 2), dtype=np.int64),
        },
        str(tmp_path / "model.safetensors"),
    )
    assert safetensors_parameter_bytes(str(tmp_path)) == 12 * 4 + 5 * 2 + 4 * 8
    assert safetensors_parameter_count(str(tmp_path)) == 12 + 5 + 4
    header = read_safetensors_header(str(tmp_path / "model.safetensors"))
    assert set(header) == {"a", "b", "c"}


def test_safetensors_sharded_index(tmp_path: Path) -> None:
    n1 = _write_safetensors_by_hand(
        tmp_path / "model-00001-of-00002.safetensors",
        {"w1": ("BF16", [16, 8], 2), "w2": ("F32", [8], 4)},
    )
    n2 = _write_safetensors_by_hand(
        tmp_path / "model-00002-of-00002.safetensors", {"w3": ("BF16", [4, 4], 2)}
    )
    # a stray file not referenced by the index must be ignored
    _write_safetensors_by_hand(tmp_path / "extra.safetensors", {"x": ("F32", [100], 4)})
    index = {
        "metadata": {"total_size": n1 + n2},
        "weight_map": {
            "w1": "model-00001-of-00002.safetensors",
            "w2": "model-00001-of-00002.safetensors",
            "w3": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert (
        safetensors_parameter_bytes(str(tmp_path))
        == n1 + n2
        == 16 * 8 * 2 + 8 * 4 + 16 * 2
    )
    assert safetensors_parameter_count(str(tmp_path)) == 128 + 8 + 16


def test_safetensors_no_torch_import() -> None:
    code = (
        "import sys; from capacity.source.safetensors_header import safetensors_parameter_bytes; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
