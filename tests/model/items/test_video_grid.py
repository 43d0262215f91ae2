"""The dummy video's video_grid_thw for Qwen-VL-style towers: the grid has exactly the tokens the plan counts."""

from __future__ import annotations

import json

import pytest

from capacity.model.hf_config import materialized
from capacity.model.items.video_grid import video_grid
from tests.support.paths import REPO_ROOT

MODELS = REPO_ROOT / "capacity" / "source" / "catalog" / "models"


def files(folder: str) -> tuple[dict, dict | None, dict | None]:
    def read(name: str) -> dict | None:
        path = MODELS / folder / name
        return json.loads(path.read_text()) if path.exists() else None

    config = read("config.json")
    assert config is not None
    return config, read("preprocessor_config.json"), read("video_preprocessor_config.json")


def test_glm41v_video_is_six_frame_pairs_of_2044_px():
    """Issue 26's 31,974-token item: 6 frame pairs of 146 x 146 patches (2,044 px at 14 px), merged 2 x 2:
    6 x 146 x 146 / 4 = 6 x 5,329 = 31,974 tokens."""
    config, pre, video = files("zai-org--GLM-4.1V-9B-Thinking")
    vision = materialized(config)["vision_config"]
    assert video_grid("glm4v", vision, pre, video, 31_974) == (6, 146, 146)


def test_qwen2_vl_video_is_frame_pairs_of_the_largest_image():
    """olmOCR-7B-0225 (Qwen2-VL): the largest image is 128 x 128 merged tokens (3,584 px at 28 px per merged
    patch, max_pixels 12,845,056); a 32,768-token video is 32,768 / 16,384 = 2 frame pairs of 256 x 256 patches."""
    config, pre, video = files("allenai--olmOCR-7B-0225-preview")
    vision = materialized(config)["vision_config"]
    assert video_grid("qwen2_vl", vision, pre, video, 32_768) == (2, 256, 256)


def test_a_token_count_no_dummy_video_has_is_refused():
    config, pre, video = files("zai-org--GLM-4.1V-9B-Thinking")
    vision = materialized(config)["vision_config"]
    with pytest.raises(LookupError, match="no GLM-4.1V dummy video of 1 to 600 frames has 31975 tokens"):
        video_grid("glm4v", vision, pre, video, 31_975)
    with pytest.raises(LookupError, match="no Qwen-VL-style video rule"):
        video_grid("llava", vision, pre, video, 100)
