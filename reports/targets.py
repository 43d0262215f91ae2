"""The output paths of `--csv`, `--html`, `--json PATH` and `-o`, checked before any planning.

A plan takes seconds (a fake-tensor trace, a GPU profile); a path that cannot be written is known at once.
Each target's folder must exist and take a new file: a temporary file named as `reports.export` names its
staged files is created there and removed, which catches a missing folder, no permission, a read-only file
system and a name longer than the file system allows. Nothing is left behind. Pure Python: no pandas, no torch.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from capacity.errors import BadInput


@dataclass(frozen=True)
class Target:
    """One output path: a file (HTML, JSON, a sweep's CSV, a profile) or a folder (a plan's CSV sections)."""

    flag: str
    path: Path
    is_folder: bool = False

    def check(self) -> None:
        """Raise BadInput (one line naming the flag and the path) when this target cannot be written."""
        path = self.path
        kind = self._kind(path)
        if self.is_folder and kind is not None:
            if kind != "folder":
                raise self._error("it is a file; this export is a folder of CSV files")
            self._probe(path, "summary.csv")  # the folder's own files are written inside it
            return
        if not self.is_folder and kind == "folder":
            raise self._error("it is a folder")
        folder = path.parent if str(path.parent) else Path(".")
        if self._kind(folder) != "folder":
            raise self._error(f"folder {folder} does not exist")
        self._probe(folder, path.name)

    def _kind(self, path: Path) -> str | None:
        """'folder', 'file' or None (absent); a path the system cannot even look up (too long) is an error."""
        try:
            return "folder" if stat.S_ISDIR(os.stat(path).st_mode) else "file"
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._error(exc.strerror or str(exc)) from exc

    def _probe(self, folder: Path, name: str) -> None:
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        except OSError as exc:
            raise self._error(exc.strerror or str(exc)) from exc
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)

    def _error(self, why: str) -> BadInput:
        return BadInput(f"cannot write {self.flag} {self.path}: {why}")


def check_targets(*targets: Target) -> None:
    """Check every output path, and that no two exports share one."""
    seen: dict[Path, str] = {}
    for target in targets:
        key = Path(os.path.abspath(target.path))
        if key in seen:
            raise BadInput(f"{target.flag} {target.path} is also the path of {seen[key]}: give each export its own file")
        seen[key] = target.flag
        target.check()
