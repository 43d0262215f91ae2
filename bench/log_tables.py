"""Two tables of the log benchmark, read from its rows (results.json's `rows`, or `dataclasses.asdict` of
bench/predict_logs.py's Row): will each start start, and capacity's CUDA-graph estimate beside what the logs print.
bench/predict_logs.py's README and the accuracy page (docs/hooks/accuracy.py) both show them."""

from __future__ import annotations

from typing import Any


def _gib(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def start_table(rows: list[dict[str, Any]]) -> list[str]:
    """Every plannable log where capacity raises an error hazard or whose start did not complete (its sidecar's
    `outcome`), after one line counting both ways."""
    plannable = [r for r in rows if r["plannable"]]
    started = [r for r in plannable if not r.get("outcome")]
    failed = [r for r in plannable if r.get("outcome")]
    lines = [
        f"{sum(bool(r.get('start_errors')) for r in started)} of {len(started)} plannable starts that completed (or whose excerpt does "
        f"not say otherwise) raise an error hazard; {sum(bool(r.get('start_errors')) for r in failed)} of {len(failed)} that failed do.",
        "",
        "| log | half | capacity's error hazards | the start |",
        "|---|---|---|---|",
    ]
    for r in plannable:
        if r.get("start_errors") or r.get("outcome"):
            lines.append(f"| {r['log']} | {r['split']} | {', '.join(r.get('start_errors') or []) or 'none'} | {(r.get('outcome') or 'started').split(';')[0]} |")
    return lines


def graph_table(rows: list[dict[str, Any]]) -> list[str]:
    """Each plannable log that prints vLLM's graph estimate or its capture: both, capacity's estimate (set aside or
    captured after the KV cache), and the capture logged (else vLLM's estimate) over capacity's."""
    lines = ["| log | half | vLLM | vLLM's estimate (GiB) | capture logged (GiB) | capacity (GiB) | logged / capacity |", "|---|---|---|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: r["log"]):
        b = r.get("breakdown") or {}
        est, took, mine = b.get("log_cuda_graph_estimate_gib"), b.get("log_graph_capture_gib"), b.get("capacity_graph_estimate_gib")
        if not r["plannable"] or (est is None and took is None):
            continue
        logged = took if took is not None else est
        ratio = f"{logged / mine:.2f}" if logged is not None and mine else "-"
        lines.append(f"| {r['log']} | {r['split']} | {r['vllm_version'] or '-'} | {_gib(est)} | {_gib(took)} | {_gib(mine)} | {ratio} |")
    return lines
