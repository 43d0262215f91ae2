"""Speed of capacity against the peers on the package index, on the same ten models, in one interleaved run.

    python3 bench/speed/run.py --reps 3 --venv /work/speed-bench-venvs [--out bench/results/speed-DATE]

See bench/speed/README.md: what each tool is asked, what it supports, and the fairness rules.
Exit status: 0 when every supported (tool, case) ran and answered; 1 when one failed (its exit code and stderr are
in raw.json and the table says FAILED), when a case marked n/a unexpectedly succeeded, or when a tool downloaded
a whole weight file from the local Hub.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from hub import BenchHub  # noqa: E402
from machine import cpu_model  # noqa: E402

CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", "decoder-only"),
    ("Qwen/Qwen2.5-7B-Instruct", "decoder-only"),
    ("Qwen/Qwen3-8B", "decoder-only"),
    ("microsoft/phi-4", "decoder-only"),
    ("Qwen/Qwen3-30B-A3B", "decoder-only MoE"),
    ("Qwen/Qwen2.5-VL-7B-Instruct", "multimodal (image/video)"),
    ("google/gemma-3-4b-it", "multimodal (image)"),
    ("Qwen/Qwen3-VL-8B-Instruct", "multimodal (image/video)"),
    ("openai/whisper-large-v3", "encoder-decoder (audio)"),
    ("nvidia/NVIDIA-Nemotron-Parse-v1.1", "encoder-decoder (image, remote code)"),
]
GPU = "H100-80GB"


def _json_out(stdout: str) -> str | None:
    try:
        json.loads(stdout)
    except ValueError:
        return "stdout is not one JSON document"
    return None


def _json_key(key: str) -> Callable[[str], str | None]:
    def check(stdout: str) -> str | None:
        try:
            found = key in json.loads(stdout)
        except ValueError:
            return "stdout is not one JSON document"
        return None if found else f"the JSON answer lacks {key!r}"

    return check


def _contains(text: str) -> Callable[[str], str | None]:
    return lambda stdout: None if text in stdout else f"stdout lacks {text!r}"


@dataclass(frozen=True)
class Peer:
    name: str
    pip: tuple[tuple[str, ...], ...]  # pip install commands' arguments, pinned, run in order
    packages: tuple[str, ...]  # distributions whose versions are recorded
    argv: Callable[[Path, dict], list[str]]  # (venv, case) -> command
    check: Callable[[str], str | None]  # stdout -> None, or why the answer is not one
    asks: str
    shim: bool = False  # hardcodes https://huggingface.co: loads shim/sitecustomize.py
    not_supported: dict[str, str] = field(default_factory=dict)  # case -> reason (checked each run: the tool must fail on it)


REMOTE_CODE = "remote code: transformers needs the repo's modeling files (hf_nemotron_parse_*.py), which no public copy gave the catalog, so the local Hub lacks them"
TF431 = "transformers 4.31 (what llm-analysis's pin huggingface-hub<0.15 resolves to)"
LLM_ANALYSIS_ARGS = ["-m", "llm_analysis.analysis", "infer", "--gpu_name", "h100-sxm-80gb", "--log_level", "ERROR", "--model_name"]

PEERS = [
    Peer(
        "hf-mem",
        (("hf-mem==0.5.6",),),
        ("hf-mem", "httpx2"),
        lambda v, c: [str(v / "bin" / "hf-mem"), "--model-id", c["id"], "--experimental", "--json-output"],
        _json_out,
        "weights from the safetensors headers, plus the KV cache of one max_model_len sequence (`--experimental`)",
        shim=True,
    ),
    Peer(
        "kvfit",
        (("kvfit==0.3.0",),),
        ("kvfit",),
        lambda v, c: [str(v / "bin" / "kvfit"), c["id"], "--hardware", "h100-80", *(["--context", str(c["max_len"])] if c["max_len"] else []), "--json"],
        _json_out,
        "KV state per sequence and how many fit on one H100 80 GB at the model's max context (`--context`: its default 128k "
        "exceeds most configs' maximum and is refused), weights from the Hub's file sizes",
        shim=True,
        not_supported={
            "google/gemma-3-4b-it": "refuses gemma3_text: its text_config leaves num_attention_heads to transformers' default",
            "Qwen/Qwen2.5-VL-7B-Instruct": "refuses qwen2_5_vl: not in its checked standard-attention set",
            "Qwen/Qwen3-VL-8B-Instruct": "refuses qwen3_vl_text: not in its checked standard-attention set",
            "openai/whisper-large-v3": "refuses whisper: not in its checked standard-attention set",
            "nvidia/NVIDIA-Nemotron-Parse-v1.1": "refuses nemotron_parse: not in its checked standard-attention set",
        },
    ),
    Peer(
        "vramscout",
        (("vramscout==0.7.0",),),
        ("vramscout", "huggingface_hub"),
        lambda v, c: [str(v / "bin" / "vramscout"), c["id"], "--engine", "vllm", "--vram-gib", "80", "--json"],
        _json_out,
        "a vLLM budget on 80 GiB: weights, KV/state, runtime, max context (`--engine vllm --vram-gib 80`)",
        not_supported={
            "google/gemma-3-4b-it": "text_config without q_heads/kv_heads/head_dim (transformers' defaults) is refused",
            "openai/whisper-large-v3": "encoder-decoder config (no decoder q_heads/kv_heads/head_dim) is refused",
            "nvidia/NVIDIA-Nemotron-Parse-v1.1": "encoder-decoder config (no decoder layers/hidden_size/heads) is refused",
        },
    ),
    Peer(
        "llm-analysis",
        (("llm-analysis==0.2.2",),),
        ("llm-analysis", "transformers", "huggingface-hub"),
        lambda v, c: [str(v / "bin" / "python"), *LLM_ANALYSIS_ARGS, c["id"]],
        _json_key("weight_memory_per_gpu"),
        f"`infer`: inference memory and latency, batch 1, 512 + 32 tokens, on h100-sxm-80gb, from AutoConfig; as pip resolves it: {TF431}",
        not_supported={
            "meta-llama/Llama-3.1-8B-Instruct": f"{TF431} rejects Llama 3.1's rope_scaling (rope_type llama3)",
            "Qwen/Qwen2.5-7B-Instruct": f"{TF431} does not know model_type qwen2",
            "Qwen/Qwen3-8B": f"{TF431} does not know model_type qwen3",
            "microsoft/phi-4": f"{TF431} does not know model_type phi3",
            "Qwen/Qwen3-30B-A3B": f"{TF431} does not know model_type qwen3_moe",
            "Qwen/Qwen2.5-VL-7B-Instruct": f"{TF431} does not know model_type qwen2_5_vl",
            "google/gemma-3-4b-it": f"{TF431} does not know model_type gemma3",
            "Qwen/Qwen3-VL-8B-Instruct": f"{TF431} does not know model_type qwen3_vl",
            "nvidia/NVIDIA-Nemotron-Parse-v1.1": REMOTE_CODE,
        },
    ),
    Peer(
        "llm-analysis (tf 4.57)",
        (("--no-deps", "llm-analysis==0.2.2"), ("fire==0.5.0", "transformers==4.57.6")),
        ("llm-analysis", "transformers", "huggingface-hub"),
        lambda v, c: [str(v / "bin" / "python"), *LLM_ANALYSIS_ARGS, c["id"]],
        _json_key("weight_memory_per_gpu"),
        "the same `infer`, installed `--no-deps` beside transformers 4.57.6 (the last 4.x; llm-analysis asks for <5) so that it "
        "reads these configs; its huggingface-hub<0.15 pin is not honoured (it calls huggingface_hub only to list models)",
        not_supported={
            "google/gemma-3-4b-it": "Gemma3Config has no num_hidden_layers/n_layers at the top level (they are in text_config)",
            "Qwen/Qwen3-VL-8B-Instruct": "Qwen3VLConfig has no num_hidden_layers/n_layers at the top level (they are in text_config)",
            "nvidia/NVIDIA-Nemotron-Parse-v1.1": REMOTE_CODE,
        },
    ),
    Peer(
        "accelerate",
        (("torch==2.13.0", "transformers==5.24.0", "accelerate==1.15.0"),),
        ("accelerate", "transformers", "torch", "huggingface_hub"),
        lambda v, c: [str(v / "bin" / "accelerate"), "estimate-memory", c["id"], "--dtypes", "float16"],
        _contains("Memory Usage for loading"),
        "`estimate-memory --dtypes float16`: AutoModel built on the meta device, its largest layer and total size "
        "(torch 2.13.0 and transformers 5.24.0, the versions capacity runs with)",
        not_supported={"nvidia/NVIDIA-Nemotron-Parse-v1.1": REMOTE_CODE},
    ),
]


@dataclass(frozen=True)
class CapacityVariant:
    name: str
    source: str  # "hub" (the local Hub, --revision main) or "catalog"
    estimate: str  # "formula" or "default"
    runs: int  # 2 for the default path: a first run, then a second with the first's caches


VARIANTS = [
    CapacityVariant("capacity formula (hub)", "hub", "formula", 1),
    CapacityVariant("capacity default (hub)", "hub", "default", 2),
    CapacityVariant("capacity formula (catalog)", "catalog", "formula", 1),
    CapacityVariant("capacity default (catalog)", "catalog", "default", 2),
]


def columns(variant: CapacityVariant) -> list[str]:
    return [variant.name] if variant.runs == 1 else [f"{variant.name} 1st", f"{variant.name} 2nd"]


def capacity_argv(python: str, variant: CapacityVariant, model: str) -> list[str]:
    argv = [python, "-m", "capacity.cli", "plan", "--model", model, "--gpu", GPU]
    if variant.source == "hub":
        argv += ["--revision", "main"]  # a catalog id with a revision resolves through the Hub, not the catalog
    if variant.estimate == "formula":
        argv += ["--estimate", "formula"]
    return argv + ["--json"]


# --- venvs ---------------------------------------------------------------------------------------------------


def venv_dir(root: Path, peer: Peer) -> Path:
    return root / re.sub(r"[^A-Za-z0-9.]+", "-", peer.name).strip("-")


def ensure_venv(root: Path, peer: Peer, base_python: str, log: Callable[[str], None]) -> str | None:
    """Create the peer's venv under `root` with its pinned packages unless it is there with the same pins; None, or
    why the install failed."""
    venv = venv_dir(root, peer)
    marker = venv / "speed-bench-pins.json"
    pins = [list(p) for p in peer.pip]
    if marker.is_file() and json.loads(marker.read_text()) == pins:
        return None
    log(f"installing {peer.name} into {venv}: " + "; ".join(" ".join(p) for p in peer.pip))
    shutil.rmtree(venv, ignore_errors=True)
    commands = [[base_python, "-m", "venv", str(venv)]] + [[str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *p] for p in peer.pip]
    for argv in commands:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            tail = [line for line in (done.stderr or done.stdout).splitlines() if line.strip() and not line.startswith("WARNING: Location")]
            return f"`{' '.join(argv[2:])}` exited {done.returncode}: {' / '.join(tail[-2:])}"
    marker.write_text(json.dumps(pins))
    return None


def versions(python: str, packages: tuple[str, ...]) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, platform, sys\n"
        "out = {'python': platform.python_version()}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = 'not installed'\n"
        "print(json.dumps(out))"
    )
    done = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


# --- one timed run -------------------------------------------------------------------------------------------

PASS_THROUGH = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ")


def run_env(home: Path, hub_url: str, extra: dict[str, str]) -> dict[str, str]:
    """A clean environment: no HF token, no offline flag, no caches but the run's own `home`."""
    env = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        HF_HOME=str(home / "hf"),
        HF_ENDPOINT=hub_url,
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def timed(argv: list[str], env: dict[str, str], check: Callable[[str], str | None], timeout: float) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = "timeout", exc.stdout or "", f"killed after {timeout} s"
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    problem = f"exit {rc}" if rc != 0 else check(stdout)
    out = {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "rc": rc, "ok": problem is None}
    if problem is not None:
        lines = [line for line in (stderr.strip() or stdout.strip()).splitlines() if line.strip()]
        out["problem"] = problem
        out["stderr_tail"] = lines[-6:]
    return out


