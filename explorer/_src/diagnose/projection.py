"""Projecting compile time to a size that was not measured, honestly: a range, and how far.

A power law fitted through measured compile times bends flat when a fixed cost dominates the
sizes measured (XLA's set-up, a solver's machinery): ``compile_s ≈ 0.2 + tiny · size`` fits
``size^0.2`` at sizes 10 to 100 and projects a tenth of the real figure at 1000. So the figure
is fitted as what it is: a fixed part plus a part that grows with the program.

- The equation count is exact (the same program gives the same count), so its growth is fitted
  first: ``eqns ≈ e0 + e1 · size^p``.
- Compile time is ``a + b · G^m``, with ``G = e1 · size^p`` the growing part of the equations
  and ``a`` a fixed part. XLA's work grows at least linearly with the program and, measured on
  CPU (jax-ml/jax#1832 "XLA compile time grows super-linearly with program size"; the dict
  program of jax-ml/jax#4667 grows as N^1.85 here), at most about quadratically. So beyond the
  measured sizes it lies between the largest measured time (the low end: a program that grows
  does not compile faster) and that time grown as ``G^2`` (the high end, whatever the fixed
  part is).

Beyond the measured sizes the answer is that range, never one number, and no projection is made
past ``MAX_FACTOR`` times the largest measured size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

MAX_FACTOR = 10        # no projection past this multiple of the largest measured size
HIGH_POWER = 2.0   # compile time against the growing part of the equations, at most
EQN_POWERS = np.round(np.arange(0.25, 3.001, 0.01), 2)
FIT_POWERS = np.round(np.arange(0.5, 3.001, 0.05), 2)


@dataclasses.dataclass(frozen=True)
class Projection:
    """Compile time at a size that was not measured: a range, never a measurement.

    Attributes:
        size: the size projected to.
        low_s, high_s: the range of cold compile seconds (see :class:`Model`): beyond the
            measured sizes, at least the largest measured time and at most that time grown as
            the equations squared; within them, the measured neighbours.
        eqns: the projected equation count (from its exact fit).
        fixed_s: the fitted fixed part of compile time (what no size removes).
        eqn_power: ``p`` of ``eqns ≈ e0 + e1 · size^p``.
        fitted_sizes: the sizes measured.
        factor: ``size`` over the largest measured size.
    """

    size: int
    low_s: float
    high_s: float
    eqns: int
    fixed_s: float
    eqn_power: float
    fitted_sizes: tuple[int, ...]
    factor: float

    @property
    def compile_s(self) -> float:
        """The middle of the range (geometric), for a plot's marker; not a prediction."""
        return float(np.sqrt(self.low_s * self.high_s))

    def __str__(self) -> str:
        sizes = ", ".join(map(str, self.fitted_sizes))
        inside = self.factor <= 1
        span = (f"about {_s(self.low_s)}" if _s(self.low_s) == _s(self.high_s)
                else f"{_s(self.low_s)} to {_s(self.high_s)}")
        return (f"projection: compile {span} at size {self.size}"
                f"{'' if inside else f' ({self.factor:.3g}× the largest measured size)'}, "
                f"about {self.eqns:,} equations (fitted fixed part about {_s(self.fixed_s)}; "
                "from the largest measured time to that time grown as the equations squared; "
                f"sizes {sizes} measured; not measured here; never projected past "
                f"{MAX_FACTOR}×)")


