"""The machine and package versions a benchmark result records (shared by the bench scripts)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions(packages: tuple[str, ...], missing: str) -> dict[str, str]:
    """Python's version and each package's, `missing` for one not installed."""
    out = {"python": platform.python_version()}
    for package in packages:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = missing
    return out
