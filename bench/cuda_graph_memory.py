"""What CUDA graphs cost in device memory when a decoder is captured piece by piece, as vLLM's PIECEWISE mode does.

vLLM 0.29-0.33 (Model Runner V2, `cudagraph_utils.profile_cudagraph_memory`) measures every PIECEWISE graph in full
before it sizes the KV cache, and the V1 runner (0.19-0.28) extrapolates its first two; both subtract the result from
the KV budget. The measured figure is the drop in free memory (mem_get_info) over the capture: the graph pool's
segments, the allocator cache the warmup forwards leave, and the memory the driver keeps per instantiated graph
(outside torch). This measures those parts on the GPU at hand, with plain torch (not vLLM's kernels):

- `nodes`: G graphs of n kernel nodes each (elementwise kernels on a small tensor, or n GEMMs), one pool:
  the driver's bytes per graph and per node.
- `piecewise`: a decoder of L layers (Qwen3-8B's widths unless given) split where vLLM splits it, at attention: L + 1
  pieces (o_proj, residual, RMSNorm, MLP, residual, the next layer's RMSNorm and QKV projection; attention itself runs
  outside the graphs and writes into a static buffer). For each capture size, largest first, each piece is warmed up
  and captured into one shared pool; piece outputs are dropped after each size, as vLLM's weak references let the
  pool reuse them. `eager` runs torch's kernels; `compiled` runs one Inductor graph per piece with a dynamic batch size
  (vLLM 0.33's Inductor options).

Each case runs in a fresh process.

    python bench/cuda_graph_memory.py OUT_DIR [--cases nodes | qwen3-0.6b,qwen3-8b,qwen3-32b]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VLLM_INDUCTOR = {"combo_kernels": True, "benchmark_combo_kernel": True}


def capture_sizes_256() -> list[int]:
    """vLLM's capture sizes at max_num_seqs 256, max_num_batched_tokens >= 512 (51 sizes, largest 512)."""
    from types import SimpleNamespace

    from capacity.memory.cuda_graphs import capture_sizes

    # capture_sizes reads these three of a ServingConfig
    return capture_sizes(SimpleNamespace(max_num_seqs=256, max_num_batched_tokens=2048, num_speculative_tokens=0), sm100=False)  # type: ignore[arg-type]


def _free(torch) -> int:  # noqa: ANN001
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def child_nodes(kind: str, nodes: int, graphs: int) -> dict[str, object]:
    import torch

    device = torch.device("cuda")
    if kind == "elementwise":
        x = torch.ones(256, device=device)

        def body() -> object:
            y = x
            for _ in range(nodes):
                y = y * 1.0001
            return y
    else:
        a = torch.randn(64, 1024, device=device, dtype=torch.bfloat16)
        w = torch.randn(1024, 1024, device=device, dtype=torch.bfloat16)

        def body() -> object:
            y = a
            for _ in range(nodes):
                y = torch.nn.functional.linear(y, w)
            return y

    body()  # cuBLAS handle and workspace, kernels loaded
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    pool = torch.cuda.graph_pool_handle()
    keep = []
    free0, reserved0 = _free(torch), torch.cuda.memory_reserved()
    for _ in range(graphs):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            out = body()
        keep.append(g)
        del out
    free1, reserved1 = _free(torch), torch.cuda.memory_reserved()
    taken, reserved = free0 - free1, reserved1 - reserved0
    return {
        "case": f"nodes-{kind}",
        "nodes_per_graph": nodes,
        "graphs": graphs,
        "free_drop_bytes": taken,
        "torch_reserved_growth_bytes": reserved,
        "outside_torch_bytes": taken - reserved,
        "outside_torch_per_graph_bytes": (taken - reserved) / graphs,
        "outside_torch_per_node_bytes": (taken - reserved) / (graphs * nodes),
    }


