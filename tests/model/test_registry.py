"""Which family plans a config, importing only that family: the declarations read from the family modules' sources
match the imported families, and a plan imports no other family module."""

from __future__ import annotations

import json
import subprocess
import sys

from capacity.model.family import all_families
from capacity.model.registry import declared_families
from tests.support.paths import REPO_ROOT


def test_declared_families_are_what_the_imported_families_claim():
    by_type, fallbacks, complete = declared_families()
    assert complete
    modules = {f.name: type(f).__module__.rsplit(".", 1)[1] for f in all_families()}
    assert by_type == {t: modules[f.name] for f in all_families() for t in f.model_types}
    assert fallbacks == tuple(sorted((f.fallback_rank, modules[f.name]) for f in all_families() if f.fallback_rank is not None))
    assert fallbacks[0] == (0, "generic") and fallbacks[1] == (1, "decoder_only")


FAMILY_MODULES = """
import json, sys
from capacity.cli.app import main
code = main(sys.argv[1:])
print(json.dumps([code, sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("capacity.model.families."))]))
"""


def family_modules_of_a_plan(model: str, tmp_path) -> list[str]:  # type: ignore[no-untyped-def]
    argv = ["plan", "--model", model, "--gpu", "H100-80GB", "--estimate", "formula", "--json"]
    env = {"CAPACITY_CACHE_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", FAMILY_MODULES, *argv], cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=120)
    code, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0, done.stderr
    return modules


def test_a_plan_of_a_claimed_model_type_imports_only_its_family(tmp_path):
    # whisper's family module imports `common` (shared helpers), no other family
    assert family_modules_of_a_plan("openai/whisper-large-v3", tmp_path) == ["common", "whisper"]


def test_a_plain_decoder_imports_only_the_fallback_families(tmp_path):
    # qwen3_moe is no family's model_type: the generic multimodal family (rank 0) declines it, decoder_only (rank 1)
    # plans it; generic imports qwen2_5_vl for its vision tower's layout
    assert family_modules_of_a_plan("Qwen/Qwen3-30B-A3B", tmp_path) == ["common", "decoder_only", "generic", "qwen2_5_vl"]
