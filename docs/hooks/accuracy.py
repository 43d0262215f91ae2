"""The accuracy page's tables and plots, written from the committed benchmark data under bench/ when the site is built:
the public-log benchmark (bench/results/predict-logs-*/results.json, `python bench/predict_logs.py`), the runs of
vLLM's own functions (bench/results/vllm-*/reference.json) and the H200 profiles (bench/results/h200-profiles-*/)."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.log_groups import group_tables  # noqa: E402  (the tables bench/predict_logs.py's README has)
from bench.log_tables import graph_table, start_table  # noqa: E402  (likewise)

RESULTS = ROOT / "bench" / "results"
H200_PROFILES = "h200-catalog-2026-12-01"  # the newest run that measured every term (28 catalog ids) against the formula estimate
TERMS = {  # results.json key -> what the log prints, what capacity compares it with
    "weights": ("weights", "'Model loading took' vs weights + load buffers", "GiB"),
    "non_kv": ("non-KV memory", "requested - available KV", "GiB"),
    "available_kv": ("available KV cache memory", "'Available KV cache memory'", "GiB"),
    "kv_tokens": ("KV cache tokens", "'GPU KV cache size: N tokens'", "tokens"),
}


def latest(prefix: str) -> Path:
    """The newest committed result folder of a benchmark (folders are named <prefix>-<date>[suffix])."""
    found = sorted(p for p in RESULTS.glob(f"{prefix}-2*") if p.is_dir())
    if not found:
        raise FileNotFoundError(f"no bench/results/{prefix}-* folder")
    return found[-1]


def predict_logs() -> tuple[Path, dict]:
    folder = latest("predict-logs")
    return folder, json.loads((folder / "results.json").read_text())


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f} %"


def summary_table(data: dict) -> str:
    lines = ["| half | term | logs | median abs. error | worst abs. error |", "|---|---|---:|---:|---:|"]
    for half in ("held-out", "calibration"):
        for term, stats in data["summary"][half].items():
            lines.append(f"| {half} | {term} | {stats['n']} | {stats['median_abs_percent']:.2f} % | {stats['worst_abs_percent']:.2f} % |")
    return "\n".join(lines)


def rows_table(data: dict) -> str:
    lines = [
        "| log | half | model | GPU | vLLM | compile cache | available KV: vLLM / capacity GiB | error | KV tokens error |",
        "|---|---|---|---|---|---|---:|---:|---:|",
    ]
    for row in sorted((r for r in data["rows"] if r["plannable"]), key=lambda r: (r["split"] != "held-out", r["log"])):
        v, c, e = row["vllm"], row["capacity"], row["error_percent"]
        kv = f"{v['available_kv']:.2f} / {c['available_kv']:.2f}" if v.get("available_kv") is not None and c.get("available_kv") is not None else ""
        lines.append(
            f"| `{row['log']}` | {row['split']} | {row['model']} | {row['gpu']} | {row['vllm_version']} | {row['compile_cache']} | {kv} | "
            f"{_pct(e.get('available_kv'))} | {_pct(e.get('kv_tokens'))} |"
        )
    return "\n".join(lines)


def blocked_table(data: dict) -> str:
    lines = ["| log | what blocks it |", "|---|---|"]
    for row in data["rows"]:
        if not row["plannable"]:
            lines.append(f"| `{row['log']}` | {' '.join(row['reason'].split()).replace('|', '/')} |")
    return "\n".join(lines)


def scatter_svg(data: dict, term: str) -> str:
    """Predicted against logged for one term, one point per plannable log, the held-out half marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label, what, unit = TERMS[term]
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    points = []
    for half, marker, colour in (("calibration", "o", "#8a8a8a"), ("held-out", "D", "#d62728")):
        xs, ys = [], []
        for row in data["rows"]:
            logged, planned = row["vllm"].get(term), row["capacity"].get(term)
            if row["plannable"] and row["split"] == half and logged is not None and planned is not None and logged > 0 and planned > 0:
                xs.append(logged)
                ys.append(planned)
        points += xs + ys
        ax.scatter(xs, ys, marker=marker, s=22, c=colour, label=f"{half} ({len(xs)} logs)", alpha=0.85, edgecolors="none")
    lo, hi = min(points) / 1.3, max(points) * 1.3
    ax.plot([lo, hi], [lo, hi], color="#1f77b4", linewidth=0.8, label="capacity = vLLM")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel=f"vLLM's log ({unit})", ylabel=f"capacity's plan ({unit})")
    ax.set_title(f"{label}: {what}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="major", linewidth=0.3)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def error_bars_svg(data: dict, term: str = "available_kv") -> str:
    """The error of one term per log, sorted, held-out bars marked; errors beyond +-20 % are drawn at the edge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(
        (r for r in data["rows"] if r["plannable"] and r["error_percent"].get(term) is not None), key=lambda r: r["error_percent"][term]
    )
    errors = [r["error_percent"][term] for r in rows]
    clipped = [max(-20.0, min(20.0, e)) for e in errors]
    colours = ["#d62728" if r["split"] == "held-out" else "#8a8a8a" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.bar(range(len(rows)), clipped, color=colours)
    for i, (e, c) in enumerate(zip(errors, clipped, strict=True)):
        if e != c:
            ax.text(i, c, f"{e:+.0f}%", ha="center", va="bottom" if c > 0 else "top", fontsize=6)
    ax.axhspan(-3, 3, color="#2ca02c", alpha=0.12, label="within 3 %")
    ax.set(ylabel="(capacity - vLLM) / vLLM, %", xticks=[], ylim=(-24, 24))
    ax.set_title(f"{TERMS[term][0]} per log (red: held-out half, grey: calibration half)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def reference_runs_table() -> str:
    """Every committed run of vLLM's own functions, with its case count and the test that compares capacity with it."""
    tests = ROOT / "tests"
    lines = ["| run | vLLM | cases | compared in |", "|---|---|---:|---|"]
    for folder in sorted(p for p in RESULTS.glob("vllm-*") if (p / "reference.json").is_file()):
        data = json.loads((folder / "reference.json").read_text())
        meta = data.get("meta", data) if isinstance(data.get("meta"), dict) else data
        version = meta.get("vllm_version") or meta.get("vllm") or meta.get("host_vllm") or ""
        cases = sum(len(v) for k, v in data.items() if isinstance(v, list))
        users = sorted(
            str(p.relative_to(ROOT)) for p in tests.rglob("*.py") if folder.name in p.read_text(errors="replace")
        )
        lines.append(f"| `bench/results/{folder.name}` | {version} | {cases} | {', '.join(f'`{u}`' for u in users) or 'its README'} |")
    return "\n".join(lines)


def h200_terms_table() -> tuple[str, list[tuple[str, float, float]]]:
    """The measured-vs-estimated table of the newest H200 profile run, as its README writes it, and (model, measured
    non-KV MiB, estimated non-KV MiB) for the plot."""
    folder = RESULTS / H200_PROFILES
    text = (folder / "README.md").read_text()
    section = text.split("## Terms (measured)", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    column = header.index("non-KV total (est.)")
    rows = []
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        m = re.match(r"([\d,.]+) \(([\d,.]+)\)", cells[column])
        if m:
            rows.append((cells[0], float(m.group(1).replace(",", "")), float(m.group(2).replace(",", ""))))
    intro = f"From `bench/results/{folder.name}/README.md` (MiB; offline formula estimate in parentheses):\n\n"
    return intro + "\n".join(table), rows


def h200_svg(rows: list[tuple[str, float, float]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.4))
    names = [r[0].split("/")[-1] for r in rows]
    ratio = [100 * (est - meas) / meas for _, meas, est in rows]
    ax.bar(range(len(rows)), ratio, color=["#d62728" if abs(x) > 10 else "#1f77b4" for x in ratio])
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(rows)), names, rotation=25, ha="right", fontsize=7)
    ax.set(ylabel="formula estimate vs H200, %")
    ax.set_title("non-KV memory: offline formula estimate against the H200 measurement", fontsize=9)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def markers() -> dict[str, str]:
    """Markdown that replaces each `<!-- capacity:NAME -->` of the accuracy page (tables and image links; no plotting)."""
    folder, data = predict_logs()
    h200_table, _ = h200_terms_table()
    plannable = sum(r["plannable"] for r in data["rows"])
    return {
        "predict-logs-source": f"`bench/results/{folder.name}/` ({len(data['rows'])} logs, {plannable} plannable; split: {data['split_rule']})",
        "predict-logs-summary": summary_table(data),
        "predict-logs-plots": "\n\n".join(f"![{TERMS[t][0]}: capacity against the log]({t}.svg)" for t in TERMS),
        "predict-logs-per-log": "![available KV cache memory, error per log](available_kv_per_log.svg)",
        "predict-logs-rows": rows_table(data),
        "predict-logs-blocked": blocked_table(data),
        "predict-logs-start": "\n".join(start_table(data["rows"])),
        "predict-logs-graphs": "\n".join(graph_table(data["rows"])),
        "predict-logs-groups": "\n".join(group_tables(data["summary_by_group"])[2:]).replace("### ", "#### "),
        "vllm-reference-runs": reference_runs_table(),
        "h200-terms": h200_table,
        "h200-plot": "![non-KV memory, formula against the H200](h200_non_kv.svg)",
    }


def figures() -> dict[str, str]:
    """The accuracy page's plots (SVG, drawn with matplotlib: the docs extra), by site path."""
    _, data = predict_logs()
    files = {f"accuracy/{term}.svg": scatter_svg(data, term) for term in TERMS}
    files["accuracy/available_kv_per_log.svg"] = error_bars_svg(data)
    files["accuracy/h200_non_kv.svg"] = h200_svg(h200_terms_table()[1])
    return files


def generated() -> tuple[dict[str, str], dict[str, str]]:
    """(files to add to the site: path -> content, markers: name -> Markdown that replaces `<!-- capacity:name -->`)."""
    return figures(), markers()
