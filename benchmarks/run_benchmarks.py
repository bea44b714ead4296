"""Benchmarks of the explorer itself: are its numbers honest, and what do they cost?

One command (run from the repository root)::

    python benchmarks/run_benchmarks.py [--quick] [--backend cpu|gpu] [--out benchmarks/results.json]

writes every raw figure to a JSON file and a markdown summary to ``docs/benchmarks.md``.

a. Fidelity and overhead: :func:`explorer.measure` against a bare
   ``jax.jit(f).lower(*args).compile()`` of the same programs (jax#4667's dict / array /
   unflatten at N=100, horizon 200), interleaved and cold each time.
b. Worker overhead per job: one measurement through :class:`explorer.WorkerExecutor` against the
   same measurement in-process, after the worker is warm.
c. ``named`` against ``array`` (and ``dict`` for context) over N, for the loss and its gradient:
   compile time, program size and runtime ratios.
e. ``--backend gpu`` runs the same on a GPU and names it.

Every comparison is interleaved (A B A B ...), so noise on a shared machine hits both sides
alike; we quote medians and the spread (min-max) of the per-round ratios. Absolute times are
quoted in the markdown only from a GPU run; a CPU run quotes ratios (the JSON keeps everything).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# A GPU in this process must not take most of its memory up front: the worker needs some too.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jaxlib  # noqa: E402

import explorer  # noqa: E402
from explorer._jobs import run_spec
from explorer._spec import Spec  # noqa: E402

PROBLEM = "decay"
FIDELITY_N, FIDELITY_HORIZON = 100, 200
FIDELITY_PROGRAMS = ("dict", "array", "unflatten")
REP_HORIZON = 200
REP_SIZES_FULL = (10, 100, 1000, 3000)
QUICK_MAX_N = 300
REP_RUNS = 100  # steady-state calls per measurement; run_s is their median
# dict at N >= this compiles for seconds to minutes: it is context, not a goal, so fewer rounds.
DICT_LARGE_N = 1000

GOALS = {
    "compile_ratio": (0.9, 1.1),     # measure's compile stage / bare .compile()
    "overhead_pct": 5.0,             # wall of measure() beyond the sum of its stages
    "worker_overhead_ms": 50.0,      # per job, warm worker vs in-process
    "named_over_array": 1.1,         # every figure
    "first_render_s": 3.0,           # dashboard: server ready -> plots and Run button
    "widget_busy_s": 0.3,            # dashboard: a widget change shows while a compile runs
    "first_result_beyond_s": 1.0,    # dashboard: click -> first result, beyond its measurement
}


# -- helpers -------------------------------------------------------------------------------
def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _spread(values: list[float]) -> list[float] | None:
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def _summary(values: list[float]) -> dict[str, Any]:
    return {"median": _median(values), "spread": _spread(values), "n": len(values)}


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info(backend: str | None) -> dict[str, Any]:
    device = jax.devices(backend)[0] if backend else jax.devices()[0]
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "memory_gib": _memory_gib(),
        "loadavg_start": _loadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": device.platform,
        "device_kind": device.device_kind,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "explorer_version": explorer.__version__,
    }


class _CompileCounter:
    """Counts XLA backend compiles (``jax.monitoring``), to show the bare path compiled too."""

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._on)

    def _on(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.count += 1


_COMPILES: _CompileCounter | None = None


def _device(backend: str | None) -> Any:
    return jax.devices(backend)[0] if backend else jax.devices()[0]


# -- a. fidelity and overhead ----------------------------------------------------------------
def _bare(representation: str, target: str, backend: str | None) -> dict[str, Any]:
    """What a user would write: a fresh ``jax.jit(f).lower(*args).compile()``, cold."""
    case = explorer.build_case(PROBLEM, representation, FIDELITY_N, FIDELITY_HORIZON)
    fn = case.function(target)
    previous = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    # Placed as measure places them: uncommitted, on the chosen backend's default device.
    with jax.default_device(_device(backend)):
        args = jax.device_put(case.args)
        jax.block_until_ready(args)
    try:
        jax.clear_caches()
        before = _COMPILES.count
        with jax.default_device(_device(backend)):
            t0 = time.perf_counter()
            lowered = jax.jit(fn).lower(*args)
            t1 = time.perf_counter()
            lowered.compile()
            t2 = time.perf_counter()
    finally:
        jax.config.update("jax_enable_compilation_cache", previous)
    return {"lower_s": t1 - t0, "compile_s": t2 - t1, "total_s": t2 - t0,
            "backend_compiles": _COMPILES.count - before}


def _measured(representation: str, target: str, backend: str | None) -> dict[str, Any]:
    """The same program through ``explorer.measure`` (one steady run, so stages sum exactly)."""
    case = explorer.build_case(PROBLEM, representation, FIDELITY_N, FIDELITY_HORIZON)
    fn = case.function(target)
    t0 = time.perf_counter()
    m = explorer.measure(fn, *case.args, runs=1, backend=backend)
    wall = time.perf_counter() - t0
    stages = m.trace_s + m.lower_s + m.compile_s + m.first_run_s + m.run_s
    return {"trace_s": m.trace_s, "lower_s": m.lower_s, "compile_s": m.compile_s,
            "first_run_s": m.first_run_s, "run_s": m.run_s, "stages_s": stages, "wall_s": wall,
            "overhead_s": wall - stages, "overhead_pct": 100.0 * (wall - stages) / stages,
            "cold": m.cold, "cache_hits": m.cache_hits, "backend_compiles": m.backend_compiles,
            "hlo_pre_bytes": m.hlo_pre_bytes, "device_kind": m.device_kind}


def _overhead_breakdown(representation: str, target: str, backend: str | None) -> dict[str, float]:
    """Where a measurement's time beyond its stages goes: each post-compile query timed alone."""
    from explorer._measure import _cost, _memory, _optimised_text, count_eqns  # noqa: PLC0415

    case = explorer.build_case(PROBLEM, representation, FIDELITY_N, FIDELITY_HORIZON)
    device = _device(backend)
    with jax.default_device(device):
        args = jax.device_put(case.args)
        jax.clear_caches()
        traced = jax.jit(case.function(target)).trace(*args)
        lowered = traced.lower()
        compiled = lowered.compile()

    def put() -> None:
        with jax.default_device(device):
            jax.block_until_ready(jax.device_put(list(case.args)))

    parts = {
        "clear_caches": jax.clear_caches,
        "device_put": put,
        "stablehlo_text": lowered.as_text,
        "optimised_hlo_text": lambda: _optimised_text(compiled),
        "cost_analysis": lambda: _cost(compiled),
        "count_eqns": lambda: count_eqns(traced.jaxpr),
        # Not part of a default measurement: what memory=True would add.
        "memory_analysis (memory=True only)": lambda: _memory(compiled),
    }
    out = {}
    for name, call in parts.items():
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def bench_fidelity(rounds: int, targets: tuple[str, ...], backend: str | None) -> dict[str, Any]:
    pairs: dict[str, list[dict[str, Any]]] = {}
    for r in range(rounds):
        for target in targets:
            for rep in FIDELITY_PROGRAMS:
                # Alternate which side goes first so neither always follows the other's program.
                order = ("bare", "measure") if r % 2 == 0 else ("measure", "bare")
                result = {}
                for side in order:
                    result[side] = (_bare if side == "bare" else _measured)(rep, target, backend)
                pairs.setdefault(f"{rep}/{target}", []).append(result)
        _log(f"fidelity round {r + 1}/{rounds} done")
    programs = {}
    for key, items in pairs.items():
        compile_ratio = [p["measure"]["compile_s"] / p["bare"]["compile_s"] for p in items]
        total_ratio = [(p["measure"]["trace_s"] + p["measure"]["lower_s"] + p["measure"]["compile_s"])
                       / p["bare"]["total_s"] for p in items]
        programs[key] = {
            "compile_ratio": _summary(compile_ratio),
            # The fastest run of each side is the one least disturbed by other processes.
            "compile_ratio_of_fastest": (min(p["measure"]["compile_s"] for p in items)
                                         / min(p["bare"]["compile_s"] for p in items)),
            "total_compile_ratio": _summary(total_ratio),
            "overhead_pct": _summary([p["measure"]["overhead_pct"] for p in items]),
            "overhead_ms": _summary([1e3 * p["measure"]["overhead_s"] for p in items]),
            "bare_compile_s": _summary([p["bare"]["compile_s"] for p in items]),
            "measure_compile_s": _summary([p["measure"]["compile_s"] for p in items]),
            "measure_wall_s": _summary([p["measure"]["wall_s"] for p in items]),
            "all_cold": all(p["measure"]["cold"] and p["measure"]["cache_hits"] == 0 for p in items),
            "bare_compiled_every_time": all(p["bare"]["backend_compiles"] >= 1 for p in items),
            "hlo_pre_bytes": items[0]["measure"]["hlo_pre_bytes"],
            "pairs": items,
        }
    breakdown = {f"{rep}/{target}": _overhead_breakdown(rep, target, backend)
                 for target in targets for rep in FIDELITY_PROGRAMS}
    return {"n_states": FIDELITY_N, "horizon": FIDELITY_HORIZON, "rounds": rounds,
            "targets": list(targets), "programs": programs, "overhead_breakdown_s": breakdown}


