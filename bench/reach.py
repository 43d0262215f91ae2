"""Reach: which architectures capacity plans offline, and how each figure is obtained.

For every published config of the catalog folders given (`--catalog DIR`, a folder of `<org>--<name>/` folders
or `<org>--<name>.json` files) and for transformers' own default config of each multimodal architecture vLLM 0.33
registers (`DEFAULT_CONFIGS`: a class's defaults, not a published checkpoint; labelled so), it records:
the family that plans it (or the one-line refusal); tokens per item and how they were counted; the KV page of
each group (bf16, block 16, TP 1); parameters from the meta build against the safetensors index's total_size
(when the catalog has the index); and the activation peak from the fake-tensor trace against the formula, with
the planner (H200, vLLM defaults; the trace as `capacity plan` runs it, with a timeout). Text-only decoders are
listed, not measured.

    python bench/reach.py --catalog capacity/source/catalog/models --out bench/results/reach-<date>

Writes reach.json and README.md into --out. Needs torch and transformers (the meta builds, the processors).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (model_type, the architecture vLLM 0.33 registers for it): transformers' default config of the class is planned.
DEFAULT_CONFIGS: tuple[tuple[str, str], ...] = (
    ("llava", "LlavaForConditionalGeneration"),
    ("llava_next", "LlavaNextForConditionalGeneration"),
    ("llava_next_video", "LlavaNextVideoForConditionalGeneration"),
    ("llava_onevision", "LlavaOnevisionForConditionalGeneration"),
    ("qwen2_vl", "Qwen2VLForConditionalGeneration"),
    ("qwen3_vl", "Qwen3VLForConditionalGeneration"),
    ("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration"),
    ("idefics3", "Idefics3ForConditionalGeneration"),
    ("smolvlm", "SmolVLMForConditionalGeneration"),
    ("internvl", "InternVLForConditionalGeneration"),
    ("mistral3", "Mistral3ForConditionalGeneration"),
    ("paligemma", "PaliGemmaForConditionalGeneration"),
    ("aria", "AriaForConditionalGeneration"),
    ("cohere2_vision", "Cohere2VisionForConditionalGeneration"),
    ("glm4v", "Glm4vForConditionalGeneration"),
    ("glm4v_moe", "Glm4vMoeForConditionalGeneration"),
    ("gemma4", "Gemma4ForConditionalGeneration"),
    ("lighton_ocr", "LightOnOCRForConditionalGeneration"),
    ("ernie4_5_vl_moe", "Ernie4_5_VLMoeForConditionalGeneration"),
    ("blip-2", "Blip2ForConditionalGeneration"),
    ("qwen2_audio", "Qwen2AudioForConditionalGeneration"),
    ("voxtral", "VoxtralForConditionalGeneration"),
    ("granite_speech", "GraniteSpeechForConditionalGeneration"),
    ("audioflamingo3", "AudioFlamingo3ForConditionalGeneration"),
    ("gemma3n", "Gemma3nForConditionalGeneration"),
    ("llama4", "Llama4ForConditionalGeneration"),
    ("lfm2_vl", "Lfm2VlForConditionalGeneration"),
    ("qwen3_5", "Qwen3_5ForConditionalGeneration"),
)

# vLLM 0.33's max tokens per item where its source states them as a formula of the config (read, not run).
VLLM_DOCUMENTED: dict[str, tuple[dict[str, int | str], str]] = {
    "default:llava": ({"image": 576}, "llava.py get_max_image_tokens: CLIP (336 // 14)^2 = 576 patch features, 'default' strategy drops the CLS"),
    "default:qwen2_audio": ({"audio": 750}, "qwen2_audio.py get_mm_max_tokens_per_item: 30 s x 16 kHz // hop 160 = 3000 mel -> (3000-1)//2+1 = 1500 -> (1500-2)//2+1 = 750"),
    "default:voxtral": ({"audio": "max_model_len"}, "voxtral.py get_max_audio_tokens = model_config.max_model_len (long audio in 30 s chunks)"),
    "default:granite_speech": ({"audio": 5001}, "granite_speech.py get_max_audio_tokens = 5001"),
    "mistralai--Voxtral-Mini-3B-2507": ({"audio": "max_model_len"}, "voxtral.py get_max_audio_tokens = model_config.max_model_len"),
    "default:paligemma": ({"image": 256}, "paligemma.py get_num_image_tokens: SigLIP (224 // 14)^2 = 256 patches"),
    "Qwen--Qwen2.5-VL-7B-Instruct": ({"image": 16384}, "qwen2_vl.py get_max_image_tokens: max_pixels 12,845,056 // 28^2 = 16,384"),
    "allenai--olmOCR-2-7B-1025": ({"image": 16384}, "qwen2_vl.py get_max_image_tokens at the default max_pixels (no preprocessor config in the catalog)"),
    "openai--whisper-large-v3": ({"audio": 1500}, "whisper.py get_num_audio_tokens = max_source_positions (1500)"),
    "default:llava_next": ({"image": 2928}, "llava_next.py get_num_image_tokens at get_image_size_with_most_features 672x672: 2 x 2 tiles -> 48 x 48 = 2,304 + 48 newlines + 576 base"),
    "llava-hf--llava-v1.6-vicuna-7b-hf": ({"image": 2928}, "llava_next.py get_num_image_tokens at get_image_size_with_most_features 672x672: 2 x 2 tiles -> 48 x 48 = 2,304 + 48 newlines + 576 base"),
    "llava-hf--llava-1.5-7b-hf": ({"image": 576}, "llava.py get_max_image_tokens: CLIP (336 // 14)^2 = 576 patch features, 'default' strategy drops the CLS"),
    "allenai--olmOCR-7B-0225-preview": (
        {"image": 16384, "video": 32768},
        "qwen2_vl.py get_max_image_tokens: its max_pixels 12,845,056 // 28^2 = 16,384; get_max_video_tokens at max_model_len 32,768: "
        "4 frames fit (ceil(4 / 2) x 16,384 = 32,768), 2 frame pairs x 16,384",
    ),
    "Qwen--Qwen3-VL-4B-Instruct": ({"image": 16384, "video": 12288}, "qwen2_vl.py get_max_image_tokens (qwen3_vl.py inherits it): size.longest_edge 16,777,216 // (16 x 2)^2 = 16,384 (a 4096x4096 image); qwen3_vl.py get_max_video_tokens, 2 frames at the video size.longest_edge 25,165,824 // 2: 12,288, fewer"),
    "Qwen--Qwen3.5-0.8B": ({"image": 16384, "video": 12288}, "qwen3_5.py Qwen3_5ProcessingInfo is qwen3_vl.py's: size.longest_edge 16,777,216 // (16 x 2)^2 = 16,384 per image; video 12,288"),
    "Qwen--Qwen2-Audio-7B-Instruct": ({"audio": 750}, "qwen2_audio.py get_mm_max_tokens_per_item: 30 s x 16 kHz // hop 160 = 3000 mel -> (3000-1)//2+1 = 1500 -> (1500-2)//2+1 = 750"),
}


def catalog_unplannable() -> dict[str, str]:
    """Folder name -> reason, for the built-in catalog's entries marked `"plannable": false` (capacity refuses them)."""
    from capacity.source.catalog import read_index, stem

    return {stem(name): meta.get("not_plannable", "") for name, meta in read_index()["models"].items() if meta.get("plannable") is False}


