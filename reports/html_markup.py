"""Markup for the self-contained HTML pages: escaped elements, tables, number formats, the page shell and its CSS.

Every text is escaped: pages are built with `el()`, which escapes each `str` child and attribute
value; only `Html` values (markup built by `el()` itself) pass through unescaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import capacity
from capacity.units import GiB


class Html(str):
    """Markup that is already safe: built by `el()` or from constants of this module.

    Html + Html stays Html; Html + str escapes the str.
    """

    def __add__(self, other: str) -> Html:
        return Html(str.__add__(self, other if isinstance(other, Html) else esc(other)))


def esc(value: object) -> Html:
    return Html(html.escape(str(value), quote=True))


def _children(items: Iterable[Any]) -> str:
    out = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, Html):
            out.append(item)
        elif isinstance(item, (str, int, float)):
            out.append(esc(item))
        else:
            out.append(_children(item))
    return "".join(out)


def el(tag: str, *children: Any, **attrs: object) -> Html:
    """<tag attrs>children</tag>; `class_` is `class`, `data_x` is `data-x`; None/False attributes are left out."""
    parts = [tag]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        parts.append(name if value is True else f'{name}="{esc(value)}"')
    return Html(f"<{' '.join(parts)}>{_children(children)}</{tag}>")


def fmt_num(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.2f}"


def fmt_gib(n: int | float) -> str:
    return f"{n / GiB:,.2f} GiB"


def data_table(headers: list[str], rows: Iterable[list[Any]], *, cls: str = "", numeric: Iterable[int] = ()) -> Html:
    right = set(numeric)
    head = el("thead", el("tr", [el("th", h, class_="num" if i in right else None) for i, h in enumerate(headers)]))
    body = el(
        "tbody",
        [
            el(
                "tr",
                [
                    cell if isinstance(cell, Html) and cell.startswith("<td") else el("td", cell, class_="num" if i in right else None)
                    for i, cell in enumerate(row)
                ],
            )
            for row in rows
        ],
    )
    return el("table", head, body, class_=cls or None)


def html_page(title: str, subtitle: Html, *sections: Html) -> str:
    head = (
        Html('<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">') + el("title", title) + Html(f"<style>{CSS}</style>")
    )
    body = el(
        "body",
        el("header", el("h1", title), el("p", subtitle, class_="sub")),
        el("main", *sections),
        el(
            "footer",
            f"capacity {capacity.__version__} · vLLM {capacity.VLLM_VERSION} semantics (Model Runner V2) · self-contained page: no scripts, no network",
        ),
    )
    return "<!DOCTYPE html>\n" + el("html", el("head", head), body, lang="en") + "\n"


CSS = """
:root{--fg:#1d232b;--muted:#5d6875;--line:#d9dee4;--bg:#f6f7f9;--ok:#1f7a3a;--bad:#b3261e;--warn:#a15c00}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:18px 28px 10px;background:#fff;border-bottom:1px solid var(--line)}
h1{margin:0;font-size:22px}
.sub{margin:4px 0 0;color:var(--muted)}
.model{color:var(--fg);word-break:break-all}
main{padding:14px 28px;display:grid;gap:14px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px 16px}
h2{margin:0 0 8px;font-size:17px}
h3{margin:12px 0 6px;font-size:14px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:var(--muted);font-size:12.5px}
.big{font-size:19px;font-weight:700;margin:4px 0 8px}
.verdict.fits{border-left:6px solid var(--ok)}
.verdict.fits .big{color:var(--ok)}
.verdict.nofit{border-left:6px solid var(--bad)}
.verdict.nofit .big,.bad{color:var(--bad)}
.good{color:var(--ok)}
pre{background:#111820;color:#e8edf2;padding:10px 12px;border-radius:6px;white-space:pre-wrap;word-break:break-all;margin:4px 0}
pre.serve{word-break:normal;overflow-x:auto}
pre.serve .arg{white-space:nowrap}
svg.bar{width:100%;height:auto;display:block;margin:6px 0}
.seglabel{font-size:13px;fill:#fff;text-anchor:middle;font-weight:600;paint-order:stroke;stroke:rgba(0,0,0,.35);stroke-width:2px}
.seglabel.dark{fill:#4a535e;stroke:none}
.marker{stroke:#1d232b;stroke-width:2;stroke-dasharray:5 3}
.marker.over{stroke:var(--bad)}
.markerlabel{font-size:12px;fill:#1d232b}
.markerlabel.over{fill:var(--bad)}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.kind{display:inline-block;padding:0 6px;border-radius:9px;font-size:12px;border:1px solid}
.kind-exact{color:var(--ok);border-color:var(--ok)}
.kind-estimated{color:var(--warn);border-color:var(--warn)}
.kind-measured{color:#0b6aa2;border-color:#0b6aa2}
.totals td{color:var(--muted)}
ul.hazards{list-style:none;padding:0;margin:0}
li.hazard{border:1px solid var(--line);border-left-width:5px;border-radius:6px;padding:6px 10px;margin:6px 0}
li.hazard p{margin:4px 0}
li.hazard-error{border-left-color:var(--bad)}
li.hazard-warning{border-left-color:var(--warn)}
li.hazard-info{border-left-color:#8a94a0}
.sev{display:inline-block;font-size:11px;text-transform:uppercase;font-weight:700;margin-right:8px;padding:0 6px;border-radius:4px;color:#fff}
.sev-error{background:var(--bad)}
.sev-warning{background:var(--warn)}
.sev-info{background:#8a94a0}
.fix{color:var(--muted)}
table.heat{width:auto}
table.heat td{min-width:96px;text-align:center;border:2px solid #fff}
table.heat .v{display:block;font-weight:700;font-size:15px}
table.heat .why{display:block;font-size:11px;opacity:.85}
td.nofit{background:repeating-linear-gradient(45deg,#f6d5d2,#f6d5d2 6px,#fbe9e7 6px,#fbe9e7 12px);color:var(--bad)}
.panel{display:inline-block;margin:0 10px 10px 0;vertical-align:top}
footer{padding:8px 28px 20px;color:var(--muted);font-size:12px}
"""