# -- b. worker overhead ----------------------------------------------------------------------
def _timed(fn: Any, *args: Any) -> float:
    """Run ``fn(*args)`` and return how long it took where it ran (the worker submits this)."""
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def bench_worker(rounds: int, backend: str | None) -> dict[str, Any]:
    """Two views of the same cost, both interleaved with an in-process run of the same job.

    * end to end: wall time through the worker minus wall time in-process (what a user sees;
      it carries the noise of two separate compiles);
    * transport: wall time through the worker minus the job's own time inside the worker
      (pickling, the pipe, the dispatcher; the same compile on both sides of the subtraction).
    """
    spec = Spec(PROBLEM, "array", 10, 20, "loss", backend_requested=backend, runs=5)
    executor = explorer.WorkerExecutor(timeout=300)
    try:
        t0 = time.perf_counter()
        executor.submit(run_spec, spec).result()  # starts the child, imports jax, first compile
        first_job_s = time.perf_counter() - t0
        executor.submit(_timed, run_spec, spec).result()
        run_spec(spec)  # the in-process side warm too
        in_process, worker, diffs, transport, noop = [], [], [], [], []
        for r in range(rounds):
            order = ("in", "worker") if r % 2 == 0 else ("worker", "in")
            got = {}
            for side in order:
                t0 = time.perf_counter()
                if side == "in":
                    run_spec(spec)
                else:
                    inside = executor.submit(_timed, run_spec, spec).result()
                got[side] = time.perf_counter() - t0
            in_process.append(got["in"])
            worker.append(got["worker"])
            diffs.append(1e3 * (got["worker"] - got["in"]))
            transport.append(1e3 * (got["worker"] - inside))
            t0 = time.perf_counter()
            executor.submit(os.getpid).result()  # a job that does nothing: the bare round trip
            noop.append(1e3 * (time.perf_counter() - t0))
        workers_started = executor.workers_started
    finally:
        executor.shutdown()
    _log("worker overhead done")
    return {"spec": spec.label, "rounds": rounds, "first_job_s": first_job_s,
            "in_process_s": _summary(in_process), "worker_s": _summary(worker),
            "overhead_ms": _summary(diffs), "transport_ms": _summary(transport),
            "noop_round_trip_ms": _summary(noop), "workers_started": workers_started}


