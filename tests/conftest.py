"""Shared fixtures: catalog model configs and a planner shortcut."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from capacity.gpu.catalog import gpu_by_name
from capacity.model.registry import model_spec
from capacity.model.spec import ModelSpec
from capacity.planning.plan import Plan
from capacity.planning.planner import build_plan
from capacity.serving.config import ServingArgs, resolve_serving
from capacity.source.resolve import ModelSource, resolve_model

GiB = 2**30


@pytest.fixture
def catalog_config() -> Callable[[str], dict[str, Any]]:
    """The raw config.json dict of a catalog model."""

    def load(name: str) -> dict[str, Any]:
        return dict(resolve_model(name).config)

    return load


@pytest.fixture
def spec_of() -> Callable[[str], ModelSpec]:
    def load(name: str) -> ModelSpec:
        source = resolve_model(name)
        return model_spec(source)

    return load


@pytest.fixture(scope="module")
def source(request: pytest.FixtureRequest) -> ModelSource:
    """The model the test module names in its NAME, resolved as --model resolves it."""
    return resolve_model(request.module.NAME)


@pytest.fixture(scope="module")
def spec(source: ModelSource) -> ModelSpec:
    return model_spec(source)


@pytest.fixture
def make_plan() -> Callable[..., Plan]:
    """Plan a catalog model on a catalog GPU with the given knobs (ServingArgs fields)."""

    def plan(model: str, gpu: str = "H200", **knobs: Any) -> Plan:
        source: ModelSource = resolve_model(model)
        spec = model_spec(source)
        target = gpu_by_name(gpu)
        serving = resolve_serving(ServingArgs(**knobs), spec, target)
        return build_plan(source, spec, target, serving)

    return plan


@pytest.fixture(autouse=True)
def estimate_as_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI plans take the default path (the fake-tensor trace) that users run, unless the test (or its module) is
    marked `formula(why)`: then CAPACITY_ESTIMATE=formula, and `why` says what the test checks that the quick
    formulas serve (figures worked by hand on that path, or plumbing no estimate changes)."""
    marker = request.node.get_closest_marker("formula")
    if marker is None:
        monkeypatch.delenv("CAPACITY_ESTIMATE", raising=False)
        return
    if not marker.args or not str(marker.args[0]).strip():
        raise pytest.UsageError(f"{request.node.nodeid}: pytest.mark.formula needs the reason the test plans with the formulas")
    monkeypatch.setenv("CAPACITY_ESTIMATE", "formula")


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One cache folder for the whole run, shared by pytest-xdist's workers (entries are written atomically,
    capacity/disk_cache.py): a model's fake-tensor trace is worked out once per run, not once per worker."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return str(tmp_path_factory.mktemp("capacity-cache"))
    shared = tmp_path_factory.getbasetemp().parent / "capacity-cache"
    shared.mkdir(exist_ok=True)
    return str(shared)


@pytest.fixture(autouse=True)
def fresh_disk_cache(monkeypatch: pytest.MonkeyPatch, session_cache_dir: str) -> None:
    """capacity's disk cache (capacity/disk_cache.py) is one folder for the test session, never the user's: what a
    test finds there was worked out by this code in this session."""
    monkeypatch.setenv("CAPACITY_CACHE_DIR", session_cache_dir)
    monkeypatch.delenv("CAPACITY_NO_CACHE", raising=False)


@pytest.fixture(scope="session")
def empty_hf_hub(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("empty-hf-hub"))


@pytest.fixture(autouse=True)
def no_local_hf_cache(monkeypatch: pytest.MonkeyPatch, empty_hf_hub: str) -> None:
    """The machine's Hugging Face caches are not read: a test means the same as on a plain clone (a test that needs a
    cache sets HF_HOME / HF_HUB_CACHE to its own folder)."""
    monkeypatch.setenv("HF_HOME", empty_hf_hub)
    monkeypatch.setenv("HF_HUB_CACHE", empty_hf_hub)
    monkeypatch.delenv("HF_ASSETS_CACHE", raising=False)


@pytest.fixture(autouse=True)
def no_hub_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches huggingface.co: an unknown org/name stops at the cache. The Hub tests (tests/source/test_hub.py)
    turn this off and point HF_ENDPOINT at a local server (tests/support/hub_server.py)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
