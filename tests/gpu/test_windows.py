"""capacity/gpu/windows.py and the windows_desktop_memory hazard, against hand arithmetic.

RTX-4090-WSL's total is 25,757,220,864 B (nvidia-smi's 24,564 MiB); capacity's CUDA context is 753,729,536 B, so
25,003,491,328 B are free at vLLM's snapshot. At utilization 0.92 vLLM requests ceil(25,757,220,864 x 0.92) =
23,696,643,195 B, leaving Windows 1,306,848,133 B (1,246 MiB): less than the 1,338 MiB an idle desktop held. The
largest utilization leaving 1,338 MiB: floor((25,003,491,328 - 1,403,002,880) / 25,757,220,864, 2 decimals) = 0.91.
"""

from __future__ import annotations

import json

from capacity.cli.app import main


def plan(capsys, gpu: str, utilization: str) -> dict:
    args = ["plan", "--model", "Qwen3-8B", "--gpu", gpu, "--estimate", "formula", "--max-model-len", "4096"]
    code = main([*args, "--gpu-memory-utilization", utilization, "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def desktop_hazards(result: dict) -> list[dict]:
    return [h for h in result["hazards"] if h["id"] == "windows_desktop_memory"]


def test_a_wsl_gpu_warns_when_the_request_leaves_windows_less_than_an_idle_desktop(capsys):
    (hazard,) = desktop_hazards(plan(capsys, "RTX-4090-WSL", "0.92"))
    assert hazard["severity"] == "warning"
    assert "about 1,246 MiB" in hazard["message"] and "1,338 MiB" in hazard["message"]
    assert hazard["fix_knobs"] == {"gpu_memory_utilization": 0.91}


def test_the_suggested_utilization_leaves_the_desktop_room_and_no_warning(capsys):
    assert desktop_hazards(plan(capsys, "RTX-4090-WSL", "0.91")) == []


def test_native_linux_has_no_windows_desktop(capsys):
    assert desktop_hazards(plan(capsys, "RTX-4090", "0.92")) == []