# -- c. named vs array vs dict -----------------------------------------------------------------
REP_FIGURES = ("compile_s", "total_compile_s", "hlo_pre_bytes", "hlo_post_bytes", "run_s")


def _measure_rep(rep: str, n: int, target: str, backend: str | None) -> dict[str, Any]:
    case = explorer.build_case(PROBLEM, rep, n, REP_HORIZON)
    m = explorer.measure_case(case, target, runs=REP_RUNS, backend=backend)
    return {"trace_s": m.trace_s, "lower_s": m.lower_s, "compile_s": m.compile_s,
            "total_compile_s": m.total_compile_s, "run_s": m.run_s,
            "hlo_pre_bytes": m.hlo_pre_bytes, "hlo_post_bytes": m.hlo_post_bytes,
            "jaxpr_eqns": m.jaxpr_eqns, "n_leaves": m.n_leaves, "cold": m.cold,
            "device_kind": m.device_kind}


def _paired_run_ratio(n: int, target: str, backend: str | None) -> float:
    """named/array runtime per call, the two compiled programs called in alternation in one loop
    (A B B A ...): both see the same machine state, unlike two measurements taken apart."""
    programs = {}
    with jax.default_device(_device(backend)):
        for rep in ("array", "named"):
            case = explorer.build_case(PROBLEM, rep, n, REP_HORIZON)
            args = jax.device_put(case.args)
            compiled = jax.jit(case.function(target)).lower(*args).compile()
            jax.block_until_ready(compiled(*args))
            programs[rep] = (compiled, args)
        times: dict[str, list[float]] = {"array": [], "named": []}
        for i in range(REP_RUNS):
            for rep in (("array", "named") if i % 2 == 0 else ("named", "array")):
                compiled, args = programs[rep]
                t0 = time.perf_counter()
                jax.block_until_ready(compiled(*args))
                times[rep].append(time.perf_counter() - t0)
    return statistics.median(times["named"]) / statistics.median(times["array"])


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def bench_representations(sizes: tuple[int, ...], rounds: int, dict_rounds: int,
                          backend: str | None) -> dict[str, Any]:
    cells = []
    for n in sizes:
        for target in ("loss", "grad"):
            runs: list[dict[str, dict[str, Any]]] = []
            paired: list[float] = []
            for r in range(rounds):
                reps = ["array", "named"]
                wanted_dict = dict_rounds if n < DICT_LARGE_N else min(dict_rounds, 1)
                if r < wanted_dict:
                    reps.append("dict")
                shift = r % len(reps)  # rotate the order each round
                reps = reps[shift:] + reps[:shift]
                runs.append({rep: _measure_rep(rep, n, target, backend) for rep in reps})
                paired.append(_paired_run_ratio(n, target, backend))
            _log(f"representations N={n} {target}: {rounds} rounds done")
            cell: dict[str, Any] = {"n_states": n, "target": target, "rounds": runs,
                                    "named_over_array_paired_run_s": _summary(paired)}
            # Whether named and array are one program to XLA (deterministic, unlike times).
            named = explorer.build_case(PROBLEM, "named", n, REP_HORIZON)
            array = explorer.build_case(PROBLEM, "array", n, REP_HORIZON)
            same = explorer.compare(named.function(target), named.args,
                                    array.function(target), array.args)
            cell["named_is_array"] = {"same_jaxpr": same.same_jaxpr, "same_hlo": same.same_hlo}
            for other in ("named", "dict"):
                ratios = {}
                for fig in REP_FIGURES:
                    per_round = [_ratio(run[other][fig], run["array"][fig])
                                 for run in runs if other in run]
                    per_round = [x for x in per_round if x is not None]
                    med_other = _median([run[other][fig] for run in runs if other in run])
                    med_array = _median([run["array"][fig] for run in runs])
                    ratios[fig] = {"ratio_of_medians": _ratio(med_other, med_array),
                                   "per_round": _summary(per_round)}
                cell[f"{other}_over_array"] = ratios
            cell["medians"] = {
                rep: {fig: _median([run[rep][fig] for run in runs if rep in run])
                      for fig in (*REP_FIGURES, "jaxpr_eqns", "n_leaves")}
                for rep in ("array", "named", "dict")}
            cell["dict_rounds"] = sum("dict" in run for run in runs)
            cells.append(cell)
    return {"problem": PROBLEM, "horizon": REP_HORIZON, "sizes": list(sizes), "rounds": rounds,
            "dict_rounds": dict_rounds, "runs_per_measurement": REP_RUNS, "cells": cells}


