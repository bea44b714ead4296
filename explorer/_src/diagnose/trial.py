"""Trying the explorer's rewrite on a per-leaf program: measured, within a stated budget.

The trial rewrites the user's function (:func:`explorer.pack` today; the rewrite is chosen in
one place, :func:`rewrite`), checks that it computes the same outputs, counts its equations
(exact) and compares cold compile times in interleaved repeats (original, rewritten, original,
...). A compile-time gain is claimed only where the repeats' ranges do not overlap: on a shared
machine a single pair of compiles differs by load alone.

It is skipped, with the reason, where it cannot help or would cost too much: the repetition is
in a library's code and the rewrite only changes the user's step (``explorer.pack``; the
jaxpr-level ``explorer.jit`` packs a library's equations too), the program has more than
``MAX_EQNS`` equations, the rewritten program has not at least ``MIN_FEWER`` fewer equations,
or the next step would take the trial past ``BUDGET_S`` seconds (the rewrite itself is judged
from the original's trace time: it traces the function again and packs it).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..core.measure import _device, count_eqns, measure_traced
from ..pack import pack as _pack
from ..util import validate as v

BUDGET_S = 60.0       # seconds the whole trial may take, its compiles included
MAX_EQNS = 20_000     # a larger program is not rewritten, run and compiled again
MIN_FEWER = 0.10      # the rewrite must remove at least this share of the equations
REPEATS = 3           # cold compiles of each program, interleaved
PACK_S_PER_EQN = 1e-3  # explorer.jit's packing, about 0.4 ms an equation here; an upper guess
RTOL, ATOL = 1e-5, 1e-6  # the rewritten outputs must match the original's this closely


@dataclasses.dataclass(frozen=True)
class PackTrial:
    """What happened when ``diagnose`` tried the explorer's rewrite on a per-leaf program.

    Attributes:
        status: ``"measured"`` (rewritten, outputs checked equal, equations counted, compile
            times compared where the budget allowed), ``"not tried"`` (skipped or refused;
            ``reason`` says why), ``"no gain"`` (the rewritten program has not
            ``MIN_FEWER`` fewer equations, so it is neither run nor compiled) or ``"changed
            the result"`` (its outputs differ; ``reason`` says where; no ratio).
        reason: one sentence; for ``"measured"``, why compile times were not compared, if not.
        eqns_before, compile_s_before: the original's figures (compile: median of its repeats).
        eqns_after: equations of the rewritten program; ``None`` unless measured.
        compile_s_after: its median cold compile seconds; ``None`` unless compared.
        compile_before, compile_after: every repeat's cold compile seconds, in the order taken.
        verdict: ``"faster"``, ``"slower"`` or ``"no difference beyond the spread"`` when
            compile times were compared, else ``None``.
        rewrite: what was tried (``"explorer.pack"``).
        elapsed_s: seconds the trial took.
    """

    status: str
    reason: str | None
    eqns_before: int
    compile_s_before: float | None
    eqns_after: int | None = None
    compile_s_after: float | None = None
    compile_before: tuple[float, ...] = ()
    compile_after: tuple[float, ...] = ()
    verdict: str | None = None
    rewrite: str = "explorer.pack"
    elapsed_s: float = 0.0


class _Refused(Exception):
    """The rewrite cannot take the function; the message is the reason, one sentence."""


@dataclasses.dataclass(frozen=True)
class _Rewritten:
    program: Callable        # what is compiled and measured (a plain function of ``inputs``)
    inputs: tuple
    run: Callable[[], Any]   # its outputs in the original's structure


def _pack_rewrite(step: Callable, dynamic: tuple, out_info: Any, name: str) -> _Rewritten:
    got = jax.tree_util.tree_structure(out_info)
    want = jax.tree_util.tree_structure(dynamic[0])
    if got != want:  # pack's first check, without tracing the function again
        raise _Refused(f"the function returns {_outline(got)}, not a pytree shaped like its "
                       f"first argument ({_outline(want)}), and pack rewrites a step whose "
                       "output matches its state")
    try:
        packed = _pack.pack(step, *dynamic)
        stacked = packed.pack_args(*dynamic)
    except Exception as err:
        raise _Refused(_sentence(err)) from err

    def program(*xs: Any) -> Any:  # a plain function: jit names it without Packed's repr,
        return packed(*xs)          # which traces the packed step again (its report)

    program.__name__ = program.__qualname__ = f"pack({name})"
    return _Rewritten(program, tuple(stacked),
                      lambda: packed.unpack(jax.jit(program)(*stacked)))


def _jit_rewrite(step: Callable, dynamic: tuple, out_info: Any, name: str) -> _Rewritten:
    """``explorer.jit`` of the user's function itself: its packed program and stacked inputs
    are what is measured; calling it gives the outputs in the original's structure."""
    from ..pack.jit import jit as explorer_jit  # noqa: PLC0415 - the pack layer, on demand

    try:
        jitted = explorer_jit(step)
        report = jitted.report_for(*dynamic)
        program, stacked = jitted.packed_function(*dynamic)
    except Exception as err:  # noqa: BLE001 - any refusal is reported, never raised
        raise _Refused(_sentence(err)) from err
    if report.fallback:
        raise _Refused(f"it could not pack this program ({report.fallback})")

    def measured(*xs: Any) -> Any:  # named for the report, as jit names the program
        return program(*xs)

    measured.__name__ = measured.__qualname__ = f"explorer.jit({name})"
    return _Rewritten(measured, tuple(stacked), lambda: jitted(*dynamic))