def catalog_entries(
    folders: list[Path],
) -> list[tuple[str, dict[str, Any], dict[str, Any] | None, dict[str, Any] | None, int | None, dict[str, Any] | None]]:
    """(name, config, preprocessor, processor, safetensors total_size, video preprocessor) of each published catalog entry."""
    out = []
    for folder in folders:
        for path in sorted(folder.iterdir()):
            if path.is_dir() and (path / "config.json").is_file():
                read = lambda n, p=path: json.loads((p / n).read_text()) if (p / n).is_file() else None  # noqa: E731
                index = read("model.safetensors.index.json")
                total = (index or {}).get("metadata", {}).get("total_size")
                pre, proc, video = (read(f) for f in ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json"))
                out.append((path.name, read("config.json"), pre, proc, total, video))
            elif path.suffix == ".json":
                out.append((path.stem, json.loads(path.read_text()), None, None, None, None))
    return out


def default_entries() -> list[tuple[str, dict[str, Any], None, None, None, None]]:
    from transformers import CONFIG_MAPPING

    out = []
    for model_type, architecture in DEFAULT_CONFIGS:
        if model_type not in CONFIG_MAPPING:
            continue
        config = json.loads(json.dumps(CONFIG_MAPPING[model_type]().to_dict(), default=str))
        config["architectures"] = [architecture]
        config["model_type"] = model_type
        out.append((f"default:{model_type}", config, None, None, None, None))
    return out


def default_processor_entries() -> list[tuple[str, dict[str, Any], dict[str, Any], None, None, None]]:
    """The default configs again, with the default settings of the model_type's image processor class as their
    preprocessor config: a check that the processor path and the generic trace run on each architecture. Not a
    checkpoint: a class's defaults need not match its model's defaults (LLaVA's processor crops 224 px for a 336 px
    tower), so these token counts are no claim about any published model."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    out = []
    for name, config, _, _, _, _ in default_entries():
        entry = IMAGE_PROCESSOR_MAPPING_NAMES.get(config["model_type"])
        cls = entry.get("pil") if isinstance(entry, dict) else entry
        if isinstance(cls, str) and isinstance(config.get("vision_config"), dict):
            out.append((name.replace("default:", "default+processor:"), config, {"image_processor_type": cls}, None, None, None))
    return out


def tokens_at_defaults(spec: Any) -> dict[str, int]:
    """Max tokens per item as the budget sees them at vLLM's default knobs on an H200 (max_model_len included)."""
    from capacity.gpu.catalog import gpu_by_name
    from capacity.serving.config import ServingArgs, resolve_serving
    from capacity.serving.encoder_budget import max_tokens_per_item

    serving = resolve_serving(ServingArgs(), spec, gpu_by_name("H200"))
    return {m.name: max_tokens_per_item(m, serving.max_model_len) for m in spec.modalities}


def kv_pages(spec: Any) -> list[dict[str, Any]]:
    from capacity.gpu.catalog import gpu_by_name
    from capacity.planning.kv_groups import kv_groups_for
    from capacity.serving.config import ServingArgs, resolve_serving

    gpu = gpu_by_name("H200")
    serving = resolve_serving(ServingArgs(), spec, gpu)
    return [{"kind": g.kind, "layers": g.num_layers, "page_bytes": g.page_size_bytes} for g in kv_groups_for(spec, serving, gpu)]


class TimedOut(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise TimedOut()


def planned(folder: Path, estimate: str, timeout: int) -> dict[str, Any]:
    """The plan of the folder on an H200 with vLLM's defaults: from formulas, or from the fake-tensor trace
    (in this process; a trace that stops at a data-dependent op falls back to the formulas, as the CLI does)."""
    from capacity.planning.planner import plan_for
    from capacity.serving.config import ServingArgs

    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    note = ""
    try:
        if estimate == "trace":
            from profilers.api import trace_model

            try:
                result, _ = trace_model(str(folder), ServingArgs(), gpu_name="H200")
            except TimedOut:
                raise
            except Exception as exc:
                note = f"the fake-tensor trace stopped at {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
                result = plan_for(str(folder), ServingArgs(), "H200")
        else:
            result = plan_for(str(folder), ServingArgs(), "H200")
    except TimedOut:
        return {"error": f"timeout after {timeout} s"}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
    finally:
        signal.alarm(0)
    term = result.memory["activation_peak"]
    return {
        "activation_peak": term.bytes,
        "method": term.method,
        "weights": result.memory["weights"].bytes,
        "note": note,
        "wall_s": round(time.perf_counter() - start, 1),
    }


def reach_one(name: str, config: dict[str, Any], pre: Any, proc: Any, total_size: int | None, trace_timeout: int, video: Any = None) -> dict[str, Any]:
    from capacity.errors import CapacityError
    from capacity.memory.weights import parameter_count
    from capacity.model.registry import spec_from_files
    from capacity.source.resolve import resolve_model

    row: dict[str, Any] = {"name": name, "model_type": config.get("model_type"), "architecture": (config.get("architectures") or ["?"])[0]}
    unplannable = catalog_unplannable().get(name)
    if unplannable is not None:  # `capacity plan --model <id>` refuses it: so does this table
        row["refused"] = f"catalog entry marked not plannable: {unplannable}"
        return row
    try:
        spec = spec_from_files(config, name, pre, proc, video)
        tokens = tokens_at_defaults(spec) if spec.modalities else {}  # refuses a modality it cannot count (videos)
    except CapacityError as exc:
        row["refused"] = str(exc)
        return row
    row["family"] = spec.family.name
    if not spec.modalities and not spec.is_encoder_decoder:  # a text-only LLM: outside this benchmark's reach
        row["text_only"] = True
        return row
    row["tokens_per_item"] = tokens
    row["token_notes"] = [n for n in spec.notes if "tokens per" in n] or list(spec.notes[:1])
    row["kv_groups"] = kv_pages(spec)
    row["vllm_support"] = spec.vllm_support.status
    row["safetensors_total_size"] = total_size
    documented = VLLM_DOCUMENTED.get(name)
    if documented:
        tokens, row["vllm_source"] = documented
        # "max_model_len": vLLM's item is the default max_model_len (the config's derived length)
        row["vllm_tokens"] = {m: spec.derived_max_model_len if t == "max_model_len" else t for m, t in tokens.items()}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "config.json").write_text(json.dumps(config))
        for file, data in (("preprocessor_config.json", pre), ("processor_config.json", proc), ("video_preprocessor_config.json", video)):
            if data:
                (folder / file).write_text(json.dumps(data))
        try:  # the planner's own meta build (cached: the formula plan below reuses it)
            count, _ = parameter_count(spec, resolve_model(str(folder)))
            row["meta_parameters"] = count
            row["meta_bf16_bytes"] = 2 * count
        except Exception as exc:  # a config transformers cannot build
            row["meta_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
        row["formula"] = planned(folder, "formula", trace_timeout)
        if spec.encoder is not None:  # text-only decoders: no encoder to trace
            row["trace"] = planned(folder, "trace", trace_timeout)
    return row


def gib(n: int | None) -> str:
    return "" if n is None else f"{n / 2**30:.2f}"


def readme(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    planned = [r for r in rows if "family" in r and not r["name"].startswith("default+processor:")]
    mechanism = sorted({r["architecture"] for r in rows if "family" in r and r["name"].startswith("default+processor:")})
    archs = sorted({r["architecture"] for r in planned})
    mm = sorted({r["architecture"] for r in planned if not r.get("text_only")})
    lines = [
        f"# Reach: architectures capacity plans offline ({meta['created'][:10]})",
        "",
        f"Produced by `python bench/reach.py {meta['argv']}` on {meta['machine']} ({meta['created']}; "
        f"torch {meta['torch']}, transformers {meta['transformers']}). `reach.json` holds every field.",
        "",
        f"**{len(archs)} distinct architectures plan offline**, {len(mm)} of them multimodal or encoder-decoder "
        f"(published and default configs); with the default settings of their image processor class, "
        f"{len(mechanism)} architectures go through the processor path. Every other config is refused in one line.",
        "Rows named `default:<model_type>` are transformers' default config of that class (not a published checkpoint:",
        "no published file of those models was found, see capacity/source/catalog/README.md); `default+processor:<model_type>`",
        "rows add the default settings of the model_type's image processor class as the preprocessor config, to show the",
        "processor path and the generic trace running on each architecture: a class's defaults need not match its",
        "model's (LLaVA's processor crops 224 px for a 336 px tower), so those counts are no claim about a published",
        "model. The other rows are published configs (capacity/source/catalog/README.md gives source and sha256).",
        "",
        "## Per configuration",
        "",
        "| config | architecture | family | tokens per item (how) | vLLM 0.33 value | KV page per group (bf16, block 16) | meta-build bf16 GiB | safetensors GiB | activation peak formula / trace GiB | trace |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("text_only"):
            lines.append(f"| {r['name']} | {r['architecture']} | {r['family']} (text-only: not measured here) | | | | | | | |")
            continue
        if "refused" in r:
            lines.append(f"| {r['name']} | {r['architecture']} | refused: {r['refused'].replace('|', '/')} | | | | | | | |")
            continue
        tokens = "; ".join(f"{m} {t}" for m, t in r["tokens_per_item"].items())
        how = " ".join(r["token_notes"]).replace("|", "/")
        how = how.split("(", 1)[1].rsplit(")", 1)[0] if "(" in how else how
        vllm = "; ".join(
            f"{m} {t}" + ("" if not isinstance(t, int) else (" (=)" if r["tokens_per_item"].get(m) == t else " (differs)"))
            for m, t in r.get("vllm_tokens", {}).items()
        )
        pages = ", ".join(f"{g['kind']} x{g['layers']}: {g['page_bytes']:,} B" for g in r["kv_groups"])
        f, t = r.get("formula", {}), r.get("trace", {})
        peaks = f"{gib(f.get('activation_peak'))} / {gib(t.get('activation_peak'))}"
        if not t:
            trace = "no encoder"
        elif "fake-tensor trace of the real model" in t.get("method", ""):
            trace = f"ran ({t.get('wall_s')} s)"
        else:
            trace = "fell back to the formula: " + (t.get("note") or t.get("error") or "?").replace("|", "/")[:160]
        lines.append(
            f"| {r['name']} | {r['architecture']} | {r['family']} | {tokens} ({how[:220]}) | {vllm} | {pages} | "
            f"{gib(r.get('meta_bf16_bytes')) or r.get('meta_error', '')} | {gib(r.get('safetensors_total_size'))} | {peaks} | {trace} |"
        )
    traced = [r for r in rows if r.get("trace")]
    ran = [r["name"] for r in traced if "fake-tensor trace of the real model" in r["trace"].get("method", "")]
    differs = [
        f"{r['name']} ({m}: capacity {r['tokens_per_item'].get(m)}, vLLM {t})"
        for r in rows
        if "family" in r
        for m, t in r.get("vllm_tokens", {}).items()
        if r["tokens_per_item"].get(m) != t
    ]
    lines += [
        "",
        "## Findings (computed from the rows)",
        "",
        f"- Tokens per item equal vLLM's documented value for "
        f"{sum(1 for r in rows if 'family' in r for m, t in r.get('vllm_tokens', {}).items() if r['tokens_per_item'].get(m) == t)} "
        f"of {sum(len(r.get('vllm_tokens', {})) for r in rows if 'family' in r)} documented items; they differ for: {'; '.join(differs) or 'none'}.",
        f"- The fake-tensor trace ran for {len(ran)} of {len(traced)} configs with an encoder; the others fell back to the formulas "
        "(the reason is in the row: a data-dependent op in the vision tower, no preprocessor config, or no profiler hooks).",
        "- Weights: the meta-device build in 2-byte dtypes against the safetensors index's total_size: "
        + ("; ".join(
            f"{r['name']} {r['meta_bf16_bytes']:,} vs {r['safetensors_total_size']:,} B ({r['meta_bf16_bytes'] - r['safetensors_total_size']:+,})"
            for r in rows
            if r.get("safetensors_total_size") and r.get("meta_bf16_bytes")
        ) or "no catalog entry holds an index")
        + ".",
        "- Refusals are one line naming the field or file: KV layouts the KV reader does not model (conv layers), remote "
        "code (no transformers config class), image processors that tile or cap by pixels when no preprocessor config "
        "is given, a text config without intermediate_size (BLIP-2's OPT); catalog entries index.json marks not plannable "
        "are refused with its reason, as `capacity plan --model <id>` refuses them.",
    ]
    lines += [
        "",
        "Columns: tokens per item with how they were counted (`processor`: the model's HF processor on the largest",
        "image; `model`: the feature extractor then the model's own audio path on the meta device; `fallback formula`:",
        "named in the row; a family formula for the dedicated families); vLLM's value where its source states it as a",
        "formula of the config (`=` when equal); the KV page of each group at bf16, block 16, TP 1; parameters of the",
        "meta-device build in bf16 against the safetensors index's total_size (only where the catalog holds an index);",
        "the activation peak from the formulas and from the fake-tensor trace (H200, vLLM defaults), and whether the",
        "trace ran or fell back to the formulas, with the reason.",
        "",
        "## vLLM's values, where its source states them",
        "",
    ]
    for r in rows:
        if r.get("vllm_source"):
            lines.append(f"- {r['name']}: {r['vllm_source']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--catalog", action="append", default=[], type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-defaults", action="store_true")
    parser.add_argument("--trace-timeout", type=int, default=240)
    parser.add_argument("--only", default="")
    parser.add_argument("--readme-only", action="store_true", help="rewrite README.md from the reach.json already in --out")
    args = parser.parse_args()
    if args.readme_only:
        data = json.loads((args.out / "reach.json").read_text())
        (args.out / "README.md").write_text(readme(data["rows"], data["meta"]))
        return
    import torch
    import transformers

    entries = catalog_entries(args.catalog) + ([] if args.no_defaults else default_entries() + default_processor_entries())
    if args.only:
        entries = [e for e in entries if args.only in e[0]]
    rows = []
    for name, config, pre, proc, total, video in entries:
        start = time.perf_counter()
        rows.append(reach_one(name, config, pre, proc, total, args.trace_timeout, video))
        print(f"{name}: {rows[-1].get('family') or 'refused'} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    meta = {
        "argv": " ".join(sys.argv[1:]),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, no GPU used)",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reach.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.out / "README.md").write_text(readme(rows, meta))


if __name__ == "__main__":
    main()