# -- d. dashboard ----------------------------------------------------------------------------
def bench_dashboard_section(quick: bool) -> dict[str, Any]:
    """Run ``bench_dashboard.py`` (a browser against ``panel serve``) if it can run here."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_dashboard  # noqa: PLC0415 - lives next to this script

    why = bench_dashboard.available()
    if why:
        return {"skipped": why}
    _log("dashboard (panel serve + chromium) ...")
    result = bench_dashboard.run(quick)
    _log("dashboard done" + (f" with errors: {result['errors']}" if result["errors"] else ""))
    return result


# -- goals -----------------------------------------------------------------------------------
def evaluate_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    goals = []
    low, high = GOALS["compile_ratio"]
    fid = results.get("fidelity")
    if fid:
        for key, prog in fid["programs"].items():
            ratio = prog["compile_ratio"]["median"]
            lo, hi = prog["compile_ratio"]["spread"]
            fastest = prog.get("compile_ratio_of_fastest")
            goals.append({"benchmark": "a", "what": f"measure/bare compile time, {key}",
                          "value": ratio, "goal": f"{low}–{high}", "pass": low <= ratio <= high,
                          "note": f"per-round ratios {_fmt(lo)}–{_fmt(hi)}"
                                  + (f"; fastest measure / fastest bare {_fmt(fastest)}"
                                     if fastest is not None else "")})
            pct = prog["overhead_pct"]["median"]
            parts = fid["overhead_breakdown_s"].get(key, {})
            top = sorted(((k, t) for k, t in parts.items() if "only" not in k),
                         key=lambda kv: -kv[1])[:3]
            ok = pct <= GOALS["overhead_pct"]
            goals.append({"benchmark": "a", "what": f"measurement overhead beyond stages, {key} (%)",
                          "value": pct, "goal": f"<= {GOALS['overhead_pct']:g} %", "pass": ok,
                          "note": "" if ok else "largest parts: " + ", ".join(
                              f"{k} {1e3 * t:.0f} ms" for k, t in top)})
    work = results.get("worker")
    if work:
        for key, what in (("overhead_ms", "end to end"), ("transport_ms", "transport")):
            ms = work[key]["median"]
            goals.append({"benchmark": "b", "what": f"worker overhead per job, {what} (ms)",
                          "value": ms, "goal": f"<= {GOALS['worker_overhead_ms']:g} ms",
                          "pass": ms <= GOALS["worker_overhead_ms"]})
    reps = results.get("representations")
    if reps:
        limit = GOALS["named_over_array"]
        for cell in reps["cells"]:
            paired = cell.get("named_over_array_paired_run_s")
            for fig, ratio in cell["named_over_array"].items():
                value = ratio["ratio_of_medians"]
                what = f"named/array {fig}, N={cell['n_states']} {cell['target']}"
                if fig == "run_s" and paired and paired.get("median") is not None:
                    # Runtimes of tens of microseconds wander by up to 2x between two separate
                    # measurements on a shared machine; calls alternated in one loop do not.
                    value = paired["median"]
                    what = (f"named/array run_s (calls alternated in one loop), "
                            f"N={cell['n_states']} {cell['target']}")
                    spread = paired["spread"]
                else:
                    spread = ratio["per_round"]["spread"]
                if value is None:
                    continue
                same = cell.get("named_is_array", {})
                identical = bool(same.get("same_jaxpr") and same.get("same_hlo"))
                note = ""
                if value > limit and identical and fig.endswith("_s"):
                    note = ("same program to XLA; per-round ratios "
                            f"{_fmt(spread[0])}–{_fmt(spread[1])}"
                            + ("; a call also flattens the NamedArray pytree in Python "
                               "(microseconds)" if fig == "run_s" else ", so timing noise"))
                goals.append({"benchmark": "c", "what": what, "value": value,
                              "goal": f"<= {limit:g}", "pass": value <= limit, "note": note})
    dash = results.get("dashboard")
    if dash and not dash.get("errors"):
        first = dash.get("first_render_s")
        first = first.get("median") if isinstance(first, dict) else first
        if first is not None:
            goals.append({"benchmark": "d", "what": "server ready -> first render (s)",
                          "value": first, "goal": f"<= {GOALS['first_render_s']:g} s",
                          "pass": first <= GOALS["first_render_s"],
                          "note": "" if first <= GOALS["first_render_s"] else
                                  "the server renders the four HoloViews plots of the example "
                                  "(about 0.6 s) and the browser draws the page on the same cores"})
        for key, when in (("first_result_beyond_measurement_cold_s", "first run on a fresh server"),
                          ("first_result_beyond_measurement_warm_s", "warm")):
            value = dash.get(key)
            value = value.get("median") if isinstance(value, dict) else value
            if value is None:
                continue
            goals.append({"benchmark": "d",
                          "what": f"click -> first result in the plot, beyond its measurement, "
                                  f"{when} (s)",
                          "value": value, "goal": f"<= {GOALS['first_result_beyond_s']:g} s",
                          "pass": value <= GOALS["first_result_beyond_s"], "note": ""})
        busy = (dash.get("widget_roundtrip_during_compile_s") or {}).get("median")
        if busy is not None:
            goals.append({"benchmark": "d", "what": "widget change shown while a long compile runs (s)",
                          "value": busy, "goal": f"<= {GOALS['widget_busy_s']:g} s",
                          "pass": busy <= GOALS["widget_busy_s"],
                          "note": "the compile runs in the worker process; the page's own event "
                                  "loop answers, at its idle speed "
                                  f"({_fmt(dash['widget_roundtrip_idle_s']['median'])} s)"
                                  if dash.get("widget_roundtrip_idle_s") else ""})
    return goals


# -- markdown --------------------------------------------------------------------------------
def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}g}" if abs(x) < 100 else f"{x:,.0f}"


def _fmt_summary(s: dict[str, Any], digits: int = 3) -> str:
    if s is None or s.get("median") is None:
        return "n/a"
    lo, hi = s["spread"]
    return f"{_fmt(s['median'], digits)} [{_fmt(lo, digits)}–{_fmt(hi, digits)}]"


def _pf(ok: bool) -> str:
    return "PASS" if ok else "**MISS**"


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["machine"], results["config"]
    gpu = meta["backend"] == "gpu"
    lines = [
        "# Benchmarks",
        "",
        "Written by `benchmarks/run_benchmarks.py` (raw figures in the JSON it writes). Every",
        "comparison is interleaved (A B A B ..., order alternating by round) and cold (caches",
        "cleared, persistent cache off, a fresh function object each time). Figures are medians",
        "over rounds; `[a–b]` is the spread (min–max) of the per-round values.",
        "",
    ]
    if not gpu:
        lines += ["This is a CPU run: as the project's notes ask, absolute compile and run times are",
                  "not quoted here, only ratios and sizes (the JSON keeps every time). Absolute",
                  "times are quoted from a GPU run (`--backend gpu`) only.", ""]
    lines += [
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| command | `{cfg['command']}` |",
        f"| mode | {'quick' if cfg['quick'] else 'full'} |",
        f"| date | {meta['date']} |",
        f"| CPU | {meta['cpu_model']} ({meta['cpu_count']} logical cores, {meta['cpu_usable']} usable) |",
        f"| memory | {meta['memory_gib']} GiB |",
        f"| load average (1/5/15 min) at start / end | {meta['loadavg_start']} / {meta.get('loadavg_end')} |",
        f"| backend / device kind | {meta['backend']} / {meta['device_kind']} |",
        f"| JAX / jaxlib | {meta['jax_version']} / {meta['jaxlib_version']} |",
        f"| Python | {meta['python']} ({meta['platform']}) |",
        f"| wall time of the whole run | {results['elapsed_s']:.0f} s |",
    ]
    if cfg.get("note"):
        lines += [f"| note | {cfg['note']} |"]
    lines += ["", "## Goals", "",
              "Each verdict is the median against its goal; a note says what this run shows about "
              "a miss.", "",
              "| bench | figure | measured | goal | verdict | note |", "|---|---|---|---|---|---|"]
    for g in results["goals"]:
        note = g.get("note", "") if not g["pass"] else ""
        lines.append(f"| {g['benchmark']} | {g['what']} | {_fmt(g['value'])} | {g['goal']} "
                     f"| {_pf(g['pass'])} | {note} |")
    passed = sum(g["pass"] for g in results["goals"])
    lines += ["", f"{passed} of {len(results['goals'])} goals met.", ""]

    fid = results.get("fidelity")
    if fid:
        lines += [
            "## a. Fidelity and overhead of `explorer.measure`",
            "",
            f"Programs: `{PROBLEM}` at N={fid['n_states']}, horizon {fid['horizon']} (jax#4667's "
            f"dict / array / unflatten), targets {', '.join(fid['targets'])}; {fid['rounds']} "
            "interleaved rounds. *Compile ratio* is `measure`'s compile stage over a bare "
            "`jax.jit(f).lower(*args).compile()`'s `.compile()`; *trace+lower+compile ratio* compares "
            "the whole wait; *overhead* is the wall time of one `measure(..., runs=1)` call beyond "
            "the sum of the stages it reports (trace, lower, compile, first run, run), relative to "
            "that sum. *Fastest / fastest* divides the quickest compile of each side (the run least "
            "disturbed by other processes) and is context for a noisy median.",
            "",
        ]
        head = ("| program | compile ratio | fastest / fastest | trace+lower+compile ratio | overhead % "
                "| overhead ms | cold every time |")
        lines += [head, "|---|---|---|---|---|---|---|"]
        for key, p in fid["programs"].items():
            lines.append(
                f"| {key} | {_fmt_summary(p['compile_ratio'])} | {_fmt(p.get('compile_ratio_of_fastest'))} "
                f"| {_fmt_summary(p['total_compile_ratio'])} "
                f"| {_fmt_summary(p['overhead_pct'], 2)} | {_fmt_summary(p['overhead_ms'], 2)} "
                f"| {'yes' if p['all_cold'] and p['bare_compiled_every_time'] else 'NO'} |")
        if gpu:
            lines += ["", "| program | bare compile s | measure compile s | measure wall s |", "|---|---|---|---|"]
            for key, p in fid["programs"].items():
                lines.append(f"| {key} | {_fmt_summary(p['bare_compile_s'])} | "
                             f"{_fmt_summary(p['measure_compile_s'])} | {_fmt_summary(p['measure_wall_s'])} |")
        lines += ["", "Where the overhead goes (each post-compile query `measure` makes, timed alone, ms, "
                  "median of 3):", ""]
        names = list(next(iter(fid["overhead_breakdown_s"].values())))
        lines += ["| program | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for key, parts in fid["overhead_breakdown_s"].items():
            lines.append(f"| {key} | " + " | ".join(_fmt(1e3 * parts[n], 2) for n in names) + " |")
        lines.append("")

    work = results.get("worker")
    if work:
        lines += [
            "## b. Worker overhead per job",
            "",
            f"`{work['spec']}` (build + measure, as a sweep runs it) {work['rounds']} times in-process "
            "and through a warm `explorer.WorkerExecutor`, interleaved. *End to end* is the "
            "per-round difference of wall times (worker − in-process): what a user sees, but it "
            "subtracts two separate cold compiles, so it carries their noise (it can come out "
            "negative). *Transport* is the wall time through the worker minus the same job's time "
            "measured inside the worker: pickling, the pipe and the dispatcher, without compile "
            "noise. The goal is in milliseconds, so it is quoted in milliseconds even on a CPU "
            "run. The round trip of a job that does nothing (`os.getpid`) is the floor.",
            "",
            "| figure | median [spread] |",
            "|---|---|",
            f"| end-to-end overhead per job, ms | {_fmt_summary(work['overhead_ms'], 2)} |",
            f"| transport overhead per job, ms | {_fmt_summary(work['transport_ms'], 2)} |",
            f"| empty job round trip, ms | {_fmt_summary(work['noop_round_trip_ms'], 2)} |",
            f"| worker processes started | {work['workers_started']} |",
            "",
        ]
        if gpu:
            lines += [f"First job (starts the worker, imports JAX, compiles): {work['first_job_s']:.2f} s.", ""]

    reps = results.get("representations")
    if reps:
        lines += [
            "## c. `named` vs `array` vs `dict`",
            "",
            f"`{reps['problem']}`, horizon {reps['horizon']}, N in {reps['sizes']}; "
            f"{reps['rounds']} interleaved rounds of array and named; dict (context, no goal) in "
            f"{reps['dict_rounds']} of them (1 at N >= {DICT_LARGE_N}). `compile_s` is the XLA "
            "compile stage, `total_compile_s` trace + lower + compile, `run_s` the median of "
            f"{reps['runs_per_measurement']} steady calls. Ratio cells: ratio of medians "
            "[spread of per-round ratios].",
            "",
            "| N | target | named = array to XLA | named/array compile | named/array trace+lower+compile "
            "| named/array StableHLO | named/array optimised HLO | named/array run "
            "| named/array run, calls alternated | dict/array compile | dict/array StableHLO |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for cell in reps["cells"]:
            na, da = cell["named_over_array"], cell["dict_over_array"]

            def rc(r: dict[str, Any]) -> str:
                if r["ratio_of_medians"] is None:
                    return "n/a"
                lo_hi = r["per_round"]["spread"]
                text = _fmt(r["ratio_of_medians"])
                if lo_hi and lo_hi[0] != lo_hi[1]:
                    text += f" [{_fmt(lo_hi[0])}–{_fmt(lo_hi[1])}]"
                return text

            same = cell.get("named_is_array", {})
            same_text = ("yes" if same.get("same_jaxpr") and same.get("same_hlo") else
                         f"no (jaxpr {same.get('same_jaxpr')}, HLO {same.get('same_hlo')})")
            lines.append(f"| {cell['n_states']} | {cell['target']} | {same_text} | {rc(na['compile_s'])} | "
                         f"{rc(na['total_compile_s'])} | {rc(na['hlo_pre_bytes'])} | "
                         f"{rc(na['hlo_post_bytes'])} | {rc(na['run_s'])} | "
                         f"{_fmt_summary(cell.get('named_over_array_paired_run_s'))} | "
                         f"{rc(da['compile_s'])} | {rc(da['hlo_pre_bytes'])} |")
        lines += ["", "*named = array to XLA*: `explorer.compare` finds the same jaxpr (up to names) "
                  "and the same StableHLO (once module and argument names are normalised). Where it "
                  "says yes, XLA compiles and runs one and the same program for both, so a compile "
                  "ratio away from 1 in that row is machine noise, not a cost of `named`. A call "
                  "still differs by one thing: JAX flattens the arguments in Python, and a "
                  "`NamedArray` is a custom pytree node (a few microseconds per call, visible only "
                  "for programs that run in tens of microseconds). *named/array run* divides the "
                  "medians of two separate measurements (each the median of "
                  f"{reps['runs_per_measurement']} calls); on a shared machine microsecond runtimes "
                  "wander between them by up to 2x. *Calls alternated* compiles both programs and "
                  f"calls them in turn in one loop ({reps['runs_per_measurement']} calls each, per "
                  "round: median [spread] over rounds), so both see the same machine state; the run "
                  "goal is read from it.", ""]
        lines += ["Program sizes (deterministic, so quoted on any backend): StableHLO bytes and "
                  "jaxpr equations (recursive).", "",
                  "| N | target | array bytes | named bytes | dict bytes | array eqns | named eqns | dict eqns |",
                  "|---|---|---|---|---|---|---|---|"]
        for cell in reps["cells"]:
            med = cell["medians"]
            lines.append(
                f"| {cell['n_states']} | {cell['target']} | {_fmt(med['array']['hlo_pre_bytes'])} | "
                f"{_fmt(med['named']['hlo_pre_bytes'])} | {_fmt(med['dict']['hlo_pre_bytes'])} | "
                f"{_fmt(med['array']['jaxpr_eqns'])} | {_fmt(med['named']['jaxpr_eqns'])} | "
                f"{_fmt(med['dict']['jaxpr_eqns'])} |")
        if gpu:
            lines += ["", f"Absolute times on {meta['device_kind']} (medians, s):", "",
                      "| N | target | array compile | named compile | dict compile | array run | named run | dict run |",
                      "|---|---|---|---|---|---|---|---|"]
            for cell in reps["cells"]:
                med = cell["medians"]
                lines.append(
                    f"| {cell['n_states']} | {cell['target']} | {_fmt(med['array']['compile_s'])} | "
                    f"{_fmt(med['named']['compile_s'])} | {_fmt(med['dict']['compile_s'])} | "
                    f"{_fmt(med['array']['run_s'])} | {_fmt(med['named']['run_s'])} | "
                    f"{_fmt(med['dict']['run_s'])} |")
        if cfg["quick"]:
            lines += ["", f"`--quick`: N was capped at {QUICK_MAX_N} (the full run measures "
                      f"N in {list(REP_SIZES_FULL)}).", ""]
        else:
            lines.append("")

    lines += _dashboard_markdown(results.get("dashboard"))
    lines += ["## e. GPU", "", results.get("gpu_note", "")]
    return "\n".join(lines) + "\n"


def _dashboard_markdown(dash: dict[str, Any] | None) -> list[str]:
    lines = ["## d. Dashboard", ""]
    if dash is None:
        return lines + ["Not run (`--only` left it out).", ""]
    if "skipped" in dash:
        return lines + [f"Not run: {dash['skipped']}.", ""]
    lines += [
        "`benchmarks/bench_dashboard.py`: `panel serve apps/explorer_app.py` on 127.0.0.1 with a "
        "throw-away store, driven by Playwright with Debian's chromium (headless, "
        f"{' '.join(a for a in ('--no-sandbox', '--disable-gpu', '--disable-background-networking'))}). "
        "Browser, server and worker share this machine's cores, so these are latencies a user on "
        "this machine would see, not a property of the code alone. Seconds unless stated; "
        f"{dash.get('rounds')} rounds where a median is given. *First render* waits for the four "
        "plots to be drawn on their canvases; *page complete* for rows in the results table. "
        "*First result* is the moment the first measured case is in the compile-time plot "
        "(the Bokeh data in the page, read every 10 ms; the page redraws that plot first and "
        "the size and runtime plots on the next turn of its event loop, about 0.3 s later); "
        "*beyond the measurement* subtracts that "
        "case's own measurement time as the worker stamped it in the store (trace, lower, "
        "compile and runs); *finished* is read off the status line. The default case is "
        "measured (decay, N=100, H=200, dict and array, loss). The long "
        "compile is dict at N=3000 running in the shared worker; *widget round trip* is picking "
        "an N preset until the server has copied it into the N entry; *plot update* is changing "
        "the compile-stage select until the compile-time plot in the page has its new lines.",
        "",
        "| figure | value |",
        "|---|---|",
    ]

    def cell(key: str, scale: float = 1.0, digits: int = 3) -> str:
        value = dash.get(key)
        if value is None:
            return "n/a"
        if isinstance(value, dict):
            if value.get("median") is None:
                return "n/a"
            lo, hi = value["spread"]
            return (f"{_fmt(value['median'] * scale, digits)} "
                    f"[{_fmt(lo * scale, digits)}–{_fmt(hi * scale, digits)}]")
        return _fmt(value * scale, digits)

    rows = [
        ("server start → HTTP ready", cell("server_ready_s")),
        ("server ready → first render (four plots drawn, Run button), a fresh page each time",
         cell("first_render_s")),
        ("server ready → page complete (results table filled)", cell("page_complete_s")),
        ("first render of the first page after the browser started", cell("first_render_browser_start_s")),
        ("click Run → first result in the plot, first run on a fresh server", cell("click_to_first_result_cold_s")),
        ("… of which the first case's own measurement", cell("first_result_measurement_cold_s")),
        ("… beyond the measurement", cell("first_result_beyond_measurement_cold_s")),
        ("click Run → run finished (2 cases), first run on a fresh server", cell("click_to_finished_cold_s")),
        ("click Run → first result in the plot, warm", cell("click_to_first_result_warm_s")),
        ("… of which the first case's own measurement", cell("first_result_measurement_warm_s")),
        ("… beyond the measurement", cell("first_result_beyond_measurement_warm_s")),
        ("click Run → run finished (2 cases), warm", cell("click_to_finished_warm_s")),
        ("widget round trip, idle", cell("widget_roundtrip_idle_s")),
        ("widget round trip, during a long compile", cell("widget_roundtrip_during_compile_s")),
        ("plot update, idle", cell("plot_update_idle_s")),
        ("plot update, during a long compile", cell("plot_update_during_compile_s")),
        ("probes that ended after the compile (not counted)", str(dash.get("probes_not_during_compile", "n/a"))),
        ("Cancel → run cancelled", cell("cancel_s")),
        (f"server memory per additional session (fresh server, {dash.get('sessions')} sessions), MiB",
         cell("rss_per_session_bytes", 1 / 2**20)),
        ("server memory with one session, MiB", cell("rss_one_session_bytes", 1 / 2**20)),
        ("first render of each additional session, the earlier ones still open",
         cell("first_render_with_sessions_open_s")),
    ]
    lines += [f"| {name} | {value} |" for name, value in rows]
    if dash.get("errors"):
        lines += ["", "Errors (the figures above that say n/a were not reached): "
                  + "; ".join(f"`{e}`" for e in dash["errors"])]
    return lines + [""]


def _add_derived(results: dict[str, Any]) -> None:
    """Fill in figures a JSON written by an older version of this script lacks."""
    for prog in (results.get("fidelity") or {}).get("programs", {}).values():
        if "compile_ratio_of_fastest" not in prog:
            items = prog["pairs"]
            prog["compile_ratio_of_fastest"] = (min(p["measure"]["compile_s"] for p in items)
                                                / min(p["bare"]["compile_s"] for p in items))


# -- main ------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"fewer rounds; N capped at {QUICK_MAX_N}; loss only in the fidelity check")
    p.add_argument("--backend", default=None, help="cpu, gpu, ... (default: JAX's default)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results.json"), help="JSON output")
    p.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"), help="markdown output")
    p.add_argument("--note", default="", help="a line for the doc, e.g. whether the machine was quiet")
    p.add_argument("--only", default="a,b,c,d", help="which benchmarks (comma-separated from a,b,c,d)")
    p.add_argument("--render", default=None, metavar="JSON",
                   help="only write the markdown again from a results JSON of an earlier run")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7 quick, 9 full)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    global _COMPILES
    args = parse_args(argv)
    if args.render:
        results = json.loads(Path(args.render).read_text(encoding="utf-8"))
        _add_derived(results)
        results["goals"] = evaluate_goals(results)
        Path(args.doc).write_text(render_markdown(results), encoding="utf-8")
        _log(f"rendered {args.doc} from {args.render}")
        return 0
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    try:
        device = _device(args.backend)
    except RuntimeError as err:
        print(f"run_benchmarks: backend {args.backend!r} is not available here ({err})", file=sys.stderr)
        return 2
    _COMPILES = _CompileCounter()
    rounds = args.rounds or (7 if args.quick else 9)
    sizes = tuple(n for n in REP_SIZES_FULL if n <= QUICK_MAX_N) + (QUICK_MAX_N,) if args.quick \
        else REP_SIZES_FULL
    sizes = tuple(sorted(set(sizes)))
    command = "python benchmarks/run_benchmarks.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    results: dict[str, Any] = {
        "machine": machine_info(args.backend),
        "config": {"quick": args.quick, "backend": args.backend, "rounds": rounds,
                   "sizes": list(sizes), "note": args.note, "command": command.strip(),
                   "only": sorted(only)},
    }
    _log(f"benchmarks on {device.platform} ({device.device_kind}), rounds={rounds}, sizes={sizes}")
    start = time.perf_counter()
    if "a" in only:
        targets = ("loss",) if args.quick else ("loss", "grad")
        results["fidelity"] = bench_fidelity(rounds, targets, args.backend)
    if "b" in only:
        results["worker"] = bench_worker(max(rounds * 4, 20), args.backend)
    if "c" in only:
        dict_rounds = 2 if args.quick else 3
        results["representations"] = bench_representations(sizes, rounds, dict_rounds, args.backend)
    if "d" in only:
        results["dashboard"] = bench_dashboard_section(args.quick)
    results["elapsed_s"] = time.perf_counter() - start
    results["machine"]["loadavg_end"] = _loadavg()
    results["goals"] = evaluate_goals(results)
    results["gpu_note"] = (
        f"This run is on {device.device_kind}." if device.platform == "gpu" else
        "No GPU run yet: this machine has none. On a GPU machine run "
        "`python benchmarks/run_benchmarks.py --backend gpu --out benchmarks/results-gpu.json "
        "--doc docs/benchmarks-gpu.md`; the results are labelled with the GPU's device kind.")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    doc = Path(args.doc)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(render_markdown(results), encoding="utf-8")
    passed = sum(g["pass"] for g in results["goals"])
    _log(f"{passed}/{len(results['goals'])} goals met; wrote {out} and {doc}")
    for g in results["goals"]:
        if not g["pass"]:
            _log(f"MISS: {g['what']} = {_fmt(g['value'])} (goal {g['goal']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
