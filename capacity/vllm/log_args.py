"""The version, model and knobs a vLLM startup log states: its banner lines and the arguments it was started with.

Pure Python, no torch. Knobs are read from `non-default args: {...}` (0.6-0.8: `args: Namespace(...)`, values other
than the defaults), a pasted `vllm serve MODEL --flag value ...` command (the flags capacity plans with; `non-default
args` wins), the engine's config line, `Using max model len N` and `Chunked prefill is enabled with
max_num_batched_tokens=N`. The version from the engine's config line, `vLLM API server version X` or the logo.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from typing import Any

_ENGINE = re.compile(r"Initializing an? (?:V1 |V0 )?LLM engine \(v([^)\s]+)\) with config: (.*)$")
_SERVER_VERSION = re.compile(r"vLLM (?:API )?server version (\S+?),?(?: serving model (\S+))?\s*$")
_LOGO_VERSION = re.compile(r"[█▀▄]\s+version\s+(\d+\.\d+\S*)\s*$")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})")
_MAX_MODEL_LEN = re.compile(r"Using max model len (\d+)")
_CHUNKED = re.compile(r"max_num_batched_tokens=(\d+)")
_CONFIG_FIELDS = {
    "model": re.compile(r"(?:^|, )model='([^']*)'"),
    "max_seq_len": re.compile(r"(?:^|, )max_seq_len=(\d+)"),
    "dtype": re.compile(r"(?:^|, )dtype=torch\.(\w+)"),
    "tensor_parallel_size": re.compile(r"(?:^|, )tensor_parallel_size=(\d+)"),
    "pipeline_parallel_size": re.compile(r"(?:^|, )pipeline_parallel_size=(\d+)"),
    "enforce_eager": re.compile(r"(?:^|, )enforce_eager=(True|False)"),
    "kv_cache_dtype": re.compile(r"(?:^|, )kv_cache_dtype=(\w+)"),
    "quantization": re.compile(r"(?:^|, )quantization=(\w+)"),
    # what the engine ran with: vLLM turns it off where unsupported (hybrid models before 0.11: "Disabling prefix caching")
    "enable_prefix_caching": re.compile(r"(?:^|, )enable_prefix_caching=(True|False)"),
}
# non-default args keys capacity plans with (vLLM's names are capacity's)
_KNOB_KEYS = (
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "kv_cache_dtype",
    "block_size",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "hf_overrides",
    "rope_scaling",  # vLLM 0.10's --rope-scaling X: hf_overrides {"rope_scaling": X}
    "kv_cache_memory_bytes",
    "num_speculative_tokens",
    "quantization",
    "enable_prefix_caching",
    "language_model_only",
    "enable_lora",
    "max_loras",
    "max_lora_rank",
    "max_cpu_loras",
    "lora_dtype",
    "fully_sharded_loras",
    "lora_extra_vocab_size",
)


# the args Namespace of 0.6-0.8's api_server (every argument, defaults included): knobs read when they differ from
# the defaults of those versions (None for the length and batch knobs, 0.9, 'auto', 1, False)
_NAMESPACE = re.compile(r"args: Namespace\((.*)\)\s*$")
_NAMESPACE_DEFAULTS: dict[str, Any] = {
    "gpu_memory_utilization": 0.9,
    "enforce_eager": False,
    "dtype": "auto",
    "tensor_parallel_size": 1,
    "kv_cache_dtype": "auto",
    "enable_lora": False,
    "max_loras": 1,
    "max_lora_rank": 16,
    "lora_dtype": "auto",
    "fully_sharded_loras": False,
    "lora_extra_vocab_size": 256,
}


def _namespace_args(text: str) -> dict[str, Any]:
    """The knobs of an `args: Namespace(...)` line that differ from the defaults (unreadable values skipped)."""
    out: dict[str, Any] = {}
    for key in (*_KNOB_KEYS, "model"):
        m = re.search(rf"(?:^|, ){key}=('[^']*'|[^,()]*)", text)
        if m is None:
            continue
        try:
            value = ast.literal_eval(m[1])
        except (ValueError, SyntaxError):
            continue
        if value is None or value == _NAMESPACE_DEFAULTS.get(key, object()):
            continue
        out[key] = value
    return out


def _non_default_args(text: str) -> dict[str, Any]:
    """The knobs of vLLM's `non-default args: {...}` line (a Python dict repr; enum reprs made strings first)."""
    cleaned = re.sub(r"<[^<>]*>", "None", text)
    try:
        data = ast.literal_eval(cleaned)
    except (ValueError, SyntaxError):
        return {}
    if not isinstance(data, dict):
        return {}
    out = {k: data[k] for k in _KNOB_KEYS if data.get(k) is not None}  # None: vLLM's default (e.g. 'enable_lora': None)
    if "model" in data:
        out["model"] = data["model"]
    return out


