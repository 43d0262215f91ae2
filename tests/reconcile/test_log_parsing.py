"""vLLM startup logs (0.11, 0.15, 0.20, 0.33 formats) read line by line: each version's format, the figures and knobs
they give, num_blocks recovered from them, and malformed or pasted logs refused or read.

The whisper-large-v3 H200 fixtures and their hand arithmetic: tests/support/whisper_logs.py; blocks per request
cdiv(448, 16) + cdiv(8192, 16) = 28 + 512 = 540 (0.15+), 28 + cdiv(1500, 16) = 28 + 94 = 122 (0.11).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capacity.errors import EXIT_BAD_INPUT, BadInput
from capacity.reconcile.num_blocks import blocks_from_log
from capacity.vllm.log_facts import VllmLogFacts
from capacity.vllm.log_startups import load_vllm_log, parse_vllm_log
from tests.support.whisper_logs import BPB, FREE, REQUESTED_090, REQUESTED_092, V011, V015, V020, V033, V033_KV, WHISPER, GiB, MiB

pytestmark = pytest.mark.formula("its figures and hazard lists are worked by hand on the formula path; the default (trace) path's are tested in tests/cli/test_commands.py, tests/profilers and tests/examples")



def _blocks(facts: VllmLogFacts, bpr: int = 540) -> tuple[int, int, tuple[int, ...]]:
    ev = blocks_from_log(facts, bytes_per_block=BPB, num_groups=2, block_size=16, blocks_per_request=bpr)
    assert ev is not None and ev.consistent
    return ev.num_blocks_min, ev.num_blocks_max, ev.blocks_per_request


# ------------------------------------------------------------------ parsing each version's log


def test_parse_v0_33() -> None:
    f = load_vllm_log(V033)
    assert (f.version, f.version_guess, f.model, f.max_seq_len) == ("0.33.0", "0.33.0", WHISPER, 448)
    assert (f.model_loading_gib, f.model_loading_gib_decimals, f.model_loading_seconds) == (2.88, 2, 9.412331)
    assert (f.encoder_cache_budget_tokens, f.encoder_profile_items, f.encoder_profile_modality) == (8192, 5, "audio")
    assert f.available_kv_cache_gib == 125.0 and f.kv_cache_gib == 125.0 and f.kv_cache_memory_reserved_gib is None
    assert (f.kv_cache_pool, f.kv_cache_tokens, f.concurrency_max_model_len, f.max_concurrency, f.capacity_format) == ("GPU", 42_477, 448, 94.81, "one-line")
    assert (f.cudagraph_actual_gib, f.cudagraph_estimated_gib, f.cudagraph_difference_percent) == (0.09, 0.08, 11.1)
    assert (f.graph_capture_gib, f.graph_capture_seconds) == (0.09, 7)
    fm = f.free_memory
    assert fm is not None and not fm.startup_error
    assert (fm.free_gib, fm.total_gib, fm.gpu_memory_utilization, fm.requested_gib) == (139.1, 139.8, 0.92, 128.62)
    assert (fm.consumed_gib, fm.weights_gib, fm.non_torch_gib, fm.peak_activation_gib, fm.cudagraph_gib) == (3.13, None, None, 0.48, 0.09)
    # available - actual graphs - 150 MiB, and that + (free - requested)
    assert fm.kv_cache_memory_to_requested_bytes == 125 * GiB - 90 * MiB - 150 * MiB == 133_966_069_760
    assert fm.kv_cache_memory_to_gpu_bytes == 133_966_069_760 + FREE - REQUESTED_092 == 145_221_130_649
    assert fm.free_minus_requested_bytes == FREE - REQUESTED_092 == 11_255_060_889
    assert fm.kv_cache_in_use_gib == 125.0
    assert f.missing == () and not f.startup_error
    assert f.lines["Available KV cache memory"] == 7 and f.lines["GPU KV cache size"] == 9


def test_parse_v0_33_kv_cache_memory_bytes() -> None:
    f = load_vllm_log(V033_KV)
    assert f.available_kv_cache_gib is None and (f.kv_cache_memory_reserved_gib, f.initial_free_gib) == (120.0, 139.1)
    assert f.kv_cache_gib == 120.0
    assert (f.kv_cache_tokens, f.max_concurrency, f.concurrency_max_model_len) == (40_777, 91.02, 448)
    # profiling skipped: no CUDA-graph estimate, no usage report
    assert f.cudagraph_estimated_gib is None and f.free_memory is None
    assert f.missing == ("CUDA graph pool memory", "Free memory on device")


def test_parse_v0_20() -> None:
    f = load_vllm_log(V020)
    assert (f.version_guess, f.model, f.max_seq_len) == ("0.20.0", WHISPER, 448)
    assert (f.model_loading_gib, f.model_loading_seconds) == (2.88, 8.771204)
    assert (f.encoder_cache_budget_tokens, f.encoder_profile_items) == (8192, 5)
    assert f.available_kv_cache_gib == 124.5
    assert (f.kv_cache_tokens, f.max_concurrency, f.concurrency_max_model_len, f.capacity_format) == (407_952, 94.44, 448, "two-line")
    assert (f.cudagraph_estimated_gib, f.cudagraph_actual_gib, f.graph_capture_gib) == (0.08, 0.09, 0.09)
    assert f.missing == ("Free memory on device",)  # a DEBUG line before 0.33


def test_parse_v0_15_with_its_debug_usage_line() -> None:
    f = load_vllm_log(V015)
    assert f.version is None and f.version_guess == "0.15-0.20"
    assert (f.model_loading_gib, f.available_kv_cache_gib, f.kv_cache_tokens, f.max_concurrency) == (2.88, 122.0, 399_760, 92.54)
    assert (f.encoder_cache_budget_tokens, f.encoder_profile_items, f.encoder_profile_modality) == (8192, 5, "audio")
    assert f.cudagraph_estimated_gib is None and f.graph_capture_gib == 0.09
    fm = f.free_memory
    assert fm is not None
    assert (fm.gpu_memory_utilization, fm.requested_gib, fm.weights_gib, fm.peak_activation_gib, fm.non_torch_gib, fm.cudagraph_gib) == (
        0.9,
        125.82,
        2.88,
        0.66,
        0.28,
        0.09,
    )
    assert fm.consumed_gib is None
    assert fm.kv_cache_memory_to_requested_bytes == 122 * GiB - 90 * MiB - 150 * MiB == 130_744_844_288
    assert fm.free_minus_requested_bytes == FREE - REQUESTED_090 == 14_257_258_496


def test_parse_v0_11() -> None:
    f = load_vllm_log(V011)
    assert f.version is None and f.version_guess == "0.11" and "%.4f" in f.version_basis
    # %.4f: 3,087,892,480 / 2**30 = 2.87585 -> 2.8758
    assert (f.model_loading_gib, f.model_loading_gib_decimals, f.model_loading_seconds) == (2.8758, 4, 10.215337)
    # 0.11 sized the encoder budget by the encoder length: 1500 tokens, 1500 // 1500 = 1 item
    assert (f.encoder_cache_budget_tokens, f.encoder_profile_items, f.encoder_profile_modality) == (1500, 1, "audio")
    assert f.available_kv_cache_gib == 121.5 and f.available_kv_cache_decimals_fixed
    assert (f.kv_cache_tokens, f.max_concurrency, f.capacity_format) == (398_128, 407.92, "two-line")
    assert (f.graph_capture_gib, f.graph_capture_seconds) == (0.21, 8)


def test_version_guessed_from_formats_alone() -> None:
    two_line_with_estimate = "\n".join(
        [
            "INFO 11-30 08:02:46 [gpu_model_runner.py:6042] Estimated CUDA graph memory: 0.08 GiB total",
            "INFO 11-30 08:02:47 [kv_cache_utils.py:1711] GPU KV cache size: 407,952 tokens",
            "INFO 11-30 08:02:47 [kv_cache_utils.py:1716] Maximum concurrency for 448 tokens per request: 94.44x",
        ]
    )
    assert parse_vllm_log(two_line_with_estimate).version_guess == "0.20"
    one_line = "GPU KV cache size: 42,477 tokens, Maximum concurrency for 448 tokens per request: 94.81x"
    assert parse_vllm_log(one_line).version_guess == "0.33"
    mrv2_015 = "(EngineCore_DP0 pid=9) INFO 11-30 07:55:21 [model_runner.py:211] Model loading took 2.88 GiB and 9.120456 seconds"
    assert parse_vllm_log(mrv2_015).version_guess == "0.15-0.20"
    logo = "\n".join(
        [
            "(APIServer pid=1) INFO 11-30 08:11:02 [launcher.py:367]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0",
            "(EngineCore pid=2) INFO 11-30 08:11:31 [model_runner.py:428] Model loading took 2.88 GiB memory and 9.412331 seconds",
        ]
    )
    assert parse_vllm_log(logo).version == "0.33.0"


def test_prefixes_colours_and_line_endings() -> None:
    esc = "\x1b"
    coloured = (
        f"{esc}[0;36m(EngineCore_DP0 pid=123){esc}[0;0m {esc}[32mINFO{esc}[0m {esc}[90m11-30 08:12:01{esc}[0m "
        f"{esc}[90m[gpu_worker.py:773]{esc}[0m Available KV cache memory: 125.0 GiB\r\n"
    )
    tp_rank = "(Worker_TP1 pid=4412) INFO 11-30 08:12:02 [kv_cache_utils.py:1147] GPU KV cache size: 42,477 tokens, Maximum concurrency for 448 tokens per request: 94.81x\r\n"
    bare = "Model loading took 2.88 GiB memory and 9.412331 seconds\n"
    f = parse_vllm_log(coloured + tp_rank + bare)
    assert (f.available_kv_cache_gib, f.kv_cache_tokens, f.max_concurrency, f.model_loading_gib) == (125.0, 42_477, 94.81, 2.88)


def test_thousands_separators_and_other_devices() -> None:
    f = parse_vllm_log("XPU KV cache size: 1,234,567 tokens, Maximum concurrency for 32,768 tokens per request: 37.68x")
    assert (f.kv_cache_pool, f.kv_cache_tokens, f.concurrency_max_model_len, f.max_concurrency) == ("XPU", 1_234_567, 32_768, 37.68)


def test_startup_error_line() -> None:
    text = (
        "ValueError: Free memory on device cuda:0 (60.25/139.8 GiB) on startup is less than desired GPU memory utilization "
        "(0.92, 128.62 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    f = parse_vllm_log(text)
    assert f.startup_error and f.free_memory is not None
    assert (f.free_memory.device, f.free_memory.free_gib, f.free_memory.total_gib, f.free_memory.requested_gib) == ("cuda:0", 60.25, 139.8, 128.62)
    old = "Free memory on device (60.25/139.8 GiB) on startup is less than desired GPU memory utilization (0.9, 125.82 GiB). Decrease GPU memory"
    assert parse_vllm_log(old).free_memory.device is None  # type: ignore[union-attr]


def test_repeated_lines_with_other_figures_are_noted() -> None:
    text = "Available KV cache memory: 125.0 GiB\nAvailable KV cache memory: 125.0 GiB\nAvailable KV cache memory: 118.5 GiB\n"
    f = parse_vllm_log(text)
    assert f.available_kv_cache_gib == 125.0
    assert len(f.notes) == 1 and "lines 3" in f.notes[0] and "line 1 is used" in f.notes[0]


# ------------------------------------------------------------------ num_blocks recovered from the log


def test_blocks_from_each_log() -> None:
    # 0.33, 125.0 GiB: bytes in [124.995, 125.005] GiB -> n in [51197, 51202] (x 409.6); int(n x 448 / 540) = 42477
    # keeps 51200-51201; n / 540 rounding to 94.81 keeps n <= 51200.1 -> 51200
    assert _blocks(load_vllm_log(V033)) == (51_200, 51_200, (540,))
    # 0.33, reserved 120.0 GiB: n in [49149, 49154]; 40,777 tokens and 91.02x allow 49151 (40777.13, 91.0204) and 49152
    assert _blocks(load_vllm_log(V033_KV)) == (49_151, 49_152, (540,))
    # 0.20, 124.5 GiB: n in [50993, 50997]; 407,952 = n // 2 x 16 -> 50994-50995; 50994 / 540 = 94.433 prints 94.43 -> 50995
    assert _blocks(load_vllm_log(V020)) == (50_995, 50_995, (540,))
    # 0.15, 122.0 GiB: n in [49969, 49973]; 399,760 tokens -> 49970-49971; both print 92.54 with 540
    assert _blocks(load_vllm_log(V015)) == (49_970, 49_971, (540,))
    # 0.11, 121.50 GiB: n in [49764, 49768]; 398,128 tokens -> 49766-49767; 49766 / 122 = 407.918 -> 407.92,
    # 49767 / 122 = 407.926 -> 407.93: one block count, and 122 blocks per request (the encoder length rule)
    assert _blocks(load_vllm_log(V011)) == (49_766, 49_766, (122,))


def test_blocks_from_a_one_line_log_without_kv_memory_use_the_plan_count() -> None:
    f = parse_vllm_log("GPU KV cache size: 42,477 tokens, Maximum concurrency for 448 tokens per request: 94.81x")
    # 42477 <= n x 448 / 540 < 42478 -> n in [cdiv(42477 x 540, 448), cdiv(42478 x 540, 448) - 1] = [51200, 51201]; 94.81x keeps 51200
    assert _blocks(f) == (51_200, 51_200, (540,))


# ------------------------------------------------------------------ malformed logs: one line, exit 2


def _bad(path: Path) -> str:
    with pytest.raises(BadInput) as info:
        load_vllm_log(path)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == EXIT_BAD_INPUT
    return message


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("")
    assert "is empty" in _bad(tmp_path / "empty.log")
    (tmp_path / "blank.log").write_text("\n  \n\t\n")
    assert "is empty" in _bad(tmp_path / "blank.log")


def test_not_a_vllm_log(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("INFO 11-30 08:00:00 [app.py:1] Starting my web server\nGET /health 200\n")
    message = _bad(path)
    assert "is not a vLLM startup log" in message and "'Available KV cache memory'" in message and "'GPU KV cache size'" in message


def test_truncated_line_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    lines = V033.read_text().splitlines()
    cut = lines[8][: lines[8].index("Maximum concurrency") + 30]  # line 9: "... Maximum concurrency for 448 tok"
    path = tmp_path / "truncated.log"
    path.write_text("\n".join([*lines[:8], cut]) + "\n")
    f = load_vllm_log(path)
    assert (f.kv_cache_tokens, f.max_concurrency, f.capacity_format) == (42_477, None, "one-line")
    assert len(f.warnings) == 1 and f.warnings[0].startswith(f"{path}:9: line cut short")


def test_a_lone_line_cut_before_its_unit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cut.log"
    path.write_text("INFO 11-30 08:11:41 [gpu_worker.py:772] Available KV cache memory: 12")
    message = _bad(path)
    assert ":1: malformed vLLM log line: expected 'Available KV cache memory: <GiB> GiB'" in message and "no other vLLM startup figure" in message


@pytest.mark.parametrize(
    "line",
    [
        "Available KV cache memory: abc GiB",
        "GPU KV cache size: 4,2477 tokens",
        "Maximum concurrency for 448 tokens per request: many",
        "Model loading took many GiB memory and 9.4 seconds",
        "Encoder cache will be initialized with a budget of lots of tokens, and profiled with 5 audio items of the maximum feature size.",
        "CUDA graph pool memory: 0.09 GiB (actual), ? GiB (estimated), difference: 0.01 GiB (11.1%).",
        "Free memory on device (139.1 of 139.8 GiB) on startup.",
    ],
)
def test_an_unreadable_line_is_a_warning_when_others_read(tmp_path: Path, line: str) -> None:
    path = tmp_path / "bad.log"
    path.write_text(
        "(EngineCore pid=1) INFO 11-30 08:11:31 [model_runner.py:428] Available KV cache memory: 125.0 GiB\n"
        + f"(EngineCore pid=1) INFO 11-30 08:11:41 [x.py:1] {line}\n"
    )
    f = load_vllm_log(path)
    assert f.available_kv_cache_gib == 125.0
    assert len(f.warnings) == 1 and f.warnings[0].startswith(f"{path}:2: malformed vLLM log line")
    only = tmp_path / "only.log"
    only.write_text(line + "\n")
    assert "malformed vLLM log line" in _bad(only)


def test_what_users_paste(tmp_path: Path) -> None:
    """docker-compose prefixes, CRLF, a GB unit of older releases, no 'and N seconds', quotes and comments."""
    text = (
        "vllm-1  | (EngineCore_DP0 pid=7) INFO 02-12 19:35:33 [gpu_model_runner.py:4130] Model loading took 2.88 GiB memory\r\n"
        "vllm-1  | (EngineCore_DP0 pid=7) INFO 02-12 19:35:57 [gpu_worker.py:356] Available KV cache memory: 10.14 GiB   <- less than I hoped\r\n"
        "> `GPU KV cache size: 33,216 tokens`\r\n"
        "vllm-1  | Maximum concurrency for 448 tokens per request: 26.62x\r\n"
    )
    f = parse_vllm_log(text)
    assert (f.model_loading_gib, f.model_loading_seconds, f.available_kv_cache_gib, f.kv_cache_tokens, f.max_concurrency) == (2.88, None, 10.14, 33_216, 26.62)
    assert f.warnings == ()
    old = parse_vllm_log("INFO 08-25 05:45:10 [gpu_model_runner.py:1186] Model loading took 15.6271 GB and 4.171168 seconds")
    assert (old.model_loading_gib, old.model_loading_gib_decimals, old.model_loading_seconds) == (15.6271, 4, 4.171168)


def test_several_startups_in_one_paste() -> None:
    first = V033.read_text()
    second = first.replace("Available KV cache memory: 125.0 GiB", "Available KV cache memory: 118.5 GiB")
    from capacity.vllm.log_startups import parse_vllm_startups

    startups = parse_vllm_startups(first + second)
    assert [s.index for s in startups] == [1, 2]
    assert [s.available_kv_cache_gib for s in startups] == [125.0, 118.5]
    assert startups[1].first_line > startups[0].last_line
    assert "2 startups in this text" in parse_vllm_log(first + second).notes[-1]


def test_the_free_memory_report_in_pieces() -> None:
    text = (
        "Free memory on device (114.54/121.69 GiB) on startup.\n"
        "Desired GPU memory utilization is (0.6, 73.01 GiB).\n"
        "Actual usage is 3.35 GiB for consumed memory (weights + non-torch)\n"
        "Current kv cache memory in use is 69.4 GiB      <- a comment\n"
        "GPU KV cache size: 649,728 tokens\n"
    )
    f = parse_vllm_log(text)
    fm = f.free_memory
    assert fm is not None and (fm.free_gib, fm.total_gib, fm.gpu_memory_utilization, fm.requested_gib, fm.consumed_gib, fm.kv_cache_in_use_gib) == (
        114.54,
        121.69,
        0.6,
        73.01,
        3.35,
        69.4,
    )
    assert (f.gpu.cuda_total_gib, f.requested_gib) == (121.69, 73.01)
    # 0.11 printed the KV cache in use in bytes
    b = parse_vllm_log("Free memory on device (43.93/44.42 GiB) on startup. Current kv cache memory in use is 11423138508 bytes.")
    assert b.free_memory is not None and b.free_memory.kv_cache_in_use_gib == round(11_423_138_508 / GiB, 2)


def test_v0_engine_lines() -> None:
    text = (
        "[worker.py:287] the current vLLM instance can use total_gpu_memory (31.74GiB) x gpu_memory_utilization (0.90) = 28.57GiB\n"
        "[worker.py:287] model weights take 14.25GiB; non_torch_memory takes 0.09GiB; PyTorch activation peak memory takes 4.35GiB; "
        "the rest of the memory reserved for KV Cache is 9.88GiB.\n"
        "INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 578, # CPU blocks: 4681\n"
    )
    f = parse_vllm_log(text)
    assert (f.engine, f.version_guess, f.available_kv_cache_gib, f.requested_gib, f.gpu_memory_utilization, f.num_gpu_blocks) == ("V0", "V0 engine", 9.88, 28.57, 0.9, 578)
    assert f.profiled_non_kv_gib == round(14.25 + 0.09 + 4.35, 2) and f.gpu.cuda_total_gib == 31.74


def test_knobs_and_gpu_from_the_log() -> None:
    text = (
        "(APIServer pid=1) INFO 07-01 04:23:28 [api_utils.py:273] non-default args: {'model_tag': '/m', 'model': '/models/Qwen2.5-VL-7B-Instruct', "
        "'gpu_memory_utilization': 0.22, 'max_model_len': 4096, 'enforce_eager': True, 'compilation_config': <CompilationMode.NONE: 0>}\n"
        "INFO 08-31 08:01:42 [config.py:2286] Chunked prefill is enabled with max_num_batched_tokens=2048.\n"
        "(EngineCore pid=129) INFO 07-01 04:24:37 [gpu_worker.py:480] Available KV cache memory: -14.28 GiB\n"
        "|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:00:06.0 Off |                    0 |\n"
        "| N/A   33C    P0             54W /  500W |       0MiB /  81920MiB |      0%      Default |\n"
    )
    f = parse_vllm_log(text)
    assert f.log_knobs == {"gpu_memory_utilization": 0.22, "max_model_len": 4096, "enforce_eager": True}
    assert (f.model, f.max_seq_len, f.effective_max_num_batched_tokens) == ("/models/Qwen2.5-VL-7B-Instruct", 4096, 2048)
    assert (f.gpu.smi_name, f.gpu.smi_total_mib, f.gpu.cuda_total_gib) == ("NVIDIA A100-SXM4-80GB", 81_920, None)
    oom = parse_vllm_log("Available KV cache memory: 1.0 GiB\ntorch.OutOfMemoryError: ... GPU 0 has a total capacity of 23.57 GiB of which 1.2 GiB is free.")
    assert oom.gpu.cuda_total_gib == 23.57


def test_knobs_from_an_args_namespace() -> None:
    """0.6-0.8 print every argument (`args: Namespace(...)`): only values other than the defaults are knobs."""
    text = (
        "    vLLM STDOUT: INFO 05-05 15:15:08 [api_server.py:982] args: Namespace(subparser='serve', model_tag='m', host=None, "
        "model='unsloth/Llama-3.2-3B-Instruct', dtype='float16', kv_cache_dtype='auto', max_model_len=2048, tensor_parallel_size=1, "
        "block_size=None, gpu_memory_utilization=0.8938626454842437, max_num_batched_tokens=2048, max_num_seqs=192, "
        "quantization=None, enforce_eager=False, compilation_config={\"level\":3,\"splitting_ops\":[]}, "
        "dispatch_function=<function ServeSubcommand.cmd at 0x7f225baa9a80>)\n"
        "    vLLM STDOUT: INFO 05-05 15:25:32 [worker.py:267] model weights take 6.02GiB; non_torch_memory takes 0.05GiB; "
        "PyTorch activation peak memory takes 0.90GiB; the rest of the memory reserved for KV Cache is 6.22GiB.\n"
    )
    f = parse_vllm_log(text)
    assert f.log_knobs == {
        "max_model_len": 2048,
        "gpu_memory_utilization": 0.8938626454842437,
        "max_num_seqs": 192,
        "max_num_batched_tokens": 2048,
        "dtype": "float16",
    }
    assert f.model == "unsloth/Llama-3.2-3B-Instruct"


def test_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "garbage.log"
    path.write_bytes(bytes(range(256)) * 8)
    assert "is a binary file" in _bad(path)
    path.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(128, 256)) * 4)  # gzip header + bytes that are not UTF-8
    assert "is a binary file" in _bad(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert "no such file" in _bad(tmp_path / "nope.log")
    assert "is a directory" in _bad(tmp_path)


# Two startups pasted with only their `vllm serve` command above a few log lines (bench/vllm_logs/
# qwen3-8b-rtx4090-wsl-util0.85-v0.27.1-excerpt.log and qwen2.5-vl-7b-rtx4090-wsl-len8192-v0.27.1-excerpt.log,
# study notes on an RTX 4090, verbatim).
_SERVE_COMMAND_PASTE = """$ vllm serve Qwen/Qwen3-8B --max-model-len 4096 --gpu-memory-utilization 0.85 --port 8000
Model loading took 15.27 GiB and 5.165522 seconds
Available KV cache memory: 4.67 GiB
GPU KV cache size: 34,032 tokens
Maximum concurrency for 4,096 tokens per request: 8.31x
$ vllm serve Qwen/Qwen2.5-VL-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.90 --port 8000 --limit-mm-per-prompt "{\\"image\\":1}"
Model loading took 15.67 GiB and 10.349460 seconds
GPU KV cache size: 62,736 tokens
Maximum concurrency for 8,192 tokens per request: 7.66x
"""


def test_a_pasted_vllm_serve_command_gives_the_model_and_knobs() -> None:
    from capacity.vllm.log_startups import parse_vllm_startups

    qwen3, vl = parse_vllm_startups(_SERVE_COMMAND_PASTE)
    assert qwen3.model == "Qwen/Qwen3-8B"
    assert qwen3.log_knobs == {"max_model_len": 4096, "gpu_memory_utilization": 0.85}  # --port is no planning knob
    assert (qwen3.kv_cache_gib, qwen3.kv_cache_tokens) == (4.67, 34032)
    assert vl.model == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert vl.log_knobs == {"max_model_len": 8192, "gpu_memory_utilization": 0.9, "limit_mm_per_prompt": {"image": 1}}
    assert (vl.kv_cache_gib, vl.kv_cache_tokens, vl.max_concurrency) == (None, 62736, 7.66)
