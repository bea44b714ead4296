"""Readable ticks for log axes: which values to label, and how, at any range (pure NumPy)."""

from __future__ import annotations

import numpy as np


def log_ticks(lo: float, hi: float, max_ticks: int = 8) -> list[tuple[float, str]]:
    """Labelled ticks for a log axis over ``[lo, hi]`` that read well at any range.

    Bokeh's own log ticker labels only whole decades: under one decade an axis shows no label
    at all (N = 10, 20 bare; nothing below 1 s) or crowded ``3.500e+5`` ones. Here: powers of
    ten when the range spans several decades, else 1-2-5 steps, else even steps; labels
    in plain figures (``0.05``, ``20``, ``300k``, ``2M``).
    """
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo <= 0 or hi <= 0:
        return []
    lo, hi = min(lo, hi), max(lo, hi)
    first, last = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))
    for mantissas in ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in mantissas
                 if lo * 0.999 <= m * 10.0 ** e <= hi * 1.001]
        if len(ticks) >= 3:
            break
    if len(ticks) > max_ticks:  # many decades: every other power of ten
        step = -(-len(ticks) // max_ticks)
        ticks = ticks[::step]
    if len(ticks) < 3:  # under a factor of about three: even steps (2, 3, 4; 0.142 ... 0.148)
        ticks = _even_ticks(lo, hi)
    return [(v, _tick_label(v)) for v in ticks]


def _even_ticks(lo: float, hi: float) -> list[float]:
    """At least three round figures in ``[lo, hi]`` an even 1, 2 or 5 (times a power of ten)
    apart, the widest such step; one value alone is its own tick."""
    if hi - lo <= 1e-9 * hi:
        return [lo]
    exponent = int(np.floor(np.log10(hi - lo)))
    while True:
        for m in (5, 2, 1):
            step = m * 10.0 ** exponent
            first = np.ceil(lo * (1 - 1e-9) / step)
            ticks = [float(f"{k * step:.12g}") for k in range(int(first), int(first) + 12)
                     if k * step <= hi * (1 + 1e-9)]
            if len(ticks) >= 3:
                return ticks
        exponent -= 1


def _tick_label(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"
