"""The profiler's encoder item and module parts across what transformers' layouts and installs give."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from capacity.errors import BadInput
from capacity.model.families.qwen2_5_omni import thinker_text, thinker_visual
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from profilers.run import profiled_item


class NoTorchvision:
    name = "generic"

    def encoder_input(self, *args: object) -> None:
        raise ImportError("Lfm2VlImageProcessor requires the Torchvision library")


def test_an_item_the_family_cannot_build_is_refused_in_one_line() -> None:
    spec = plan_for("Qwen/Qwen2.5-VL-3B-Instruct", ServingArgs(), "H200").spec
    with pytest.raises(BadInput, match="not implemented yet here: the generic family cannot build its 256-token item .ImportError: Lfm2Vl"):
        profiled_item(NoTorchvision(), spec, None, "cpu", None, 256)  # type: ignore[arg-type]


def test_the_thinkers_parts_are_read_in_both_transformers_layouts() -> None:
    tower, text = object(), object()
    # transformers 5.17: thinker.visual, thinker.model is the text model
    old = SimpleNamespace(visual=tower, model=text)
    assert thinker_visual(old) is tower and thinker_text(old) is text
    # later 5.x: thinker.model holds both
    new = SimpleNamespace(model=SimpleNamespace(visual=tower, language_model=text))
    assert thinker_visual(new) is tower and thinker_text(new) is text
