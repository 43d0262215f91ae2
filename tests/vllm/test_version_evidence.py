"""Which vLLM versions a startup that does not state its own can come from (capacity/vllm/version_evidence.py).

The formats and their releases are read from the wheels and the public logs (the module docstring); each bench log
with a stated version must fit its own range, and the fixtures' formats give the ranges worked out below.
"""

from __future__ import annotations

import json

import pytest

from capacity.vllm.log_startups import load_vllm_startups, parse_vllm_log
from capacity.vllm.version_evidence import fitting_semantics
from capacity.vllm.versions import semantics_for
from tests.support.paths import REPO_ROOT

BENCH = sorted((REPO_ROOT / "bench" / "vllm_logs").glob("*.log"))
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "vllm_logs"


@pytest.mark.parametrize("log", BENCH, ids=[p.stem for p in BENCH])
def test_every_bench_log_fits_the_version_its_sidecar_states(log):
    stated = json.loads(log.with_suffix(".json").read_text()).get("vllm_version")
    for facts in load_vllm_startups(log):
        if stated is None or facts.engine == "V0":
            continue
        fitting, evidence = fitting_semantics(facts)
        assert semantics_for(stated) in fitting, (stated, [e.text() for e in evidence])


@pytest.mark.parametrize(
    ("name", "ranges"),
    [
        # %.4f 'GiB and' (0.8-0.11), %.2f available (0.8-0.11), two KV lines (0.8-0.28)
        ("whisper-large-v3-h200-v0.11.0.log", ["0.8-0.10", "0.11"]),
        # Model Runner V2's 'GiB and' (0.15-0.28), two KV lines
        ("whisper-large-v3-h200-v0.15.0.log", ["0.12-0.15", "0.16-0.19", "0.20-0.22", "0.23", "0.24", "0.25", "0.26", "0.27-0.28"]),
        # one KV line (0.28+)
        ("whisper-large-v3-h200-v0.33.0.log", ["0.27-0.28", "0.29-0.32", "0.33"]),
    ],
)
def test_fixture_formats_give_the_ranges_their_lines_allow(name, ranges):
    facts = parse_vllm_log("\n".join(line for line in (FIXTURES / name).read_text().splitlines() if "version" not in line and "LLM engine (v" not in line))
    assert facts.version is None
    assert [s.name for s in fitting_semantics(facts)[0]] == ranges


def test_a_line_without_a_telling_format_gives_no_evidence():
    facts = parse_vllm_log("GPU KV cache size: 19,881 tokens")
    fitting, evidence = fitting_semantics(facts)
    assert evidence == () and len(fitting) == 12  # every V1 range, 0.8-0.10 to 0.33
