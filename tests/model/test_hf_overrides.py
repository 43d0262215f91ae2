"""--hf-overrides (capacity/model/hf_overrides.py) and the max_model_len each vLLM version derives from the result.

By hand, from vLLM's sources (read in the wheels): 0.33.0 ModelConfig sets a flat value on the config, merges a dict
into a nested config and sets a dict whole on any other key; 0.10.0's --rope-scaling X is hf_overrides
{"rope_scaling": X}. _get_and_verify_max_len, for Qwen3-32B (max_position_embeddings 40,960) under
{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}: 0.10.0 to 0.29.0 derive
32,768 x 4 = 131,072; 0.30.0 and later take YaRN's max_position_embeddings as already scaled: 40,960.
"""

from __future__ import annotations

import pytest

from capacity.errors import BadInput
from capacity.model.hf_overrides import parse_hf_overrides, with_hf_overrides
from capacity.model.registry import load_model
from capacity.planning.planner import plan_for
from capacity.serving.config import ServingArgs
from capacity.vllm.versions import planned_semantics

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def test_overrides_set_flat_values_and_dict_parameters_whole_and_merge_into_nested_configs() -> None:
    config = {
        "max_position_embeddings": 40960,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0, "extra": 1},
        "text_config": {"num_hidden_layers": 4, "rope_scaling": {"factor": 1.0}},
    }
    out = with_hf_overrides(config, {"max_position_embeddings": 131072, "rope_scaling": YARN, "text_config": {"rope_scaling": {"factor": 8.0}}})
    assert out["max_position_embeddings"] == 131072
    assert out["rope_scaling"] == YARN  # set whole: no "extra" left over
    assert out["text_config"] == {"num_hidden_layers": 4, "rope_scaling": {"factor": 8.0}}  # merged key by key
    assert config["rope_scaling"]["rope_type"] == "linear"  # the model's own config is left as it was


@pytest.mark.parametrize("given", ["{not json", "[1, 2]", "3"])
def test_an_override_that_is_not_a_json_object_is_refused_in_one_line(given: str) -> None:
    with pytest.raises(BadInput) as refused:
        parse_hf_overrides(given, "--hf-overrides")
    assert "\n" not in str(refused.value) and "--hf-overrides" in str(refused.value)


def test_the_derived_length_under_yarn_follows_the_version() -> None:
    _, spec = load_model("Qwen/Qwen3-32B", hf_overrides={"rope_scaling": YARN})
    assert (spec.derived_max_model_len, spec.derived_max_model_len_before_0_30) == (40_960, 131_072)
    assert planned_semantics("0.29.0").model_spec(spec).derived_max_model_len == 131_072
    assert planned_semantics("0.30.0").model_spec(spec).derived_max_model_len == 40_960
    _, plain = load_model("Qwen/Qwen3-32B")
    assert plain.derived_max_model_len_before_0_30 is None  # no YaRN: every version derives 40,960


@pytest.mark.parametrize("model", ["deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b", "Qwen/Qwen3-235B-A22B"])
def test_published_yarn_configs_derive_the_same_length_in_every_version(model: str) -> None:
    """Their max_position_embeddings is original x factor already (DeepSeek-V3 4,096 x 40 = 163,840; gpt-oss 4,096 x 32)."""
    assert load_model(model)[1].derived_max_model_len_before_0_30 is None


def test_a_plan_with_qwens_yarn_recipe_fits_on_0_10_and_is_refused_on_0_33() -> None:
    args = ServingArgs(max_model_len=131072, tensor_parallel_size=4, hf_overrides={"rope_scaling": YARN})
    old = plan_for("Qwen/Qwen3-32B", args, "H100-SXM", semantics=planned_semantics("0.10.0"))
    assert "max_model_len_above_model_limit" not in {h.id for h in old.hazards}
    assert "--hf-overrides '{\"rope_scaling\":{\"rope_type\":\"yarn\"" in old.suggestion.command
    new = plan_for("Qwen/Qwen3-32B", args, "H100-SXM")
    assert "max_model_len_above_model_limit" in {h.id for h in new.hazards}


def test_a_rope_factor_the_override_sets_scales_the_length_in_every_version() -> None:
    """vLLM multiplies the derived length by any RoPE type's factor but su / longrope / llama3 (and, from 0.30, the
    YaRN types): Qwen3-8B's 40,960 x 2 under {"rope_type": "dynamic", "factor": 2.0}."""
    _, spec = load_model("Qwen/Qwen3-8B", hf_overrides={"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})
    assert (spec.derived_max_model_len, spec.derived_max_model_len_before_0_30) == (81_920, None)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": "x"}}, "factor 'x' must be a number >= 1"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, "factor 0.5 must be a number >= 1"),
        ({"rope_scaling": 5}, "rope_scaling = 5: give an object"),
        ({"rope_theta": "big"}, "rope_theta = 'big' must be a positive number"),
        ({"text_config": {"num_hidden_layers": 2}}, "has no text_config to update"),
        ({"num_hidden_layers": "abc"}, "num_hidden_layers = 'abc' must be a number"),
    ],
)
def test_an_override_vllm_would_reject_is_refused_in_one_line(overrides: dict, named: str) -> None:
    with pytest.raises(BadInput) as refused:
        load_model("Qwen/Qwen3-8B", hf_overrides=overrides)
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_rope_overrides_keep_the_recorded_parameters_and_import_no_torch() -> None:
    """RoPE keys shape no parameter: the catalog's recorded table still serves, so the formula path stays torch-free;
    only the rotary cache (a load buffer) grows with YaRN's length."""
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "from capacity.planning.planner import plan_for\n"
        "from capacity.serving.config import ServingArgs\n"
        "from capacity.vllm.versions import planned_semantics\n"
        f"args = ServingArgs(max_model_len=131072, tensor_parallel_size=4, hf_overrides={{'rope_scaling': {YARN!r}}})\n"
        "plan = plan_for('Qwen/Qwen3-32B', args, 'H100-SXM', semantics=planned_semantics('0.10.0'))\n"
        "plain = plan_for('Qwen/Qwen3-32B', ServingArgs(max_model_len=40960, tensor_parallel_size=4), 'H100-SXM')\n"
        "print(json.dumps([plan.memory['weights'].bytes == plain.memory['weights'].bytes, 'torch' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[true, false]"