# --- the run -------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per (tool, case); the table gives the median (default 5)")
    parser.add_argument("--venv", type=Path, default=None, help="folder outside the repo holding one venv per peer (created, with pinned versions, when missing)")
    parser.add_argument("--out", type=Path, default=None, help="result folder (default bench/results/speed-<UTC date>)")
    parser.add_argument("--capacity-python", default=sys.executable, help="interpreter that imports capacity's dependencies (default: this one)")
    parser.add_argument("--capacity-root", type=Path, default=REPO, help="the capacity tree timed, put first on PYTHONPATH (default: this repo)")
    parser.add_argument("--base-python", default="python3", help="interpreter the peers' venvs are made from (default python3)")
    parser.add_argument("--cases", nargs="*", default=None, help="a subset of the case ids (default: all ten)")
    parser.add_argument("--tools", nargs="*", default=None, help="a subset of tool names: peers and/or capacity variants (default: all)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before one run is killed and marked failed")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="milliseconds the local Hub waits before each answer (a network round trip; default 0)")
    parser.add_argument("--table-from", type=Path, default=None, help="rewrite table.md beside this raw.json and exit (no run)")
    args = parser.parse_args()
    if args.table_from is not None:
        (args.table_from.parent / "table.md").write_text(table(json.loads(args.table_from.read_text())))
        return 0

    if args.venv is None:
        parser.error("--venv is required (a folder outside the repo for the peers' venvs)")
    date = datetime.now(timezone.utc)
    out = args.out or REPO / "bench" / "results" / f"speed-{date:%Y-%m-%d}"
    cases = [c for c in CASES if args.cases is None or c[0] in args.cases]
    peers = [p for p in PEERS if args.tools is None or p.name in args.tools]
    variants = [v for v in VARIANTS if args.tools is None or v.name in args.tools]
    known = [p.name for p in PEERS] + [v.name for v in VARIANTS]
    if args.tools is not None and set(args.tools) - set(known):
        parser.error(f"unknown tool among {args.tools}; tools: {known}")
    if args.cases is not None and len(cases) != len(args.cases):
        parser.error(f"unknown case among {args.cases}; cases: {[c[0] for c in CASES]}")

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    args.venv.mkdir(parents=True, exist_ok=True)
    install_failures = {p.name: why for p in peers if (why := ensure_venv(args.venv, p, args.base_python, log)) is not None}
    installed = [p for p in peers if p.name not in install_failures]
    tool_versions = {p.name: versions(str(venv_dir(args.venv, p) / "bin" / "python"), p.packages) for p in installed}
    capacity_root = args.capacity_root.resolve()
    capacity_path = os.pathsep.join(dict.fromkeys([str(capacity_root), str(REPO)]))
    commit = subprocess.run(["git", "-C", str(capacity_root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(capacity_root), "status", "--porcelain", "--", "capacity"], capture_output=True, text=True).stdout.strip())
    tool_versions["capacity"] = {
        "commit": commit + (" (uncommitted changes under capacity/)" if dirty else ""),
        **versions(args.capacity_python, ("torch", "transformers", "huggingface_hub", "safetensors")),
    }

    scratch = Path(tempfile.mkdtemp(prefix="speed-bench-"))
    hub_root = scratch / "hub"
    log(f"writing the local Hub's repos under {hub_root}")
    made = subprocess.run(
        [args.capacity_python, str(HERE / "repos.py"), str(hub_root), *[c[0] for c in cases]],
        env={**os.environ, "PYTHONPATH": capacity_path},
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        print(made.stderr, file=sys.stderr)
        return 1
    repos = [json.loads(line) for line in made.stdout.splitlines() if line.startswith("{")]
    case_of = {r["id"]: {"id": r["id"], "max_len": r["max_len"]} for r in repos}

    runs: dict[str, dict[str, list[dict]]] = {}  # tool -> case -> runs
    na_checks: dict[str, dict[str, dict]] = {}
    failures: list[str] = []
    n = 0

    def home() -> Path:
        nonlocal n
        n += 1
        return Path(tempfile.mkdtemp(prefix=f"run{n}-", dir=scratch))

    def counted(hub: BenchHub, argv: list[str], env: dict[str, str], check: Callable[[str], str | None]) -> dict:
        before = hub.requests  # one run at a time: the difference is this run's requests to the local Hub
        result = timed(argv, env, check, args.timeout)
        result["hub_requests"] = hub.requests - before
        return result

    def run_peer(peer: Peer, model: str, hub: BenchHub) -> dict:
        extra = {"PYTHONPATH": str(HERE / "shim"), "SPEED_BENCH_HUB_URL": hub.url} if peer.shim else {}
        h = home()
        result = counted(hub, peer.argv(venv_dir(args.venv, peer), case_of[model]), run_env(h, hub.url, extra), peer.check)
        shutil.rmtree(h, ignore_errors=True)
        return result

    def run_capacity(variant: CapacityVariant, model: str, hub: BenchHub) -> list[dict]:
        h = home()  # shared by the runs of a default pair: the second finds what the first cached
        env = run_env(h, hub.url, {"PYTHONPATH": capacity_path})
        results = [counted(hub, capacity_argv(args.capacity_python, variant, model), env, _json_out) for _ in range(variant.runs)]
        shutil.rmtree(h, ignore_errors=True)
        return results

    units: list[Peer | CapacityVariant] = [*installed, *variants]
    load_before = os.getloadavg()
    started = time.time()
    with BenchHub(hub_root, args.latency_ms / 1000) as hub:
        log(f"local Hub at {hub.url}; {len(cases)} cases x {len(units)} tools x {args.reps} reps")
        # untimed: every tool once on the first case (byte-compiles its modules, fills the page cache), and
        # every n/a case once, to show that the tool does fail on it
        for unit in units:
            if isinstance(unit, Peer):
                model = next((c[0] for c in cases if c[0] not in unit.not_supported), None)
                if model is not None:
                    run_peer(unit, model, hub)
                for model, reason in unit.not_supported.items():
                    if model in {c[0] for c in cases}:
                        check = run_peer(unit, model, hub)
                        na_checks.setdefault(unit.name, {})[model] = {"reason": reason, **check}
                        if check["ok"]:
                            failures.append(f"{unit.name} on {model}: marked n/a ({reason}) but it answered")
            else:
                run_capacity(unit, cases[0][0], hub)
        for rep in range(args.reps):
            for ci, (model, _) in enumerate(cases):
                shift = (rep + ci) % len(units)
                for unit in units[shift:] + units[:shift]:  # round robin: no tool always runs first or last
                    if isinstance(unit, Peer):
                        if model in unit.not_supported:
                            continue
                        results = [run_peer(unit, model, hub)]
                        names = [unit.name]
                    else:
                        results = run_capacity(unit, model, hub)
                        names = columns(unit)
                    for name, result in zip(names, results, strict=True):
                        runs.setdefault(name, {}).setdefault(model, []).append(result)
                        if not result["ok"]:
                            failures.append(f"{name} on {model} (rep {rep + 1}): {result['problem']}: {' / '.join(result.get('stderr_tail', [])[-2:])}")
                            log(f"FAILED {failures[-1]}")
                log(f"rep {rep + 1}/{args.reps} {model}: done")
        full_downloads = list(hub.full_downloads)
        hub_requests = hub.requests
    if full_downloads:
        failures.append(f"whole weight files were requested from the local Hub: {sorted(set(full_downloads))}")
    shutil.rmtree(scratch, ignore_errors=True)

    raw = {
        "date": date.isoformat(timespec="seconds"),
        "machine": {
            "cpu_count": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)),
            "cpu_model": cpu_model(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "elapsed_s": round(time.time() - started, 1),
        },
        "reps": args.reps,
        "latency_ms": args.latency_ms,
        "gpu": GPU,
        "versions": tool_versions,
        "not_installed": install_failures,
        "cases": [{"id": c, "kind": k} for c, k in cases],
        "hub_repos": repos,
        "hub_requests": hub_requests,
        "peers": [
            {
                "name": p.name,
                "install": ["pip install " + " ".join(a) for a in p.pip],
                "command": " ".join(p.argv(Path("VENV"), {"id": "MODEL", "max_len": "MAX_LEN"})).replace("VENV/bin/", ""),
                "shim": p.shim,
                "asks": p.asks,
            }
            for p in peers
        ],
        "capacity_variants": [
            {"name": v.name, "runs": v.runs, "columns": columns(v), "command": " ".join(capacity_argv("python", v, "MODEL")), "env": f"PYTHONPATH={capacity_path}"}
            for v in variants
        ],
        "not_supported": na_checks,
        "runs": runs,
        "failures": failures,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "raw.json").write_text(json.dumps(raw, indent=1) + "\n")
    (out / "table.md").write_text(table(raw))
    log(f"wrote {out / 'table.md'} and raw.json")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


