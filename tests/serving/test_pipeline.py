"""Pipeline parallelism's layer split: vLLM 0.33 get_pp_indices' remainder rule and VLLM_PP_LAYER_PARTITION."""

from __future__ import annotations

import json

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_BAD_INPUT, BadInput
from capacity.gpu.catalog import gpu_by_name
from capacity.serving.config import ServingArgs, load_serve_yaml, resolve_serving
from capacity.serving.pipeline import layer_partition, pipeline_stages
from tests.support.paths import REPO_ROOT


def _ranges(num_layers: int, pp: int, env: str | None = None) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in pipeline_stages(num_layers, pp, env)]


def test_even_splits_give_every_stage_the_same_layers() -> None:
    assert _ranges(80, 2) == [(0, 40), (40, 80)]  # Llama-3.1-70B at PP 2
    assert layer_partition(126, 3) == (42, 42, 42)  # Llama-3.1-405B at PP 3: 126 = 3 x 42


@pytest.mark.parametrize(
    ("num_layers", "pp", "counts"),
    [
        (61, 4, (15, 15, 16, 15)),  # 61 = 4 x 15 + 1: the one extra layer on the second-to-last stage
        (126, 4, (31, 32, 32, 31)),  # 126 = 4 x 31 + 2: the two middle stages
        (126, 5, (25, 25, 25, 26, 25)),  # 126 = 5 x 25 + 1
        (7, 4, (2, 2, 2, 1)),  # remainder PP - 1 = 3: every stage but the last, the first included
        (2, 2, (1, 1)),  # vLLM's own test_uneven_auto_partition goldens, as counts
        (3, 2, (2, 1)),
        (4, 3, (1, 2, 1)),
        (5, 3, (2, 2, 1)),
    ],
)
def test_the_remainder_goes_backwards_from_the_second_to_last_stage(num_layers: int, pp: int, counts: tuple[int, ...]) -> None:
    assert layer_partition(num_layers, pp) == counts
    assert sum(counts) == num_layers


def test_the_first_stage_holds_the_embedding_and_the_last_the_lm_head() -> None:
    stages = pipeline_stages(61, 4)
    assert [(s.first, s.last) for s in stages] == [(True, False), (False, False), (False, False), (False, True)]
    assert _ranges(61, 4) == [(0, 15), (15, 30), (30, 46), (46, 61)]
    assert stages[2].holds(45) and not stages[2].holds(46)
    only = pipeline_stages(32, 1)[0]
    assert (only.start, only.end, only.first, only.last) == (0, 32, True, True)


def test_vllm_pp_layer_partition_overrides_the_rule() -> None:
    # vLLM's own test_custom_layer_partition goldens
    assert _ranges(20, 4, "5,5,5,5") == [(0, 5), (5, 10), (10, 15), (15, 20)]
    assert _ranges(20, 4, "4,6,6,4") == [(0, 4), (4, 10), (10, 16), (16, 20)]
    assert _ranges(22, 4, "5,6,5,6") == [(0, 5), (5, 11), (11, 16), (16, 22)]
    assert layer_partition(80, 2, "30,50") == (30, 50)


@pytest.mark.parametrize(
    ("env", "num_layers", "says"),
    [
        ("5,5,5,5,", 20, "not a comma-separated list"),  # vLLM's test: a trailing comma raises
        ("5,5,5,a", 20, "not a comma-separated list"),
        ("5,5,5", 20, "has 3 entries for --pipeline-parallel-size 4"),
        ("5,5,5,5", 21, "sums to 20 layers, the model has 21"),
        ("12,-1,5,5", 21, "negative layer count"),
    ],
)
def test_an_invalid_partition_is_refused_in_one_line(env: str, num_layers: int, says: str) -> None:
    with pytest.raises(BadInput) as err:
        layer_partition(num_layers, 4, env)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


REFERENCE = json.loads((REPO_ROOT / "bench" / "results" / "vllm-pp-reference-2026-12-01" / "reference.json").read_text())


def test_the_split_equals_vllm_0_33s_own_get_pp_indices_on_every_reference_case() -> None:
    # bench/vllm_pp_reference.py ran the 0.33.0 wheel's get_pp_indices: 1 to 130 layers x PP 1 to 8, and partition strings
    assert REFERENCE["vllm"] == "0.33.0" and len(REFERENCE["cases"]) > 1000
    for case in REFERENCE["cases"]:
        if "raises" in case:
            with pytest.raises(BadInput):
                pipeline_stages(case["layers"], case["pp"], case["partition"])
            continue
        ranges = [[s.start, s.end] for s in pipeline_stages(case["layers"], case["pp"], case["partition"])]
        assert ranges == case["ranges"], case


