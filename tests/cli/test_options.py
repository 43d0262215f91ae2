"""The serving knobs are declared once (capacity.cli.options.SERVING_OPTIONS) and given to each command by
`serving_options`: one option per ServingArgs field, collected into the dict the command receives."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any, get_args

import pytest

from capacity.cli.options import SERVING_OPTIONS, Knobs, ModelOpt, serving_options
from capacity.serving.config import ServingArgs


def test_one_option_per_serving_args_field():
    assert sorted(SERVING_OPTIONS) == sorted(f.name for f in fields(ServingArgs))


def test_the_knobs_stand_where_the_command_says_and_reach_it_as_one_dict():
    @serving_options("block_size", "dtype", "revision", helps={"dtype": "Another help."})
    def command(*, model: ModelOpt = None, knobs: Knobs, steps: int = 3) -> dict[str, Any]:
        return {"model": model, "steps": steps, **knobs}

    params = inspect.signature(command).parameters
    assert list(params) == ["model", "revision", "block_size", "dtype", "steps", "no_cache"]  # --no-cache closes every such command
    assert get_args(params["dtype"].annotation)[1].help == "Another help."
    assert get_args(SERVING_OPTIONS["dtype"])[1].help != "Another help."  # the table keeps its own help
    got = command(model="m", revision=None, block_size=32, dtype=None, steps=1)
    assert got == {"model": "m", "steps": 1, "block_size": 32, "dtype": None, "revision": None}


def test_no_cache_leaves_the_disk_cache_out_for_the_command_only():
    from capacity import disk_cache

    @serving_options("dtype")
    def command(*, knobs: Knobs) -> object:
        return disk_cache.root()

    assert command(dtype=None, no_cache=True) is None
    assert command(dtype=None) is not None
    assert disk_cache.root() is not None


def test_an_unknown_knob_is_refused():
    with pytest.raises(ValueError, match="not serving knobs: max_len"):
        serving_options("max_len")