# The one place the trial's rewrite is chosen: explorer.jit (on the user's function itself,
# whatever it returns, library code included); explorer.pack (a step whose output matches its
# first argument) where explorer.jit is not there.
try:
    from ..pack import jit as _jit_module  # noqa: F401
    REWRITE_NAME, rewrite, REWRITES_LIBRARY_CODE = "explorer.jit", _jit_rewrite, True
except ImportError:  # pragma: no cover - an explorer without explorer.jit
    REWRITE_NAME, rewrite, REWRITES_LIBRARY_CODE = "explorer.pack", _pack_rewrite, False


def try_rewrite(fn: Callable, args: tuple, static: tuple[int, ...], traced: Any, eqns: int,
                compile_s: float | None, compile: bool, backend: str | None, name: str,
                library: str | None = None, trace_s: float = 0.0,
                original_s: float | None = None) -> PackTrial:
    """Rewrite ``fn``, check it computes the same, count and compare. Never raises for the
    user's code: what went wrong is the trial's one-sentence ``reason``.

    ``library``: set when every per-leaf finding lies in a library's code (named), where a
    rewrite of the user's function cannot help. ``trace_s``: what tracing ``fn`` took; the
    rewrite traces it again (at most that long: a library's inner jits are cached by then) and
    packs it, which cannot be stopped half way, so it is not started when that would take the
    trial past its budget. ``original_s``: what one cold measurement of ``fn`` took (trace,
    lower, compile), the cost of each further repeat of it.
    """
    start = time.perf_counter()

    def result(status: str, reason: str | None, **figures: Any) -> PackTrial:
        return PackTrial(status=status, reason=reason, eqns_before=eqns,
                         compile_s_before=figures.pop("median_before", compile_s),
                         rewrite=REWRITE_NAME, elapsed_s=time.perf_counter() - start, **figures)

    if library is not None and not REWRITES_LIBRARY_CODE:
        return result("not tried", f"the repetition is inside {library}'s code, which "
                      f"{REWRITE_NAME} does not rewrite; pass that library one array instead")
    if eqns > MAX_EQNS:
        return result("not tried", f"the program has {eqns:,} equations, over the trial's "
                      f"budget of {MAX_EQNS:,}")
    dynamic = tuple(a for i, a in enumerate(args) if i not in static)
    if not dynamic:
        return result("not tried", "the function has no array arguments to stack")
    if trace_s + PACK_S_PER_EQN * eqns > BUDGET_S:
        return result("not tried", f"tracing the function took {trace_s:.0f} s; tracing and "
                      f"packing its {eqns:,} equations again would take the trial past its "
                      f"{BUDGET_S:.0f} s budget")

    def step(*dyn: Any) -> Any:  # the static arguments held fixed, as jit holds them
        it = iter(dyn)
        return fn(*[a if i in static else next(it) for i, a in enumerate(args)])

    device = _device(backend)
    try:
        with jax.default_device(device):
            new = rewrite(step, dynamic, traced.out_info, name)
            eqns_after = count_eqns(jax.jit(new.program).trace(*new.inputs).jaxpr)
    except _Refused as err:
        return result("not tried", str(err))
    except Exception as err:  # noqa: BLE001
        return result("not tried", f"tracing the rewritten program failed: {_sentence(err)}")
    if eqns_after > (1 - MIN_FEWER) * eqns:
        return result("no gain", f"it gives {eqns:,} → {eqns_after:,} equations, not "
                      f"{MIN_FEWER:.0%} fewer, so it was neither run nor measured",
                      eqns_after=eqns_after)
    # Checking the outputs compiles the original once more (never run op by op: a solver's
    # loop under disable_jit runs for as long as it has steps).
    check_cost = (compile_s or 0.0) * 1.5
    if time.perf_counter() - start + check_cost > BUDGET_S:
        return result("not tried", f"checking its outputs needs another compile of the "
                      f"original (about {check_cost:.0f} s), past the trial's {BUDGET_S:.0f} s "
                      "budget", eqns_after=eqns_after)
    try:
        with jax.default_device(device):
            expected = jax.block_until_ready(jax.jit(step)(*dynamic))
            produced = jax.block_until_ready(new.run())
    except Exception as err:  # noqa: BLE001
        return result("not tried", f"running it to compare outputs failed: {_sentence(err)}",
                      eqns_after=eqns_after)
    difference = _difference(expected, produced)
    if difference is not None:
        return result("changed the result", difference)
    if not compile:
        return result("measured", "compile times not compared (compile=False)",
                      eqns_after=eqns_after)
    return _compare(fn, args, static, new, compile_s, backend, name, start, result,
                    eqns_after, original_s, eqns_after / max(eqns, 1))