def _s(seconds: float) -> str:
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def _nonneg_fit(basis: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares ``y ≈ basis @ coef`` with ``coef >= 0``, in relative error (two
    columns: a constant and one growing column). Returns the coefficients and the worst
    relative residual."""
    w = 1.0 / y
    a = basis * w[:, None]
    b = y * w
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    if (coef < 0).any():  # the best of the two one-column fits (the active-set solution)
        best = None
        for j in range(basis.shape[1]):
            c = np.zeros(basis.shape[1])
            col = a[:, j]
            c[j] = max(float(col @ b) / float(col @ col), 0.0) if col @ col > 0 else 0.0
            err = float(np.max(np.abs(a @ c - b)))
            if best is None or err < best[1]:
                best = (c, err)
        return best
    return coef, float(np.max(np.abs(a @ coef - b)))


def _fit_growth(sizes: np.ndarray, y: np.ndarray, powers: np.ndarray
                ) -> tuple[float, float, float, float]:
    """``y ≈ c0 + c1 · size^p`` over ``powers``: ``(p, c0, c1, worst relative residual)``."""
    best = None
    for p in powers:
        basis = np.column_stack([np.ones_like(sizes), sizes ** p])
        (c0, c1), err = _nonneg_fit(basis, y)
        if best is None or err < best[3] - 1e-12:
            best = (float(p), float(c0), float(c1), err)
    return best


@dataclasses.dataclass(frozen=True)
class Model:
    """The fitted growth a :class:`Projection` is read from.

    ``eqn_fit`` is ``(p, e0, e1)`` of ``eqns ≈ e0 + e1 · size^p``; ``G`` its growing part.
    Beyond the measured sizes, compile time ``a + b · G^m`` (``a, b >= 0``, ``m <= 2``) lies
    between the largest measured time (it does not fall as the program grows) and that time
    grown as ``G^2`` (whatever the fixed part ``a``; ``high_power`` is more where the measured
    points grow faster). A tighter low end (a chord through the measured points, a fitted fixed
    part) is not a bound on a shared machine: one slow compile among the small sizes moves it
    above the truth. ``fixed_s`` is the least-squares fixed part, shown, not used for the range.
    """

    sizes: tuple[int, ...]
    compile_s: tuple[float, ...]
    eqn_fit: tuple[float, float, float]
    fixed_s: float
    c_max: float
    g_max: float
    high_power: float

    def project(self, size: int) -> Projection:
        """The range at ``size``.

        Raises:
          ValueError: past ``MAX_FACTOR`` times the largest measured size.
        """
        largest = max(self.sizes)
        if size > MAX_FACTOR * largest:
            raise ValueError(f"size {size} is {size / largest:.3g}× the largest measured size "
                             f"({largest}); projections reach at most {MAX_FACTOR}×: measure "
                             "nearer sizes first")
        p, e0, e1 = self.eqn_fit
        growing = e1 * size ** p
        if size >= largest:
            low = self.c_max
            high = self.c_max * max(growing / self.g_max, 1.0) ** self.high_power
        else:  # within the measured sizes: between the measured neighbours
            below = [c for n, c in zip(self.sizes, self.compile_s) if n <= size]
            above = [c for n, c in zip(self.sizes, self.compile_s) if n >= size]
            ends = (below[-1] if below else min(self.compile_s), above[0])
            low, high = min(ends), max(ends)
        return Projection(size=int(size), low_s=float(low), high_s=float(high),
                          eqns=round(e0 + growing), fixed_s=self.fixed_s,
                          eqn_power=p, fitted_sizes=self.sizes, factor=size / largest)


def fit(sizes: Sequence[int], eqns: Sequence[float], compile_s: Sequence[float]
        ) -> Model | None:
    """The growth model of measured sizes; ``None`` without two sizes that compiled."""
    x = np.asarray(sizes, float)
    e = np.asarray(eqns, float)
    y = np.asarray([np.nan if c is None else c for c in compile_s], float)
    keep = np.isfinite(x) & np.isfinite(e) & np.isfinite(y) & (x > 0) & (e > 0) & (y > 0)
    x, e, y = x[keep], e[keep], y[keep]
    if len(np.unique(x)) < 2:
        return None
    order = np.argsort(x, kind="stable")
    x, e, y = x[order], e[order], y[order]
    p, e0, e1, _ = _fit_growth(x, e, EQN_POWERS)
    growing = np.maximum(e1 * x ** p, 1e-12)
    basis = np.column_stack([np.ones_like(growing), growing])
    (a, _b), _err = _nonneg_fit(basis, y)
    # Where the measured points themselves grow faster than the squared band, widen it.
    m_best, _a, _b, _ = _fit_growth(growing, y, FIT_POWERS)
    return Model(sizes=tuple(int(s) for s in x), compile_s=tuple(float(c) for c in y),
                 eqn_fit=(p, e0, e1), fixed_s=float(a), c_max=float(y[-1]),
                 g_max=float(growing[-1]), high_power=max(HIGH_POWER, float(m_best)))


def project(sizes: Sequence[int], eqns: Sequence[float], compile_s: Sequence[float],
            size: int) -> Projection | None:
    """The projection at ``size`` from measured sizes (``None`` if they cannot be fitted)."""
    model = fit(sizes, eqns, compile_s)
    return model.project(size) if model is not None else None