def child_piecewise(
    mode: str, layers: int, hidden: int, inter: int, heads: int, kv_heads: int, head_dim: int, sizes: list[int], full_largest: int = 256
) -> dict[str, object]:
    import torch
    import torch.nn.functional as F

    device, dtype = torch.device("cuda"), torch.bfloat16
    q_size, kv_size = heads * head_dim, kv_heads * head_dim

    def rms(x, w):  # noqa: ANN001, ANN202
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(v + 1e-6)).to(x.dtype) * w

    def piece(h, attn, wo, wn2, wgu, wd, wn1, wqkv):  # noqa: ANN001, ANN202
        h = h + F.linear(attn, wo)
        gu = F.linear(rms(h, wn2), wgu)
        g, u = gu.chunk(2, dim=-1)
        h = h + F.linear(F.silu(g) * u, wd)
        return h, F.linear(rms(h, wn1), wqkv)

    def first(h, wn1, wqkv):  # noqa: ANN001, ANN202
        return h, F.linear(rms(h, wn1), wqkv)

    def weights() -> tuple:
        def t(*shape: int) -> object:
            return torch.randn(*shape, device=device, dtype=dtype) * 0.02

        return (t(hidden, q_size), torch.ones(hidden, device=device, dtype=dtype), t(2 * inter, hidden), t(hidden, inter),
                torch.ones(hidden, device=device, dtype=dtype), t(q_size + 2 * kv_size, hidden))

    per_layer = [weights() for _ in range(layers)]
    run_piece, run_first = piece, first
    if mode == "compiled":
        run_piece = torch.compile(piece, dynamic=True, options=VLLM_INDUCTOR)
        run_first = torch.compile(first, dynamic=True, options=VLLM_INDUCTOR)
    largest = max(sizes)
    h_buf = torch.randn(largest, hidden, device=device, dtype=dtype)
    attn_buf = torch.zeros(largest, q_size, device=device, dtype=dtype)  # attention's output, written outside the graphs

    def forward(n: int, capture: torch.cuda.graph_pool_handle | None, graphs: list) -> None:  # noqa: ANN001
        def call(fn, *args):  # noqa: ANN001, ANN202
            if capture is None:
                return fn(*args)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=capture):
                out = fn(*args)
            graphs.append(g)
            return out

        wo, wn2, wgu, wd, wn1, wqkv = per_layer[0]
        h, qkv = call(run_first, h_buf[:n], wn1, wqkv)
        for i in range(layers):
            attn_buf[:n].copy_(qkv[:, :q_size])  # stands for attention (outside the graphs)
            nxt = per_layer[i + 1] if i + 1 < layers else per_layer[0]
            wo, wn2, wgu, wd, _, _ = per_layer[i]
            h, qkv = call(run_piece, h, attn_buf[:n], wo, wn2, wgu, wd, nxt[4], nxt[5])
        del h, qkv

    t0 = time.time()
    with torch.inference_mode():
        for n in sizes:  # compile (Inductor) and load every kernel before anything is measured
            forward(n, None, [])
        compile_s = time.time() - t0
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free0, reserved0 = _free(torch), torch.cuda.memory_reserved()
        pool = torch.cuda.graph_pool_handle()
        graphs: list = []
        steps = []
        for k, n in enumerate(sorted(sizes, reverse=True)):
            forward(n, None, [])  # vLLM's warmup forward of each size (CUDAGraphMode.NONE), then its capture
            forward(n, pool, graphs)
            if k < 2 or k == len(sizes) - 1:
                steps.append({"size": n, "graphs": len(graphs), "free_drop_bytes": free0 - _free(torch), "torch_reserved_growth_bytes": torch.cuda.memory_reserved() - reserved0})
        free1, reserved1 = _free(torch), torch.cuda.memory_reserved()
        # then the FULL decode graphs, as vLLM captures them after the PIECEWISE ones into the same pool: the whole
        # forward (every piece and the attention stand-in) in one graph per size up to max_num_seqs
        full_sizes = sorted((n for n in sizes if n <= full_largest), reverse=True)
        full_graphs: list = []
        full_steps = []
        for k, n in enumerate(full_sizes):
            forward(n, None, [])
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                forward(n, None, [])
            full_graphs.append(g)
            if k < 2 or k == len(full_sizes) - 1:
                full_steps.append({"size": n, "graphs": len(full_graphs), "free_drop_bytes": free1 - _free(torch), "torch_reserved_growth_bytes": torch.cuda.memory_reserved() - reserved1})
        free2, reserved2 = _free(torch), torch.cuda.memory_reserved()
    taken, reserved = free0 - free1, reserved1 - reserved0
    return {
        "case": f"piecewise-{mode}",
        "full": {
            "graphs": len(full_graphs),
            "largest": full_sizes[0] if full_sizes else 0,
            "free_drop_bytes": free1 - free2,
            "torch_reserved_growth_bytes": reserved2 - reserved1,
            "first_sizes": full_steps,
        },
        "layers": layers,
        "widths": {"hidden": hidden, "intermediate": inter, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim},
        "sizes": len(sizes),
        "largest": largest,
        "graphs": len(graphs),
        "pieces_per_size": layers + 1,
        "free_drop_bytes": taken,
        "torch_reserved_growth_bytes": reserved,
        "outside_torch_bytes": taken - reserved,
        "outside_torch_per_graph_bytes": (taken - reserved) / len(graphs),
        "first_sizes": steps,
        "compile_and_load_seconds": round(compile_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--cases", default="qwen3-8b", help="'nodes', or decoders: qwen3-0.6b,qwen3-8b,qwen3-32b")
    ap.add_argument("--child", default=None)
    ap.add_argument("--args", default="{}")
    ns = ap.parse_args()
    if ns.child:
        args = json.loads(ns.args)
        result = child_nodes(**args) if ns.child == "nodes" else child_piecewise(**args)
        print("RESULT " + json.dumps(result))
        return
    import torch

    ns.out.mkdir(parents=True, exist_ok=True)
    sizes = capture_sizes_256()
    widths = {  # Qwen3-0.6B, Qwen3-8B and Qwen3-32B's decoders (layers, widths)
        "qwen3-0.6b": {"layers": 28, "hidden": 1024, "inter": 3072, "heads": 16, "kv_heads": 8, "head_dim": 128},
        "qwen3-8b": {"layers": 36, "hidden": 4096, "inter": 12288, "heads": 32, "kv_heads": 8, "head_dim": 128},
        "qwen3-32b": {"layers": 64, "hidden": 5120, "inter": 25600, "heads": 64, "kv_heads": 8, "head_dim": 128},
    }
    if ns.cases == "nodes":
        cases = [("nodes", {"kind": "elementwise", "nodes": n, "graphs": 200}) for n in (1, 8, 32, 128)]
        cases += [("nodes", {"kind": "gemm", "nodes": n, "graphs": 200}) for n in (1, 8, 32)]
    else:
        cases = [("piecewise", {"mode": m, "sizes": sizes, **widths[w]}) for w in ns.cases.split(",") for m in ("compiled", "eager")]
    results = []
    for child, args in cases:
        proc = subprocess.run([sys.executable, __file__, str(ns.out), "--child", child, "--args", json.dumps(args)], capture_output=True, text=True, timeout=400)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            results.append({"case": child, "args": {k: v for k, v in args.items() if k != "sizes"}, "error": proc.stderr[-2000:]})
        else:
            results.append(json.loads(line[7:]))
        print(json.dumps(results[-1])[:400], flush=True)
    from bench.machine import package_versions

    out = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "driver": _driver(),
        "cuda_runtime": torch.version.cuda,
        "versions": package_versions(("torch", "triton"), "not installed"),
        "capture_sizes": sizes,
        "results": results,
    }
    (ns.out / "results.json").write_text(json.dumps(out, indent=1) + "\n")


def _driver() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
