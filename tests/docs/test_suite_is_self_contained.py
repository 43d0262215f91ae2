"""The suite needs nothing outside the repo (no test reads ../shared or any other folder beside the clone).

Every file a test reads is found under the repo, a test's own temporary folder or the installed packages; the
sources of the tests name no absolute path and no folder above the repo.
"""

from __future__ import annotations

import re
from pathlib import Path

from capacity.source.hub import HubSettings
from capacity.source.resolve import resolve_model
from tests.support.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests"
# a string literal that starts at the file-system root or climbs out of a folder: "/work/...", "../shared"
OUTSIDE = re.compile(r"""["'](?:/(?:work|home|root|srv|mnt|opt|data)\b|~/|\.\./)""")


def test_no_test_names_a_path_outside_the_repo():
    hits = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(TESTS.glob("*.py"))
        if path.name != Path(__file__).name
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == []


def test_the_pattern_catches_the_old_reference():
    assert OUTSIDE.search('    Path("/work/shared/model-configs"),')
    assert OUTSIDE.search("ROOT / '../shared/model-configs'")
    assert not OUTSIDE.search('ROOT / "capacity" / "source" / "catalog" / "models"')


def test_the_machines_hf_caches_are_hidden_from_tests():
    settings = HubSettings.from_env()
    assert settings.cache_dir.is_dir() and list(settings.cache_dir.iterdir()) == []
    assert settings.assets_dir.is_relative_to(settings.cache_dir)  # under the empty HF_HOME
    assert resolve_model("openai/whisper-large-v3").origin == "catalog"