def test_a_pipeline_size_below_one_is_refused() -> None:
    with pytest.raises(BadInput, match="--pipeline-parallel-size must be >= 1"):
        layer_partition(32, 0)


# --- the --pipeline-parallel-size knob ---------------------------------------------------------------------------


@pytest.fixture
def _hermetic(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("VLLM_PP_LAYER_PARTITION", raising=False)
    monkeypatch.chdir(tmp_path)


def _refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(["plan", *argv])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.usefixtures("_hermetic")
def test_plan_refuses_pipeline_stages_it_has_not_read_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # Qwen2-Audio: where vLLM places each family's tower is read family by family (not this one); phi-1: vLLM 0.33's
    # phi.py names no intermediate tensors and imports no model module that does (bench/vllm_pp_intermediate_keys.py)
    err = _refusal(capsys, ["--model", "Qwen/Qwen2-Audio-7B-Instruct", "--gpu", "H200", "--estimate", "formula", "-pp", "2"])
    assert "--pipeline-parallel-size 2" in err and "tower" in err and "plan at --pipeline-parallel-size 1" in err
    err = _refusal(capsys, ["--model", "microsoft/phi-1", "--gpu", "H200", "--estimate", "formula", "-pp", "2"])
    assert "PhiForCausalLM sends between stages is not read" in err


@pytest.mark.usefixtures("_hermetic")
def test_a_module_that_wraps_another_modules_model_takes_its_intermediate_tensors(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM 0.33's qwen3.py builds qwen2.py's Qwen2Model, whose factory lists hidden_states and residual: Qwen3-8B's
    # 36 layers split 18 + 18 (get_pp_indices), and the second stage receives two [tokens, 4096] bf16 tensors
    code = main(["plan", "--model", "Qwen/Qwen3-8B", "--gpu", "H200", "--estimate", "formula", "-pp", "2", "--json", "-"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    plan = json.loads(out.out)
    assert [s["layers"] for s in plan["stages"]] == [[0, 18], [18, 36]]
    tokens = plan["serving"]["max_num_batched_tokens"]
    assert plan["stages"][1]["memory"]["pp_intermediate"]["bytes"] == 2 * tokens * 4096 * 2


@pytest.mark.usefixtures("_hermetic")
def test_plan_checks_the_layer_split_as_vllm_does_first(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Llama-3.1-8B has 32 decoder layers: 20 + 13 = 33 is what vLLM's get_pp_indices raises ValueError on
    model = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H200"]
    assert "sums to 33 layers, the model has 32" in _refusal(capsys, [*model, "-pp", "2", "--pp-layer-partition", "20,13"])
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "16,8,8")  # read from the environment, as vLLM reads it
    assert "has 3 entries for --pipeline-parallel-size 2" in _refusal(capsys, [*model, "-pp", "2"])
    assert "has 3 entries for --pipeline-parallel-size 1" in _refusal(capsys, model)  # vLLM checks it at PP 1 too
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "")  # set but empty: vLLM raises "Invalid partition string"
    assert "is not a comma-separated list of layer counts" in _refusal(capsys, model)


@pytest.mark.usefixtures("_hermetic")
def test_plan_refuses_pipeline_stages_of_an_encoder_decoder_model(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(capsys, ["--model", "openai/whisper-tiny", "--gpu", "L4", "-pp", "2"])
    assert "encoder-decoder" in err


def test_a_partition_of_all_layers_at_pp1_changes_nothing(spec_of) -> None:
    spec, gpu = spec_of("meta-llama/Llama-3.1-8B-Instruct"), gpu_by_name("H200")
    assert resolve_serving(ServingArgs(pp_layer_partition="32"), spec, gpu) == resolve_serving(ServingArgs(), spec, gpu)
    with pytest.raises(BadInput, match="--pipeline-parallel-size must be >= 1, got 0"):
        resolve_serving(ServingArgs(pipeline_parallel_size=0), spec, gpu)


def test_serve_yaml_takes_pipeline_parallel_size(tmp_path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("model: meta-llama/Llama-3.1-8B-Instruct\npipeline-parallel-size: 2\n")
    assert load_serve_yaml(path)[0] == {"pipeline_parallel_size": 2}
    path.write_text("model: meta-llama/Llama-3.1-8B-Instruct\npp: 4\n")
    assert load_serve_yaml(path)[0] == {"pipeline_parallel_size": 4}
