"""One fake-tensor model for the many traces of a sweep in one process.

A fake-tensor trace builds the model on the meta device and adopts every parameter and buffer as a counted fake
tensor (profilers/probes.py FakeProbe.adopt_module): about 0.5 s of a Nemotron-Parse trace's 0.9 s once the process
is warm. A sweep traces the same model under many knobs, so `SharedFakeModel` builds and adopts it once (per config,
family, dtype and attention implementation) under one FakeTensorMode, and each later trace's probe counts the same
parameters and buffers again inside its weights phase (FakeProbe.count_module): the weights phase measures the same
bytes, and every later phase starts from the same live tensors as a trace of its own.

Nothing of one trace may reach the next. The probe is new for every trace (its allocator accounting starts at zero);
what a run could leave in the module, a tensor cached on a module (a rotary cos/sin cache, a buffer replaced), or a
scalar that decides what a later call allocates, is compared before each reuse with what the module held when it was
built (`module_state`): any difference, or a trace that raised, and the next trace builds the model again.
(tests/profilers/test_shared_model.py: a trace after another equals the same trace alone.)

No torch at module level.
"""

from __future__ import annotations

from typing import Any

from capacity.memory.measured_profile import RANDOM_WEIGHTS
from capacity.model.spec import ModelSpec
from capacity.serving.config import ServingConfig
from capacity.source.resolve import ModelSource
from profilers.probes import FakeProbe, MemoryProbe
from profilers.run import WholeModel

SCALARS = (int, float, str, bool, bytes, type(None))


def module_state(module: Any) -> tuple[Any, ...]:
    """What a forward pass could leave behind in `module` and its submodules: the identity of every parameter, buffer
    and tensor an attribute holds (in lists, tuples and dicts too), and every scalar attribute's value. Callables
    (a forward replaced for the run: capacity/model/arch/gated_delta_net.py run_as_vllm, re-applied by every run)
    and other objects (a config) are left out."""
    import torch

    def held(value: Any, depth: int = 0) -> Any:
        if isinstance(value, torch.Tensor):
            return ("tensor", id(value))
        if isinstance(value, SCALARS):
            return value
        if depth < 3 and isinstance(value, (list, tuple)):
            return tuple(held(v, depth + 1) for v in value)
        if depth < 3 and isinstance(value, dict):
            return tuple((repr(k), held(v, depth + 1)) for k, v in value.items())
        return None

    state = []
    for name, mod in module.named_modules(remove_duplicate=False):
        params = tuple((k, id(v)) for k, v in mod._parameters.items())
        buffers = tuple((k, id(v)) for k, v in mod._buffers.items())
        attrs = tuple((k, held(v)) for k, v in vars(mod).items() if k not in ("_parameters", "_buffers", "_modules") and not callable(v))
        state.append((name, type(mod).__name__, params, buffers, attrs))
    return tuple(state)


class SharedFakeModel(WholeModel):
    """A placement (profilers/run.py Placement) for fake-tensor runs that builds the whole model once and lends it to
    every later run of the same config, family, dtype and attention implementation in this process. Run each trace
    with `probe()`: its FakeTensorMode is the one the model's fake tensors belong to."""

    def __init__(self) -> None:
        self._mode: Any = None
        self._key: tuple[Any, ...] | None = None
        self._module: Any = None
        self._state: tuple[Any, ...] = ()
        self.builds = 0  # how many times the model was built and adopted (tests, benchmarks)

    def probe(self) -> FakeProbe:
        """A probe for the next run: under the mode of the model's fake tensors (the first run's probe makes it)."""
        return FakeProbe(self._mode)

    def load(self, spec: ModelSpec, source: ModelSource, serving: ServingConfig, probe: MemoryProbe, device: str, attn: str) -> tuple[Any, str]:
        mode = getattr(probe, "_fake", None)
        if not isinstance(probe, FakeProbe) or mode is None or (self._mode is not None and mode is not self._mode):
            raise ValueError("SharedFakeModel lends its model to runs on its own probe() only")
        self._mode = mode
        key = (source.config_sha256, spec.family.name, serving.dtype, attn)
        if self._module is not None and key == self._key and module_state(self._module) == self._state:
            return probe.count_module(self._module), RANDOM_WEIGHTS
        self.discard()
        module, kind = super().load(spec, source, serving, probe, device, attn)
        self._key, self._module, self._state = key, module, module_state(module)
        self.builds += 1
        return module, kind

    def discard(self) -> None:
        """Drop the model: the next run builds it again (after a run that raised, whatever state it left)."""
        self._key, self._module, self._state = None, None, ()
