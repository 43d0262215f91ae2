"""Idefics3 / SmolVLM image tokens by vLLM 0.33's rule (Idefics3ProcessingInfo), without the tokenizer.

vLLM's encoder budget (encoder_budget.get_mm_max_toks_per_item) sums get_num_embeds() of its dummy image's
placeholder: the `<image>` tokens only (PromptUpdateDetails.select_token_id(image_token_id)), i.e.
get_num_image_tokens = max(num_patches, 1) x image_seq_len. The fake-image, <global-img>, <row_i_col_j> and
newline text tokens of the replacement are prompt tokens, not embeddings, and are not counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from capacity.errors import BadInput
from capacity.model.items.idefics3 import idefics3_image_patches
from capacity.model.registry import spec_from_files
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")

ROOT = REPO_ROOT
SMOLVLM = ROOT / "capacity" / "source" / "catalog" / "models" / "HuggingFaceTB--SmolVLM-256M-Instruct"


def smolvlm_files() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The published config, preprocessor and processor configs (source and sha256: capacity/source/catalog/README.md)."""
    return tuple(json.loads((SMOLVLM / f"{name}.json").read_text()) for name in ("config", "preprocessor_config", "processor_config"))  # type: ignore[return-value]


def test_smolvlm_256m_counts_1088_image_embeddings():
    """vLLM's dummy image is a square of max_image_size.longest_edge = 512 (get_dummy_mm_data).
    Resized so its longest edge is size.longest_edge 2048: 2048 x 2048 (below the 4096 cap); in 512-px tiles
    ceil(2048 / 512) = 4 rows x 4 cols = 16 tiles + 1 global image = 17 patches.
    image_seq_len 64 (processor_config.json) = (image_size 512 // patch_size 16)^2 / scale_factor 4^2 = 1024 / 16.
    17 x 64 = 1,088 embeddings per image."""
    config, preprocessor, processor = smolvlm_files()
    spec = spec_from_files(config, "HuggingFaceTB/SmolVLM-256M-Instruct", preprocessor, processor)
    assert spec.family.name == "generic"
    assert [(m.name, m.max_tokens_per_item) for m in spec.modalities] == [("image", 1_088)]
    assert "vLLM rule" in spec.notes[0] and "4 x 4 tiles + 1 global" in spec.notes[0]
    # the tower runs every tile's (512 // 16)^2 = 1,024 patches before the pixel shuffle: 17 x 1,024 = 17,408
    assert spec.encoder is not None and spec.encoder.seq_len == 17_408


def test_unsplit_images_are_one_tile():
    """do_image_splitting false: get_number_of_image_patches gives 0, get_num_patches max(0, 1) = 1: 1 x 64 = 64."""
    config, preprocessor, processor = smolvlm_files()
    spec = spec_from_files(config, "smolvlm", {**preprocessor, "do_image_splitting": False}, processor)
    assert spec.modalities[0].max_tokens_per_item == 64


@pytest.mark.parametrize(
    ("height", "width", "expected"),
    [
        # 300 x 800 -> longest edge 2048: height int(2048 / (800 / 300)) = 768 (even); ceil(768 / 512) = 2 rows,
        # ceil(2048 / 512) = 4 cols: 2 x 4 + 1 = 9
        (300, 800, (9, 2, 4)),
        # 1000 x 333 -> height 2048, width int(2048 x 0.333) = 681, odd -> 682; 4 rows x 2 cols + 1 = 9
        (1000, 333, (9, 4, 2)),
        # 1 x 5000 -> width 2048, height int(2048 / 5000) = 0, raised to min_len 1; 1 row x 4 cols + 1 = 5
        (1, 5000, (5, 1, 4)),
    ],
)
def test_tile_grid_worked_by_hand(height, width, expected):
    assert idefics3_image_patches(height, width, 2048, 512, True) == expected


@pytest.mark.parametrize("shape", [(512, 512), (300, 800), (1000, 333), (1, 5000), (9000, 17), (365, 364), (364, 364)])
@pytest.mark.parametrize(("longest", "tile"), [(2048, 512), (1456, 364), (300, 512), (8192, 512)])
def test_tile_grid_agrees_with_transformers(shape, longest, tile):
    """transformers' Idefics3ImageProcessor.get_number_of_image_patches, the function vLLM calls."""
    from transformers import Idefics3ImageProcessorPil

    kwargs = {"size": {"longest_edge": longest}, "max_image_size": {"longest_edge": tile}}
    expected = Idefics3ImageProcessorPil(**kwargs).get_number_of_image_patches(shape[0], shape[1], kwargs)
    assert idefics3_image_patches(shape[0], shape[1], longest, tile, True) == tuple(expected)


def test_image_seq_len_missing_or_inconsistent_is_refused():
    config, preprocessor, _ = smolvlm_files()
    with pytest.raises(BadInput, match=r"processor_config.json.image_seq_len is None"):
        spec_from_files(config, "smolvlm", preprocessor, None)
    # 169 is Idefics3Processor's class default, not what one 512-px tile yields through this connector (64)
    with pytest.raises(BadInput, match=r"image_seq_len 169 is not .* = 64"):
        spec_from_files(config, "smolvlm", preprocessor, {"image_seq_len": 169})
    with pytest.raises(BadInput, match=r"max_image_size.longest_edge"):
        spec_from_files(config, "smolvlm", {k: v for k, v in preprocessor.items() if k != "max_image_size"}, {"image_seq_len": 64})


def test_cli_plans_smolvlm_with_the_formula_estimate():
    out = subprocess.run(
        [sys.executable, "-m", "capacity.cli", "plan", "--model", "HuggingFaceTB/SmolVLM-256M-Instruct", "--estimate", "formula", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-500:]
    budget = json.loads(out.stdout)["budget"]
    assert budget["max_tokens_per_item"] == {"image": 1_088}