# --- the table -----------------------------------------------------------------------------------------------


def median(results: list[dict], key: str) -> float | None:
    good = [r[key] for r in results if r["ok"]]
    return statistics.median(good) if good and len(good) == len(results) else None


def table(raw: dict) -> str:
    """table.md from raw.json alone (`--table-from` rewrites it)."""
    runs, m = raw["runs"], raw["machine"]
    cap_cols = [name for v in raw["capacity_variants"] for name in v["columns"]]
    peer_names = [p["name"] for p in raw["peers"]]

    def cell(tool: str, model: str) -> str:
        if tool in raw["not_installed"]:
            return "not installed"
        na = raw["not_supported"].get(tool, {}).get(model)
        if na is not None:
            return "n/a"
        results = runs.get(tool, {}).get(model, [])
        if not results:
            return "-"
        bad = [r for r in results if not r["ok"]]
        if bad:
            return f"FAILED ({bad[0]['problem']})"
        return f"{median(results, 'wall_s'):.2f} ({median(results, 'cpu_s'):.2f})"

    def wall(tool: str, model: str) -> float | None:
        results = runs.get(tool, {}).get(model, [])
        return median(results, "wall_s") if results else None

    lines = [
        f"# Speed: capacity against the peers ({raw['date'][:10]})",
        "",
        f"Machine: {m['cpu_count']} CPUs ({m['cpus_usable']} usable), {m['cpu_model']}, {m['memory_gib']} GiB, {m['platform']}, "
        f"Python {m['python']}; load average {m['loadavg_before'][0]} before, {m['loadavg_after'][0]} after; {m['elapsed_s']:.0f} s in all.",
        f"Median of {raw['reps']} interleaved runs (round robin over tools per repetition), each a fresh process with a fresh HF_HOME, "
        "HOME and XDG_CACHE_HOME (no tool's cache survives a run; the 2nd run of a capacity default pair reuses the 1st's). "
        "All Hub ids are served by the local Hub on 127.0.0.1 (bench/speed/hub.py); `(catalog)` is capacity on its bundled copy of the same config."
        + (f" The local Hub waits {raw['latency_ms']:g} ms before each answer (--latency-ms: a network round trip)." if raw.get("latency_ms") else ""),
        "",
        "Versions: " + "; ".join(f"{tool} " + ", ".join(f"{k} {v}" for k, v in vs.items()) for tool, vs in raw["versions"].items()) + ".",
        "",
    ]
    if raw["not_installed"]:
        lines += ["Not installed: " + "; ".join(f"{k}: {v}" for k, v in raw["not_installed"].items()), ""]
    lines += ["## Wall seconds, median (CPU seconds of the process, median)", ""]
    cols = peer_names + cap_cols
    lines += ["| case | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for case in raw["cases"]:
        lines.append(f"| {case['id']} ({case['kind']}) | " + " | ".join(cell(t, case["id"]) for t in cols) + " |")

    for cap in [c for c in cap_cols if c in ("capacity formula (hub)", "capacity default (hub) 2nd")]:
        lines += ["", f"## Ratio {cap} / peer (wall medians; < 1: capacity faster)", ""]
        lines += ["| case | " + " | ".join(peer_names) + " | fastest peer |", "|---|" + "---|" * (len(peer_names) + 1)]
        for case in raw["cases"]:
            mine = wall(cap, case["id"])
            cells, fastest = [], None
            for p in peer_names:
                theirs = wall(p, case["id"])
                if theirs is None or mine is None:
                    cells.append(cell(p, case["id"]) if theirs is None else "-")
                    continue
                cells.append(f"{mine / theirs:.2f}")
                if fastest is None or theirs < fastest[1]:
                    fastest = (p, theirs)
            best = f"{mine / fastest[1]:.2f} ({fastest[0]})" if fastest and mine else "-"
            lines.append(f"| {case['id']} | " + " | ".join(cells) + f" | {best} |")

    lines += ["", "## Against issue 23's goals (wall medians)", ""]
    for cap, goal in (("capacity formula (hub)", 0.8), ("capacity formula (catalog)", 0.8), ("capacity default (hub) 2nd", 1.0), ("capacity default (catalog) 2nd", 1.0)):
        got = {c["id"]: wall(cap, c["id"]) for c in raw["cases"]} if cap in cap_cols else {}
        if got and None not in got.values():
            worst = max(got, key=lambda k: got[k])
            met = sum(v <= goal for v in got.values())
            lines.append(f"- {cap} <= {goal} s: {met} of {len(got)} cases; slowest {got[worst]:.2f} s ({worst}).")
    for cap in ("capacity formula (hub)", "capacity formula (catalog)"):
        ratios = []
        for c in raw["cases"]:
            peers_wall = [w for p in peer_names if (w := wall(p, c["id"])) is not None]
            mine = wall(cap, c["id"])
            if peers_wall and mine is not None:
                ratios.append((mine / min(peers_wall), c["id"]))
        if ratios:
            lines.append(f"- {cap} / fastest peer <= 2.5: {sum(r <= 2.5 for r, _ in ratios)} of {len(ratios)} cases; worst {max(ratios)[0]:.2f} ({max(ratios)[1]}).")
    lines += ["", "## Requests to the local Hub per run (median)", ""]
    lines += ["| case | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for case in raw["cases"]:
        cells = []
        for t in cols:
            got = [r["hub_requests"] for r in runs.get(t, {}).get(case["id"], []) if "hub_requests" in r]
            cells.append(f"{statistics.median(got):g}" if got else "-")
        lines.append(f"| {case['id']} | " + " | ".join(cells) + " |")
    lines += ["", "## What each peer is asked, and the cases it does not support", ""]
    for p in raw["peers"]:
        lines.append(f"- **{p['name']}** (`{p['command']}`; {'; '.join(p['install'])}): {p['asks']}.")
        for model, check in raw["not_supported"].get(p["name"], {}).items():
            evidence = f"exit {check['rc']}: {' / '.join(check.get('stderr_tail', [])[-2:])[:240]}"
            lines.append(f"  - n/a {model}: {check['reason']} (checked this run: {evidence})")
    lines += ["", "capacity: " + "; ".join(f"{v['name']}: `{v['command']}`" for v in raw["capacity_variants"]) + "."]
    if raw["failures"]:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in raw["failures"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