# a `vllm serve MODEL --flag value ...` command pasted above its log (study notes keep only a few log lines under it)
# `vllm serve M ...`, or the image's entrypoint (`docker run ... vllm/vllm-openai:TAG M ...`); a command continued over
# lines with backslashes is joined first (capacity/vllm/log_startups.py)
_SERVE_COMMAND = re.compile(r"(?:^|[\s$>#])(?:vllm serve|vllm/vllm-openai(?::\S+)?)\s+(\S.*)$")
_SERVE_FLAGS = {"--" + key.replace("_", "-"): key for key in _KNOB_KEYS}
_SERVE_SWITCHES = {"--enforce-eager": ("enforce_eager", True), "--enable-prefix-caching": ("enable_prefix_caching", True),
                   "--language-model-only": ("language_model_only", True),
                   "--enable-lora": ("enable_lora", True), "--fully-sharded-loras": ("fully_sharded_loras", True),
                   "--no-enable-prefix-caching": ("enable_prefix_caching", False)}


def _serve_value(key: str, text: str) -> Any:
    """A flag's value as vLLM's argparse would read it (numbers, JSON for --limit-mm-per-prompt, else the string)."""
    if key in ("limit_mm_per_prompt", "mm_processor_kwargs", "hf_overrides", "rope_scaling"):
        return json.loads(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _serve_command_args(text: str) -> dict[str, Any]:
    """The model and knobs of a pasted `vllm serve` command (flags capacity plans with; others and unreadable ones skipped)."""
    try:
        words = shlex.split(text)
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    if words and not words[0].startswith("-"):
        out["model"] = words[0]
    for i, word in enumerate(words):
        flag, _, inline = word.partition("=")
        if flag in _SERVE_SWITCHES:
            key, value = _SERVE_SWITCHES[flag]
            out[key] = value
        elif flag in _SERVE_FLAGS and (inline or i + 1 < len(words)):
            try:
                out[_SERVE_FLAGS[flag]] = _serve_value(_SERVE_FLAGS[flag], inline or words[i + 1])
            except ValueError:
                continue
    return out



def engine_config_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """The version and the config fields (`_CONFIG_FIELDS`, those present) of the engine's `Initializing ... LLM engine` line."""
    if (m := _ENGINE.search(line)) is None:
        return None
    fields: dict[str, Any] = {}
    for key, pattern in _CONFIG_FIELDS.items():
        if (cm := pattern.search(m[2])) is not None:
            value: Any = cm[1]
            if key in ("max_seq_len", "tensor_parallel_size", "pipeline_parallel_size"):
                value = int(value)
            elif key in ("enforce_eager", "enable_prefix_caching"):
                value = value == "True"
            fields[key] = value
    return m[1], fields


def server_version_line(line: str) -> tuple[str, str | None] | None:
    """(version, model or None) of `vLLM API server version X, serving model M`."""
    m = _SERVER_VERSION.search(line)
    return None if m is None else (m[1], m[2])


def logo_version(line: str) -> str | None:
    """The version under vLLM's ASCII logo."""
    m = _LOGO_VERSION.search(line)
    return None if m is None else m[1]


def logged_args(line: str) -> dict[str, Any] | None:
    """The model and knobs of a `non-default args` line, an `args: Namespace(...)` line or a `vllm serve` command; None: none of these."""
    if (m := _NON_DEFAULT.search(line)) is not None:
        return _non_default_args(m[1])
    if (m := _NAMESPACE.search(line)) is not None:
        return _namespace_args(m[1])
    if (m := _SERVE_COMMAND.search(line)) is not None:
        return _serve_command_args(m[1])
    return None


def is_banner(line: str) -> bool:
    """Whether the line opens a startup when it follows the KV figures of one: the engine's config line, a version line,
    non-default args or a `vllm serve` command (0.6-0.8's Namespace line does not)."""
    return bool(_ENGINE.search(line) or _NON_DEFAULT.search(line) or _LOGO_VERSION.search(line) or _SERVER_VERSION.search(line) or _SERVE_COMMAND.search(line))


def logged_max_model_len(line: str) -> int | None:
    """N of `Using max model len N`."""
    m = _MAX_MODEL_LEN.search(line)
    return None if m is None else int(m[1])


def chunked_batched_tokens(line: str) -> int | None:
    """N of `Chunked prefill is enabled with max_num_batched_tokens=N`."""
    if "Chunked prefill is enabled" not in line:
        return None
    m = _CHUNKED.search(line)
    return None if m is None else int(m[1])


def logged_model_runner(line: str) -> bool | None:
    """Which model runner loaded the model, from the file tag of its 'Model loading took' line: True for Model Runner
    V2 (`[model_runner.py:N]`, vllm/v1/worker/gpu/model_runner.py), False for the V1 runner (`[gpu_model_runner.py:N]`);
    None without a tag (V0 prints 'Loading model weights took' from its own model_runner.py)."""
    if "Model loading took" not in line:
        return None
    if "[gpu_model_runner.py:" in line:
        return False
    return True if "[model_runner.py:" in line else None
