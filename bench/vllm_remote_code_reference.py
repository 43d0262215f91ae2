"""What vLLM 0.33.0's own code gives for the remote-code models capacity plans (InternVL, Ultravox, MiniCPM-V 2.5).

Run with the vLLM venv, outside the test suite (vLLM is never a test dependency):

    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/vllm_remote_code_reference.py \
        bench/results/vllm-remote-code-reference-2026-11-30/reference.json

Weights: as bench/vllm_weights_reference.py does (vLLM's CPU platform, a one-process group, the TP size and rank
patched into vLLM's parallel layers, the model class built on the meta device, unique parameter bytes summed). The
configs of InternVL and MiniCPM-V are remote code (configuration_*.py, not in the catalog), so vLLM cannot load
them from config.json here: the script builds a VllmConfig for a multimodal catalog model (Qwen2.5-VL-7B), then
hands vLLM's model class a stand-in config object carrying config.json's values (sub-configs as transformers
config objects: `llm_config` as `text_config` built by its model_type's class, as vLLM's `_CONFIG_ATTRS_MAPPING` and the
Hub's InternVLChatConfig do; MiniCPM-V's `vision_config` as an Idefics2VisionConfig). Ultravox's config class is
vLLM's own; its `text_model_id` is pointed at a folder holding the catalog's Llama-3.1-8B-Instruct config.json.

Tokens: vLLM's own methods where they exist, run on a stand-in `self`: InternVL's `get_max_image_tokens` and
`get_num_frames_with_most_features` (BaseInternVLProcessingInfo / InternVLProcessingInfo, with vLLM's
InternVLChatProcessor and a tokenizer stub: the token ids play no part in the counts), Ultravox's
`_get_max_tokens_per_chunk` and its dummy audio's length (UltravoxDummyInputsBuilder.get_dummy_mm_data with
transformers' WhisperFeatureExtractor), whose mel frames transformers' extractor counts as the processor asks
(padding "longest", pad_to_multiple_of hop_length, truncation off).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from vllm_weights_reference import TP, model_folder, patch_tp  # noqa: E402

CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"
SEQ_LENS = (8192, 32768, 65536)


def published(model: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CATALOG / model.replace("/", "--") / "config.json").read_text())
    return data


def stand_in(values: dict[str, Any], **subs: Any) -> Any:
    """A transformers config object with config.json's values as attributes (what the remote config class holds)."""
    from transformers import PretrainedConfig

    config = PretrainedConfig()
    for key, value in values.items():
        if key not in subs:
            with contextlib.suppress(AttributeError):
                setattr(config, key, value)
    for key, value in subs.items():
        setattr(config, key, value)
    return config


def internvl_config() -> Any:
    from transformers import CONFIG_MAPPING, PretrainedConfig

    raw = published("OpenGVLab/InternVL3-8B")
    llm = dict(raw["llm_config"])
    text = CONFIG_MAPPING[llm.pop("model_type")](**llm)
    vision = PretrainedConfig(**{k: v for k, v in raw["vision_config"].items() if k != "model_type"})
    return stand_in(raw, text_config=text, llm_config=text, vision_config=vision, architectures=["InternVLChatModel"])


def minicpmv_config() -> Any:
    from transformers import Idefics2VisionConfig, LlamaConfig

    raw = published("openbmb/MiniCPM-Llama3-V-2_5")
    llama = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("vision_config", "model_type", "architectures", "auto_map")})
    vision = Idefics2VisionConfig(**{k: v for k, v in raw["vision_config"].items() if k != "model_type"})
    config = stand_in(llama.to_dict(), vision_config=vision, architectures=["MiniCPMV"])
    for key in ("version", "query_num", "drop_vision_last_layer", "slice_mode", "slice_config", "image_size", "batch_vision_input", "model_type"):
        setattr(config, key, raw[key])
    config.get_text_config = lambda *a, **k: config  # the LLM's config is config.json itself
    return config


def build(cls: Any, cfg: Any, tp: int) -> int:
    import torch
    from vllm.config import set_current_vllm_config

    TP["size"], TP["rank"] = tp, 0
    patch_tp()
    torch.set_default_dtype(torch.bfloat16)
    with set_current_vllm_config(cfg), torch.device("meta"):
        model = cls(vllm_config=cfg, prefix="")
    return int(sum(p.numel() * p.element_size() for _, p in model.named_parameters(remove_duplicate=True)))


def engine_config(folder: Path, max_model_len: int) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=str(folder), tokenizer=str(folder), skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=max_model_len).create_engine_config()


def swapped(cfg: Any, hf_config: Any) -> Any:
    """The VllmConfig with the stand-in as the model's config (and its text config as vLLM would derive it)."""
    cfg.model_config.hf_config = hf_config
    cfg.model_config.hf_text_config = hf_config.get_text_config() if not hasattr(hf_config, "text_config") else hf_config.text_config
    return cfg


class _Tokenizer:
    def convert_tokens_to_ids(self, token: str) -> int:
        return 0


