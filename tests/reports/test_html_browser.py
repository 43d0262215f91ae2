"""The HTML reports in a real browser: headless Chromium renders them, the DOM is read back and checked,
and a screenshot is saved as a test artifact (test-artifacts/, or $CAPACITY_TEST_ARTIFACTS).

CI installs Debian's `chromium` (.ci/run, which sets CI=true). Without a browser the tests skip and say why,
so the README's test command passes on a fresh machine; under CI=true a missing browser is a failure.

whisper-tiny with --kv-cache-memory-bytes 1G on an H200, worked by hand: page 2 x 16 x 6 heads x 64 x 2 B
= 24,576 B, 4 decoder layers -> 98,304 B per block; 1 GiB // 98,304 = 10,922 blocks; a request holds
cdiv(448, 16) + cdiv(1500, 16) = 28 + 94 = 122 blocks -> 10,921 // 122 = 89 requests.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from capacity.cli.app import main
from capacity.errors import EXIT_FITS
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.formula("it tests the CLI's plumbing (arguments, errors, exit codes, outputs), which no estimate changes; the formulas keep each plan under a second")

ROOT = REPO_ROOT
CATALOG = ROOT / "capacity" / "source" / "catalog" / "models"
SCRIPT = "<script>alert(1)</script>"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab, .ci/run): the browser was installed, so its absence is a failure."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    missing = f"no headless browser on PATH ({', '.join(BROWSERS)}); install one (Debian: apt-get install -y chromium) to run the HTML checks"
    if in_ci():
        pytest.fail(f"{missing}: CI=true, where .ci/run installs Chromium, so this is a failure")
    pytest.skip(missing)


@pytest.fixture
def browser() -> str:
    """The browser, found before any report is built: a machine without one skips at once."""
    return chromium()


def artifacts() -> Path:
    folder = Path(os.environ.get("CAPACITY_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_chromium(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    profile.mkdir()  # a fresh, empty profile for every launch
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *flags, page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


class Dom(HTMLParser):
    """The rendered DOM: its text outside <style> (entities decoded, as a reader sees it), element ids and classes, tags."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.ids: set[str] = set()
        self.classes: list[str] = []
        self.tags: list[str] = []
        self._skip = 0
        self.feed(markup)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        self.classes += (values.get("class") or "").split()
        if tag == "style":
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "style" and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)

    @property
    def content(self) -> str:
        return " ".join("".join(self.text).split())


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_plan_report_in_chromium(browser, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    folder = tmp_path / "<script>alert(1)<" / "script>" / "whisper-tiny"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((CATALOG / "openai--whisper-tiny.json").read_text())
    report = tmp_path / "report.html"
    code = main(["plan", "--model", str(folder), "--gpu", "H200", "--kv-cache-memory-bytes", "1G", "--html", str(report)])
    capsys.readouterr()
    assert code == EXIT_FITS

    dom = Dom(run_chromium(report, tmp_path / "profile-dom", "--dump-dom").stdout)
    assert "script" not in dom.tags  # the name from the input was not turned into a script element
    assert {"verdict", "memory", "kv", "budget", "warmup", "hazards", "knobs", "provenance", "fingerprint"} <= dom.ids
    text = dom.content
    assert SCRIPT in text  # shown literally
    assert "FITS: the KV cache holds 89 requests at max_model_len 448; the server runs 89 at once (the smaller of that and max_num_seqs 1024)" in text
    assert "10,922" in text and "98,304" in text  # num_blocks, bytes per block
    assert "vllm serve" in text and "--kv-cache-memory-bytes 1073741824" in text
    assert "vLLM 0.33.0 semantics" in text and "config_sha256" in text
    for term in ("weights", "activation_peak", "encoder_cache", "non_torch", "cuda_graphs", "kv_cache", "unused"):
        assert f"seg-{term}" in dom.classes, term

    shot = artifacts() / "html-report.png"
    shot.unlink(missing_ok=True)
    run_chromium(report, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1400,2000")
    assert png_size(shot) == (1400, 2000)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one


def test_sweep_heatmap_in_chromium(browser, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    page = tmp_path / "sweep.html"
    code = main(
        [
            "sweep",
            "--model",
            "openai/whisper-large-v3",
            "--gpu",
            "L4,H200",
            "--max-num-seqs",
            "16,256",
            "--max-model-len",
            "448,9000",
            "--kv-cache-memory-bytes",
            "10G",
            "--html",
            str(page),
        ]
    )
    capsys.readouterr()
    assert code == EXIT_FITS
    dom = Dom(run_chromium(page, tmp_path / "profile-dom", "--dump-dom").stdout)
    assert {"sweep-summary", "heatmap"} <= dom.ids
    assert dom.classes.count("fit") == 4 and dom.classes.count("nofit") == 4
    text = dom.content
    assert "✓ 33" in text and "✓ 16" in text and "max_model_len_above_model_limit" in text
    shot = artifacts() / "sweep-heatmap.png"
    shot.unlink(missing_ok=True)
    run_chromium(page, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1400,2000")
    assert png_size(shot) == (1400, 2000)


def test_no_browser_skips_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no browser on PATH
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no headless browser on PATH.*apt-get install -y chromium"):
        chromium()


@pytest.mark.parametrize("ci", ["true", "1"])
def test_no_browser_under_ci_fails(tmp_path, monkeypatch, ci):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        chromium()


def test_a_browser_on_path_is_used(tmp_path, monkeypatch):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    assert chromium() == str(fake)


LAYOUT_PROBE = """<script>
const box = (e) => e.getBoundingClientRect();
const labels = [...document.querySelectorAll("svg.bar text")].map((e) => ({text: e.textContent, r: box(e)}));
const overlaps = [];
labels.forEach((a, i) => labels.slice(i + 1).forEach((b) => {
  if (a.r.left < b.r.right && b.r.left < a.r.right && a.r.top < b.r.bottom && b.r.top < a.r.bottom) overlaps.push([a.text, b.text]);
}));
const svg = box(document.querySelector("svg.bar"));
const outside = labels.filter((l) => l.r.left < svg.left - 0.5 || l.r.right > svg.right + 0.5).map((l) => l.text);
const segs = [...document.querySelectorAll("svg.bar rect.seg")].map(box);
const spill = [...document.querySelectorAll("svg.bar text.seglabel")].filter((e) => {
  const r = box(e), cx = (r.left + r.right) / 2, seg = segs.find((s) => s.left <= cx && cx <= s.right);
  return !seg || r.left < seg.left || r.right > seg.right;
}).map((e) => e.textContent);
const args = [...document.querySelectorAll("pre.serve .arg")];
const broken = args.filter((a) => a.getClientRects().length > 1).map((a) => a.textContent);
const lines = new Set(args.map((a) => Math.round(a.getClientRects()[0].top))).size;
const out = document.createElement("pre");
out.id = "layout-probe";
out.textContent = JSON.stringify({labels: labels.map((l) => l.text), overlaps, outside, spill, args: args.length, broken, lines});
document.body.appendChild(out);
</script>"""


def probe_layout(report: Path, tmp_path: Path, width: int) -> dict:
    """Lay the report out in Chromium at `width` pixels and read where its bar labels and serve-line flags landed: a
    copy of the page with a script that measures them (the report itself holds no script)."""
    import json

    page = tmp_path / f"probe-{width}.html"
    page.write_text(report.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    dom = run_chromium(page, tmp_path / f"profile-probe-{width}", "--dump-dom", f"--window-size={width},1600").stdout
    start = dom.index('<pre id="layout-probe">') + len('<pre id="layout-probe">')
    import html

    return json.loads(html.unescape(dom[start : dom.index("</pre>", start)]))


def test_over_committed_bar_labels_never_overlap_and_the_serve_line_wraps_between_flags(browser, tmp_path, capsys):
    # whisper-large-v3 on an L4 at --gpu-memory-utilization 0.99: the requested 0.99 x 22.03 GiB plus the CUDA context
    # and the other terms outside the request pass the GPU's total, so the bar carries both markers close together
    report = tmp_path / "over.html"
    code = main(["plan", "--model", "openai/whisper-large-v3", "--gpu", "L4", "--gpu-memory-utilization", "0.99", "--html", str(report)])
    capsys.readouterr()
    assert code == 1  # requested_exceeds_free: does not fit
    for width in (1400, 900, 560):
        layout = probe_layout(report, tmp_path, width)
        assert any(t.startswith("GPU total 22.03 GiB: over-committed by") for t in layout["labels"]), layout
        assert any(t.startswith("requested: 0.99 x total = 21.81 GiB") for t in layout["labels"]), layout
        assert layout["overlaps"] == [] and layout["outside"] == [] and layout["spill"] == [], (width, layout)
        assert all(t.endswith(" GiB") for t in layout["labels"]), layout  # GiB, as the tables say, never "G"
        assert layout["args"] >= 4 and layout["broken"] == [], (width, layout)  # a flag and its value never split
    assert layout["lines"] > 1  # at 560 px the serve line did wrap, between flags
