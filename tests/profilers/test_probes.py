"""CpuProbe's live-byte count when tensors die on another thread (gloo's worker drops its references there)."""

from __future__ import annotations

import threading

import torch

from profilers.probes import CpuProbe


def test_tensors_released_on_another_thread_leave_the_count():
    probe = CpuProbe()
    with probe.tracking():
        base = probe.allocated()
        doomed = [torch.ones(256) for _ in range(50)]  # 50 x 1 KiB, recorded on this thread
        assert probe.allocated() == base + 50 * 1024
        box = [doomed]
        del doomed
        t = threading.Thread(target=box.clear)  # their last reference goes on another thread
        t.start()
        kept = torch.ones(64)  # recorded meanwhile
        t.join()
        assert probe.allocated() == base + 256
        del kept
    assert probe.allocated() == base