def internvl_tokens() -> dict[str, Any]:
    from vllm.model_executor.models.internvl import InternVLProcessingInfo
    from vllm.transformers_utils.processors.internvl import InternVLChatImageProcessor, InternVLChatProcessor

    raw = published("OpenGVLab/InternVL3-8B")
    vision = raw["vision_config"]
    image_processor = InternVLChatImageProcessor(
        image_size=vision["image_size"],
        min_dynamic_patch=raw["min_dynamic_patch"],
        max_dynamic_patch=raw["max_dynamic_patch"],
        dynamic_image_size=raw["dynamic_image_size"],
        use_thumbnail=raw["use_thumbnail"],
    )
    # vLLM InternVLProcessingInfo.get_hf_processor: image_seq_length = int((image_size // patch_size)^2 x downsample_ratio^2)
    seq = int((image_processor.image_size // vision["patch_size"]) ** 2 * (raw["downsample_ratio"] ** 2))
    processor = InternVLChatProcessor(image_processor=image_processor, tokenizer=_Tokenizer(), image_seq_length=seq)

    class Info(InternVLProcessingInfo):
        def __init__(self) -> None:
            pass

        def get_hf_processor(self, **kwargs: object) -> Any:
            return processor

    info = Info()
    return {
        "model": "OpenGVLab/InternVL3-8B",
        "image_seq_length": seq,
        "max_image_tokens": info.get_max_image_tokens(),
        "image_size_with_most_features": list(info.get_image_size_with_most_features()),
        "frames_with_most_features": {
            str(n): {
                "image_and_video": info.get_num_frames_with_most_features(n, {"image": 1, "video": 1}),
                "video_alone": info.get_num_frames_with_most_features(n, {"video": 1}),
            }
            for n in SEQ_LENS
        },
    }


def ultravox_tokens() -> dict[str, Any]:
    import numpy as np
    from transformers import WhisperFeatureExtractor
    from vllm.model_executor.models import ultravox

    raw = published("fixie-ai/ultravox-v0_6-llama-3_1-8b")
    extractor = WhisperFeatureExtractor(feature_size=raw["audio_config"]["num_mel_bins"])

    class Builder(ultravox.UltravoxDummyInputsBuilder):
        def __init__(self) -> None:
            class Info:
                def get_feature_extractor(self) -> Any:
                    return extractor

            self.info = Info()

        def _get_dummy_audios(self, *, length: int, num_audios: int, overrides: Any = None) -> Any:
            return [np.zeros(length, dtype=np.float32)] * num_audios

    audio = Builder().get_dummy_mm_data(0, {"audio": 1}, {})["audio"][0]
    features = extractor(audio, sampling_rate=extractor.sampling_rate, padding="longest", pad_to_multiple_of=extractor.hop_length, truncation=False, return_attention_mask=True)
    frames = int(np.asarray(features["attention_mask"]).sum())
    stand = stand_in(raw, audio_config=stand_in(raw["audio_config"]))
    per_chunk = ultravox.UltravoxModel._get_max_tokens_per_chunk(type("M", (), {"config": stand})())
    return {
        "model": "fixie-ai/ultravox-v0_6-llama-3_1-8b",
        "dummy_audio_samples": len(audio),
        "mel_frames": frames,
        "max_encoder_batch_size": ultravox._MAX_ENCODER_BATCH_SIZE,
        "max_tokens_per_chunk": per_chunk,
    }


def main() -> None:
    import torch
    import vllm
    from vllm.config import set_current_vllm_config
    from vllm.distributed import destroy_model_parallel, init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.model_executor.models.internvl import InternVLChatModel
    from vllm.model_executor.models.minicpmv import MiniCPMV2_5

    out_path = Path(sys.argv[1])
    weights = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        host = model_folder("Qwen/Qwen2.5-VL-7B-Instruct", root)
        llama = model_folder("meta-llama/Llama-3.1-8B-Instruct", root)
        uv = model_folder("fixie-ai/ultravox-v0_6-llama-3_1-8b", root)
        config = json.loads((uv / "config.json").read_text())
        (uv / "config.json").write_text(json.dumps({**config, "text_model_id": str(llama)}))
        base = engine_config(host, 4096)
        with set_current_vllm_config(base):
            init_distributed_environment(world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{root / 'dist'}", backend="gloo")
            destroy_model_parallel()
            initialize_model_parallel(1, 1)
        cases: list[tuple[str, Any, Any]] = [
            ("OpenGVLab/InternVL3-8B", InternVLChatModel, lambda: swapped(engine_config(host, 4096), internvl_config())),
            ("openbmb/MiniCPM-Llama3-V-2_5", MiniCPMV2_5, lambda: swapped(engine_config(host, 4096), minicpmv_config())),
            ("fixie-ai/ultravox-v0_6-llama-3_1-8b", None, lambda: engine_config(uv, 4096)),
        ]
        for name, cls, make in cases:
            for tp in (1, 2):
                cfg = make()
                if cls is None:
                    cls, _ = get_model_architecture(cfg.model_config)
                t0 = time.perf_counter()
                try:
                    total = build(cls, cfg, tp)
                except Exception as exc:  # record what vLLM refused, keep going
                    weights.append({"model": name, "tp": tp, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                    print(weights[-1], file=sys.stderr)
                    continue
                weights.append({"model": name, "tp": tp, "class": cls.__name__, "dtype": "bfloat16", "rank": 0, "rank0_parameter_bytes": total, "build_s": round(time.perf_counter() - t0, 2)})
                print(weights[-1], file=sys.stderr)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(
        json.dumps(
            {
                "vllm": vllm.__version__,
                "torch": torch.__version__,
                "platform": "vLLM CPU platform (VLLM_TARGET_DEVICE=cpu), models built on the meta device",
                "method": "bench/vllm_remote_code_reference.py (see its docstring)",
                "weights": weights,
                "tokens": [internvl_tokens(), ultravox_tokens()],
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