def _compare(fn: Callable, args: tuple, static: tuple[int, ...], new: _Rewritten,
             compile_s: float | None, backend: str | None, name: str, start: float,
             result: Callable, eqns_after: int, original_s: float | None = None,
             new_eqns_share: float = 1.0) -> PackTrial:
    """Interleaved cold compiles, original first (its first repeat is the diagnosis's own)."""
    before = [compile_s] if compile_s is not None else []
    after: list[float] = []
    cost = {"before": original_s or compile_s or 0.0}
    # Until it is measured, the rewritten program's cost is guessed from its equations (a guess
    # only: a packed program of a third of the equations can compile slower).
    cost["after"] = cost["before"] * new_eqns_share
    order = ["after", "before"] * REPEATS
    try:
        for which in order:
            if len(before) >= REPEATS and len(after) >= REPEATS:
                break
            if which == "before" and len(before) >= REPEATS:
                continue
            left = BUDGET_S - (time.perf_counter() - start)
            if cost[which] * 1.5 > left:
                break
            t0 = time.perf_counter()
            if which == "after":
                m, _ = measure_traced(new.program, *new.inputs, runs=1, backend=backend,
                                      name=new.program.__name__)
                after.append(m.compile_s)
            else:
                m, _ = measure_traced(fn, *args, static_argnums=static, runs=1,
                                      backend=backend, name=name)
                before.append(m.compile_s)
            cost[which] = time.perf_counter() - t0
    except Exception as err:  # noqa: BLE001
        return result("not tried", f"measuring the rewritten program failed: {_sentence(err)}",
                      eqns_after=eqns_after)
    figures = {"eqns_after": eqns_after, "compile_before": tuple(before),
               "compile_after": tuple(after)}
    if len(before) < 2 or len(after) < 2:
        return result("measured", f"compile times not compared: {REPEATS} interleaved cold "
                      f"compiles of each did not fit the trial's {BUDGET_S:.0f} s budget "
                      f"({len(before)} of the original, {len(after)} rewritten)", **figures)
    if max(after) < min(before):
        verdict = "faster"
    elif min(after) > max(before):
        verdict = "slower"
    else:
        verdict = "no difference beyond the spread"
    return result("measured", None, compile_s_after=statistics.median(after),
                  median_before=statistics.median(before), verdict=verdict, **figures)


def _outline(treedef: Any) -> str:
    """A short name for a pytree structure: ``a scalar``, ``a dict of 60 leaves``..."""
    n = treedef.num_leaves
    if treedef == jax.tree_util.tree_structure(0):
        return "a single array"
    kind = type(jax.tree_util.tree_unflatten(treedef, [0] * n)).__name__
    return f"a {kind} of {n} {'leaf' if n == 1 else 'leaves'}"


def _sentence(err: BaseException) -> str:
    text = v.describe_error(err) if not isinstance(err, ValueError) else str(err).strip()
    text = text.splitlines()[0] if text else type(err).__name__
    return text.removeprefix("pack: ").rstrip(".")


def _difference(expected: Any, produced: Any) -> str | None:
    """``None`` when every leaf agrees (``allclose``), else where and by how much not."""
    want = jax.tree_util.tree_flatten_with_path(expected)[0]
    got = jax.tree_util.tree_leaves(produced)
    if len(want) != len(got):
        return f"it returned {len(got)} leaves instead of {len(want)}"
    for (path, a), b in zip(want, got):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return f"leaf {jax.tree_util.keystr(path)} has shape {b.shape} instead of {a.shape}"
        if not np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
            worst = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            return (f"leaf {jax.tree_util.keystr(path) or '<root>'} differs by up to "
                    f"{worst:.3g}")
    return None
