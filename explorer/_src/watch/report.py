"""How a :class:`~explorer._src.watch.session.Watch` reads: the ranking as text, a notebook
fragment, one standalone page.

The page carries everything inline (its styles, one SVG chart), so it opens offline. Every piece
of text from the user's program (names, paths, reasons) goes through ``html.escape``.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.ranking import rank_compiles
from ..diagnose import report as diagnose_report
from ..util.pages import write_page

GENERATOR = "pytree-compile-explorer watch"
TOP_TEXT = 10
TOP_CHART = 15
def summary_frame(w: Any) -> pd.DataFrame:
    """The per-function ranking (see ``Watch.summary``)."""
    out = rank_compiles(w.to_frame())
    out.attrs.update(wall_s=w.wall_s, compile_s=w.compile_s, total_s=w.total_s,
                     share_of_wall=w.share_of_wall)
    return out


# -- text ------------------------------------------------------------------------------------
def _s(x: Any) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{x:.3g} s"


def _where(where: str) -> str:
    """A path under the current folder, shown relative to it."""
    try:
        rel = os.path.relpath(where)
    except ValueError:
        return where
    return rel if not rel.startswith("..") else where


def headline(w: Any) -> str:
    records = w.compiles
    if not records:
        state = "is still running" if w.wall_s is None else f"ran {w.wall_s:.3g} s"
        return (f"explorer.watch: no compilations. The block {state} and compiled nothing: "
                "everything it ran came from JAX's in-memory caches, or nothing ran under jit.")
    functions = len({(r.name, r.where) for r in records})
    trace = sum(r.trace_s or 0.0 for r in records)
    lower = sum(r.lower_s or 0.0 for r in records)
    hits = sum(r.cache_hit for r in records)
    parts = [(f"explorer.watch: {len(records)} compilation{'s' * (len(records) != 1)} of "
              f"{functions} function{'s' * (functions != 1)}: XLA compile {_s(w.compile_s)}, "
              f"trace {_s(trace)}, lower {_s(lower)}")]
    if hits:
        parts.append(f"{hits} served by the persistent cache")
    if w.wall_s:
        parts.append(f"compilation took {w.share_of_wall:.0%} of the program's "
                     f"{w.wall_s:.3g} s wall time (the watch's own listening: "
                     f"{_s(w.overhead_s)})")
    return "; ".join(parts) + "."


def ranking_lines(w: Any, top: int = TOP_TEXT) -> list[str]:
    table = w.summary()
    if table.empty:
        return []
    lines = [(f"{'#':>3}  {'compile':>9}  {'share':>5}  {'n':>4}  function (where) — why it "
              "compiled again")]
    for i, row in enumerate(table.head(top).itertuples(index=False), 1):
        share = "" if pd.isna(row.share) else f"{row.share:.0%}"
        why = f" — {row.reason}" if isinstance(row.reason, str) else ""
        lines.append(f"{i:>3}  {_s(row.compile_s):>9}  {share:>5}  {row.compiles:>4}  "
                     f"{row.name} ({_where(row.where)}){why}")
    if len(table) > top:
        rest = table.iloc[top:]
        lines.append(f"     ... {len(rest)} more function(s), {_s(rest['compile_s'].sum())} "
                     "of compile together")
    return lines


def findings_lines(w: Any) -> list[str]:
    out = []
    for f in w.findings:
        if f.diagnosis is None and not f.users and not (f.compiles > 1 and f.reason):
            continue  # nothing to say of an eager operation compiled once
        out.append(f"findings for {f.name} ({_where(f.where)}): {f.share:.0%} of the compile "
                   f"time, {f.compiles} compile(s), {_s(f.compile_s)} recorded")
        if f.compiles > 1 and f.reason:
            out.append(f"  [recompiled] {f.compiles} compilations; why: {f.reason}")
        if f.diagnosis is None:
            out.append(f"  {f.note}")
            continue
        if not f.diagnosis.findings:
            out.append(f"  {diagnose_report.no_findings(f.diagnosis)}")
        for finding in f.diagnosis.findings:
            out.append(f"  [{finding.kind}] {finding.message}")
            out.append(f"      remedy: {finding.remedy.split(chr(10) * 2, 1)[0]}")
            out.append(f"      saving: {finding.saving}")
    return out


def text(w: Any, top: int = TOP_TEXT, findings: bool = True) -> str:
    lines = [headline(w), *ranking_lines(w, top)]
    lines += [f"note: {n}" for n in w.notes]
    if findings and w.findings_wanted and w.wall_s is not None:
        lines += findings_lines(w)
    return "\n".join(lines)


# -- HTML ------------------------------------------------------------------------------------
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cell(value: Any, seconds: bool = False) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if seconds:
        return f"{value:.3g}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _chart(table: pd.DataFrame) -> str:
    """Horizontal bars, one per function: trace, lower and XLA-compile seconds stacked."""
    rows = table.head(TOP_CHART)
    if rows.empty:
        return ""
    widest = max(float(r.total_s) for r in rows.itertuples()) or 1.0
    label_w, bar_w, row_h = 330, 420, 22
    h = row_h * len(rows) + 34
    colours = (("trace_s", "#a6bddb", "trace"), ("lower_s", "#74a9cf", "lower"),
               ("compile_s", "#0570b0", "XLA compile"))
    parts = []
    for i, r in enumerate(rows.itertuples()):
        y = 8 + i * row_h
        label = f"{r.name} ({_where(r.where)})"
        label = label if len(label) <= 48 else label[:47] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" font-size="12" '
                     f'text-anchor="end">{_e(label)}</text>')
        x = float(label_w)
        for col, colour, stage in colours:
            v = getattr(r, col)
            if v is None or pd.isna(v) or v <= 0:
                continue
            width = v / widest * bar_w
            parts.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{max(width, 0.5):.1f}" '
                         f'height="{row_h - 6}" fill="{colour}"><title>{_e(stage)}: '
                         f"{v:.3g} s</title></rect>")
            x += width
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 14}" font-size="11">'
                     f"{float(r.total_s):.3g} s × {r.compiles}</text>")
    ly = h - 12
    for j, (_col, colour, stage) in enumerate(colours):
        parts.append(f'<rect x="{label_w + j * 110}" y="{ly - 9}" width="10" height="10" '
                     f'fill="{colour}"/><text x="{label_w + j * 110 + 14}" y="{ly}" '
                     f'font-size="11">{_e(stage)}</text>')
    return (f'<svg width="{label_w + bar_w + 90}" height="{h}" role="img" '
            f'aria-label="compile seconds per function">{"".join(parts)}</svg>')


def _table(header: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(
        f'<td class="num">{_e(c)}</td>' if i in numeric else f"<td>{_e(c)}</td>"
        for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary_html(table: pd.DataFrame) -> str:
    header = ["#", "function", "where", "compiles", "compile s", "share", "trace s", "lower s",
              "equations", "StableHLO chars", "leaves", "why it compiled again"]
    rows = [[str(i), r.name, _where(r.where), _cell(r.compiles), _cell(r.compile_s, True),
             "" if pd.isna(r.share) else f"{r.share:.0%}", _cell(r.trace_s, True),
             _cell(r.lower_s, True), _cell(r.eqns), _cell(r.hlo_pre_bytes), _cell(r.n_leaves),
             r.reason if isinstance(r.reason, str) else ""]
            for i, r in enumerate(table.itertuples(index=False), 1)]
    return _table(header, rows, {0, 3, 4, 5, 6, 7, 8, 9, 10})


def _compiles_html(w: Any) -> str:
    header = ["#", "function", "where", "trace s", "lower s", "compile s", "leaves",
              "equations", "StableHLO chars", "cache hit", "why", "thread"]
    rows = [[str(i), r.name, _where(r.where), _cell(r.trace_s, True), _cell(r.lower_s, True),
             _cell(r.compile_s, True), str(r.n_leaves), _cell(r.eqns), _cell(r.hlo_pre_bytes),
             "yes" if r.cache_hit else "", r.reason or "", r.thread]
            for i, r in enumerate(w.compiles, 1)]
    return (f"<details><summary>every compilation, in order ({len(rows)})</summary>"
            f"{_table(header, rows, {0, 3, 4, 5, 6, 7, 8})}</details>")


def _findings_html(w: Any) -> str:
    if not w.findings_wanted or w.wall_s is None:
        return ""
    found = w.findings
    if not found:
        return ("<h2>Findings</h2><p>No function took more than "
                f"{w.top:.0%} of the compile time.</p>")
    parts = ["<h2>Findings</h2>"]
    for f in found:
        parts.append(f'<div class="fn"><h3>{_e(f.name)} <span class="where">'
                     f"{_e(_where(f.where))}</span></h3><p>{f.share:.0%} of the compile time: "
                     f"{f.compiles} compile(s), {_e(_s(f.compile_s))} of XLA compile recorded "
                     "while the program ran"
                     + (" (diagnose traced it again, without compiling)." if f.diagnosis
                        else ".") + "</p>")
        if f.compiles > 1 and f.reason:
            parts.append(f"<p><b>Compiled {f.compiles} times.</b> Why: {_e(f.reason)}</p>")
        if f.diagnosis is None:
            parts.append(f"<p>{_e(f.note)}</p>")
        else:
            parts.append(diagnose_report.html_fragment(f.diagnosis))
        parts.append("</div>")
    return "".join(parts)


_STYLE = """
.pce-watch{font-family:system-ui,sans-serif;max-width:1200px}
.pce-watch table{border-collapse:collapse;margin:.5em 0;font-size:13px}
.pce-watch th,.pce-watch td{border:1px solid #ddd;padding:3px 6px;text-align:left}
.pce-watch td.num{text-align:right;font-variant-numeric:tabular-nums}
.pce-watch .where{color:#555;font-weight:normal;font-size:.85em}
.pce-watch .note{color:#8a5300}
.pce-watch .fn{border-top:1px solid #ccc;margin-top:1em}
"""


def html_fragment(w: Any) -> str:
    table = w.summary()
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in w.notes)
    body = (f"<h2>Compile time per function</h2>{_chart(table)}{_summary_html(table)}"
            f"{_compiles_html(w)}{_findings_html(w)}") if len(table) else ""
    return (f'<div class="pce-watch"><style>{_STYLE}</style>'
            f"<p><b>{_e(headline(w))}</b></p>{notes}{body}</div>")


def html_document(w: Any) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta name="generator" content="{GENERATOR}">'
            "<title>explorer.watch: what compiled</title></head>"
            f"<body><h1>What compiled, and why</h1>{html_fragment(w)}</body></html>\n")


def write_html(w: Any, path: str | os.PathLike) -> Path:
    """Write the page to ``path`` atomically; never replace a file that is not one of ours."""
    return write_page(path, html_document(w), generator=GENERATOR,
                      what="an explorer.watch page", example="compiles.html")
