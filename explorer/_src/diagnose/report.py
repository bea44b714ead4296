"""How a :class:`~explorer.Diagnosis` reads: short text, notebook HTML, a standalone report.

The standalone report carries everything inline (styles, one small SVG chart per figure of a
size sweep), so it opens offline and can be attached to a bug report. Every piece of text that
comes from the user's program (source lines, paths, names) goes through ``html.escape``.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any

from ..util.pages import write_page
from .findings import format_exponent

GENERATOR = "pytree-compile-explorer diagnose"
TOP_LINES_TEXT = 5
TOP_LINES_HTML = 25


def _size(nbytes: float | None) -> str:
    if nbytes is None:
        return "n/a"
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def no_findings(d: Any) -> str:
    """What a diagnosis without findings says: the thresholds nothing crossed (a line repeating
    its equations below ``min_repeats`` times is not a finding, but its repeats are there to
    see in the top lines)."""
    lim = d.limits
    return (f"no findings at diagnose's thresholds (its limits): no line repeats its equations "
            f"{lim.min_repeats} times side by side or {lim.min_chain} in a row, and "
            f"{'1 array leaf crosses' if d.n_leaves == 1 else f'{d.n_leaves} array leaves cross'}"
            f" the boundary (a finding from {lim.max_leaves}).")


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _seconds(s: float | None) -> str:
    return "n/a" if s is None else f"{s:.3g} s"


def _headline(d: Any) -> str:
    compile_part = (f"compile {_seconds(d.compile_s)} (cold)" if d.compile_s is not None
                    else "not compiled")
    leaves = "1 array leaf" if d.n_leaves == 1 else f"{d.n_leaves} array leaves"
    return (f"diagnose({d.name}): {leaves} · {d.jaxpr_eqns:,} jaxpr equations · "
            f"StableHLO {_size(d.stablehlo_bytes)} · trace {_seconds(d.trace_s)} · "
            f"lower {_seconds(d.lower_s)} · {compile_part}")


# -- text ------------------------------------------------------------------------------------
def text(d: Any) -> str:
    """A few lines: the figures, each finding with its first remedy sentence, the top lines."""
    out = [_headline(d)]
    if d.findings:
        out.append(f"{len(d.findings)} finding{'s' * (len(d.findings) > 1)}:")
        for f in d.findings:
            remedy = f.remedy.split("\n\n", 1)[0]
            out.append(f"  [{f.kind}] {f.message}")
            out.append(f"      remedy: {remedy}")
            out.append(f"      saving: {f.saving}")
    else:
        out.append(no_findings(d))
    if len(d.top_lines):
        out.append("top lines (equations):")
        for row in d.top_lines.head(TOP_LINES_TEXT).itertuples():
            place = f"{os.path.basename(row.file)}:{row.line}" if row.line else row.file
            out.append(f"  {row.eqns:>7}  {place}  {row.code[:60]}  [{row.primitives}]")
            if getattr(row, "via", ""):
                out.append(f"           via {row.via}")
    if d.sizes is not None:
        ks = {r.metric: r.k for r in d.exponents.itertuples()}
        grown = ", ".join(f"{m} k={format_exponent(k)}" for m, k in ks.items())
        out.append(f"sizes {', '.join(map(str, d.sizes['size']))}: {grown}")
        if d.projection is not None:
            out.append(str(d.projection))
    return "\n".join(out)


# -- HTML ------------------------------------------------------------------------------------
_STYLE = """
.pce-diagnosis{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:14px;
  line-height:1.4;color:#222;max-width:1100px}
.pce-diagnosis h2{font-size:18px;margin:.4em 0}.pce-diagnosis h3{font-size:15px;margin:1em 0 .3em}
.pce-diagnosis .finding{border-left:4px solid #c0392b;background:#fdf3f2;padding:.4em .8em;
  margin:.5em 0}
.pce-diagnosis .kind{font-weight:600;font-family:ui-monospace,monospace}
.pce-diagnosis .where{font-family:ui-monospace,monospace;color:#555}
.pce-diagnosis pre{background:#f4f4f4;padding:.4em .6em;overflow-x:auto;margin:.3em 0}
.pce-diagnosis table{border-collapse:collapse;margin:.3em 0}
.pce-diagnosis td,.pce-diagnosis th{border-bottom:1px solid #ddd;padding:2px 8px;
  text-align:left;vertical-align:top}
.pce-diagnosis td.num{text-align:right;font-variant-numeric:tabular-nums}
.pce-diagnosis code{font-family:ui-monospace,monospace}
.pce-diagnosis .clean{border-left:4px solid #27ae60;background:#f1faf4;padding:.4em .8em}
.pce-diagnosis .projection{font-style:italic}
.pce-diagnosis svg{margin-right:8px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _finding_html(f: Any) -> str:
    sentence, _, sketch = f.remedy.partition("\n\n")
    through = f" (through {f.via})" if getattr(f, "via", None) else ""
    where = f'<div class="where">{_e(f.where)}{_e(through)}</div>' if f.where else ""
    code = f"<pre><code>{_e(sketch)}</code></pre>" if sketch else ""
    return (f'<div class="finding"><div class="kind">{_e(f.kind)}</div>{where}'
            f"<p>{_e(f.message)}</p><p><b>Remedy.</b> {_e(sentence)}</p>{code}"
            f"<p><b>Saving.</b> {_e(f.saving)}</p></div>")


def _table(header: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{_e(c)}</td>' if i in numeric else f"<td>{_e(c)}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figures_html(d: Any) -> str:
    rows = [["array leaves", d.n_leaves], ["jaxpr equations", f"{d.jaxpr_eqns:,}"],
            ["StableHLO", _size(d.stablehlo_bytes)],
            ["constants baked in", _size(d.constant_bytes)],
            ["trace", _seconds(d.trace_s)], ["lower", _seconds(d.lower_s)],
            ["compile (cold)",
             _seconds(d.compile_s) if d.compile_s is not None else "not compiled"]]
    m = d.measurement
    if m is not None:
        rows += [["optimised HLO", _size(m.hlo_post_bytes)], ["first run", _seconds(m.first_run_s)],
                 ["backend", f"{m.backend} ({m.device_kind}), jax {m.jax_version}"],
                 ["cold compile verified", f"{m.backend_compiles} backend compile(s), "
                                           f"{m.cache_hits} cache hits"]]
    return _table(["figure", "value"], rows, {1})


def _top_lines_html(d: Any) -> str:
    rows = [[r.eqns, f"{r.file}:{r.line}" if r.line else r.file, r.function, r.code, r.primitives,
             getattr(r, "via", "")] for r in d.top_lines.head(TOP_LINES_HTML).itertuples()]
    more = len(d.top_lines) - TOP_LINES_HTML
    note = f"<p>{more} more lines.</p>" if more > 0 else ""
    return _table(["equations", "where", "function", "code", "primitives", "through (library)"],
                  rows, {0}) + note


def _sizes_html(d: Any) -> str:
    if d.sizes is None:
        return ""
    columns = list(d.sizes.columns)
    rows = [[_cell(v) for v in row] for row in d.sizes.itertuples(index=False)]
    fits = {r.metric: r for r in d.exponents.itertuples()}
    exps = [[m, format_exponent(r.k), f"{r.r2:.2f}", r.points] for m, r in fits.items()]
    charts = "".join(_chart(d.sizes["size"].tolist(), d.sizes[m].tolist(), m, fits.get(m),
                            d.projection if m == "compile_s" else None)
                     for m in ("jaxpr_eqns", "stablehlo_bytes", "compile_s") if m in fits)
    projection = (f'<p class="projection">{_e(d.projection)}</p>' if d.projection is not None
                  else "")
    return (f"<h3>Across sizes</h3>{_table(columns, rows, set(range(len(columns))))}"
            f"<div>{charts}</div>{projection}"
            f"<p>Fitted exponent k of each figure (figure ≈ c · size<sup>k</sup>):</p>"
            f"{_table(['figure', 'k', 'r²', 'points'], exps, {1, 2, 3})}")


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _chart(xs: list, ys: list, label: str, fit: Any, projection: Any) -> str:
    """A small log-log SVG: measured points, the fitted line, and the projection if any."""
    points = [(x, y) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0]
    if len(points) < 2:
        return ""
    w, h, pad = 240, 150, 30
    all_x = [p[0] for p in points] + ([projection.size] if projection else [])
    all_y = [p[1] for p in points] + ([projection.low_s, projection.high_s] if projection
                                      else [])
    lx0, lx1 = math.log10(min(all_x)), math.log10(max(all_x))
    ly0, ly1 = math.log10(min(all_y)), math.log10(max(all_y))
    lx1, ly1 = max(lx1, lx0 + 1e-9), max(ly1, ly0 + 1e-9)

    def sx(x: float) -> float:
        return pad + (math.log10(x) - lx0) / (lx1 - lx0) * (w - 2 * pad)

    def sy(y: float) -> float:
        return h - pad - (math.log10(y) - ly0) / (ly1 - ly0) * (h - 2 * pad)

    parts = [f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" '
             'fill="none" stroke="#ccc"/>']
    if fit is not None and projection is None:  # a power law, drawn over the measured sizes
        x0, x_end = min(p[0] for p in points), max(p[0] for p in points)
        y0, y1 = fit.c * x0 ** fit.k, fit.c * x_end ** fit.k
        parts.append(f'<line x1="{sx(x0):.1f}" y1="{sy(y0):.1f}" x2="{sx(x_end):.1f}" '
                     f'y2="{sy(y1):.1f}" stroke="#2c7fb8"/>')
    parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="#2c7fb8"/>'
              for x, y in points]
    if projection:  # a range at the projected size, not a point
        x = sx(projection.size)
        parts.append(f'<line x1="{x:.1f}" y1="{sy(projection.low_s):.1f}" x2="{x:.1f}" '
                     f'y2="{sy(projection.high_s):.1f}" stroke="#c0392b" stroke-width="3">'
                     "<title>projected range, not measured</title></line>")
    k = f" (k={format_exponent(fit.k)})" if fit is not None and projection is None else ""
    parts.append(f'<text x="{pad}" y="18" font-size="12">{_e(label)}{_e(k)}</text>')
    parts.append(f'<text x="{pad}" y="{h - 8}" font-size="10">size {_cell(min(all_x))}</text>')
    parts.append(f'<text x="{w - pad}" y="{h - 8}" font-size="10" text-anchor="end">'
                 f"{_cell(max(all_x))}</text>")
    parts.append(f'<text x="2" y="{pad + 8}" font-size="10">{_cell(max(all_y))}</text>')
    parts.append(f'<text x="2" y="{h - pad}" font-size="10">{_cell(min(all_y))}</text>')
    return (f'<svg width="{w}" height="{h}" '
            f'role="img" aria-label="{_e(label)} against size, log-log">{"".join(parts)}</svg>')


def _leaves_html(d: Any) -> str:
    if not d.leaf_paths:
        return ""
    items = "\n".join(_e(p) for p in d.leaf_paths)
    label = "1 leaf path" if d.n_leaves == 1 else f"{d.n_leaves} leaf paths"
    return (f"<details><summary>{label}</summary>"
            f"<pre>{items}</pre></details>")


def html_fragment(d: Any) -> str:
    """Findings first, then the top lines, the figures and (with sizes) the sweep."""
    findings = ("".join(_finding_html(f) for f in d.findings) if d.findings else
                f'<div class="clean">{_e(_sentence(no_findings(d)))}</div>')
    return (f'<div class="pce-diagnosis"><style>{_STYLE}</style>'
            f"<h2>{_e(_headline(d))}</h2>"
            f"<h3>Findings</h3>{findings}"
            f"<h3>Source lines producing the most equations</h3>{_top_lines_html(d)}"
            f"<h3>Figures</h3>{_figures_html(d)}{_sizes_html(d)}{_leaves_html(d)}</div>")


def html_document(d: Any) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta name="generator" content="{GENERATOR}">'
            f"<title>{_e(f'diagnose({d.name})')}</title></head>"
            f"<body>{html_fragment(d)}</body></html>\n")


def write_html(d: Any, path: str | os.PathLike) -> Path:
    """Write the report to ``path`` atomically; never replace a file that is not one of ours."""
    return write_page(path, html_document(d), generator=GENERATOR, what="a diagnose report",
                      example="report.html")
