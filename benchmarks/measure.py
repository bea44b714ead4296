"""The measuring half of the benchmarks: runs them and writes every raw figure to a JSON file.

    python benchmarks/measure.py [--quick] [--backend cpu|gpu] [--only a,b,c,d] [--out FILE.json]

``report.py`` turns that file into ``docs/benchmarks-run.md``; ``run_benchmarks.py`` runs both.

a. Fidelity and overhead: :func:`explorer.measure` against the bare-JAX reference
   (:func:`bare_jit`: a fresh ``jax.jit(f).lower(*args).compile()``) of the same programs
   (jax-ml/jax#4667's dict / array / unflatten at N=100, horizon 200), interleaved, cold each time.
b. Worker overhead per job: one measurement through :class:`explorer.WorkerExecutor` against the
   same measurement in-process, after the worker is warm.
c. ``named`` against ``array`` (and ``dict`` for context) over N, for the loss and its gradient:
   compile time, program size and runtime ratios.
d. The dashboard in a real browser (``bench_dashboard.py``), where chromium and Playwright exist.

Every comparison is interleaved (A B A B ...), so noise on a shared machine hits both sides
alike. The public API of ``explorer`` is used throughout, with one exception: the worker
benchmark submits ``explorer._src.jobs.jobs.run_spec``, the job a sweep sends to its worker, which has no
public name.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# A GPU in this process must not take most of its memory up front: the worker needs some too.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):  # run from a checkout without installing; common.py
    if _path not in sys.path:
        sys.path.insert(0, _path)

import jax  # noqa: E402
import jaxlib  # noqa: E402
from jax.experimental.compilation_cache import compilation_cache  # noqa: E402

import explorer  # noqa: E402
from common import host_info, loadavg, log, median, summary  # noqa: E402

PROBLEM = "decay"
FIDELITY_N, FIDELITY_HORIZON = 100, 200
FIDELITY_PROGRAMS = ("dict", "array", "unflatten")
REP_HORIZON = 200
REP_SIZES_FULL = (10, 100, 1000, 3000)
QUICK_MAX_N = 300
REP_RUNS = 100  # steady-state calls per measurement; run_s is their median
# dict at N >= this compiles for seconds to minutes: it is context, not a goal, so fewer rounds.
DICT_LARGE_N = 1000
SECTIONS = ("a", "b", "c", "d")


# -- the machine -----------------------------------------------------------------------------
def device(backend: str | None = None) -> Any:
    """The device a benchmark measures on: the first of ``backend`` (default: JAX's default)."""
    return jax.devices(backend)[0] if backend else jax.devices()[0]


def machine_info(backend: str | None = None) -> dict[str, Any]:
    """:func:`common.host_info` plus the backend, device kind and JAX/explorer versions."""
    dev = device(backend)
    return {**host_info(), "backend": dev.platform, "device_kind": dev.device_kind,
            "jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
            "explorer_version": explorer.__version__}


# -- the bare-JAX reference ------------------------------------------------------------------
class _CompileEvents:
    """XLA backend compiles and persistent-cache hits seen by ``jax.monitoring``: the same two
    events ``explorer.measure`` counts, so the reference proves it is cold the same way."""

    BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
    CACHE_HIT = "/jax/compilation_cache/cache_hits"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registered = False
        self.backend_compiles = 0
        self.cache_hits = 0

    def ensure_registered(self) -> None:
        with self._lock:
            if not self._registered:
                jax.monitoring.register_event_listener(self._on_event)
                jax.monitoring.register_event_duration_secs_listener(self._on_duration)
                self._registered = True

    def _on_event(self, event: str, **kwargs: Any) -> None:
        if event == self.CACHE_HIT:
            with self._lock:
                self.cache_hits += 1

    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == self.BACKEND_COMPILE:
            with self._lock:
                self.backend_compiles += 1

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.backend_compiles, self.cache_hits


_EVENTS = _CompileEvents()
_warmed: set[str] = set()


def bare_jit(fn: Callable, args: Sequence[Any], backend: str | None = None, *,
             compile: bool = True) -> dict[str, Any]:
    """The bare-JAX reference: what a user would write, ``jax.jit(fn).lower(*args).compile()``.

    Taken cold the way ``explorer.measure`` takes its compiles (explorer/_src/core/measure.py): the
    arguments placed uncommitted on the backend's default device (outside the timing), one
    trivial compile per backend first (the first compile in a process also sets XLA up), the
    persistent compilation cache turned off *and reset* (JAX reads that flag once per process,
    at its first compile, unless the cache is reset), in-memory caches cleared, a fresh
    ``jax.jit``. XLA backend compiles and persistent-cache hits are counted, so a result proves
    it was cold: ``cold`` is ``backend_compiles >= 1 and cache_hits == 0``.

    Returns seconds: ``lower_s`` (trace + lower), ``compile_s`` (``None`` with
    ``compile=False``) and ``total_s``; and ``backend_compiles``, ``cache_hits``, ``cold``.
    """
    _EVENTS.ensure_registered()
    dev = device(backend)
    previous = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        with jax.default_device(dev):
            placed = jax.device_put(list(args))
            jax.block_until_ready(placed)
            if dev.platform not in _warmed:
                jax.jit(lambda x: x * 2 + 1).lower(jax.numpy.ones(3)).compile()
                _warmed.add(dev.platform)
            jax.clear_caches()
            c0, h0 = _EVENTS.snapshot()
            t0 = time.perf_counter()
            lowered = jax.jit(fn).lower(*placed)
            t1 = time.perf_counter()
            if compile:
                lowered.compile()
            t2 = time.perf_counter()
            c1, h1 = _EVENTS.snapshot()
    finally:
        jax.config.update("jax_enable_compilation_cache", previous)
        compilation_cache.reset_cache()
    compiles, hits = c1 - c0, h1 - h0
    return {"lower_s": t1 - t0, "compile_s": t2 - t1 if compile else None, "total_s": t2 - t0,
            "backend_compiles": compiles, "cache_hits": hits,
            "cold": hits == 0 and (compiles >= 1 or not compile)}


# -- a. fidelity and overhead ----------------------------------------------------------------
def _fidelity_case(representation: str) -> Any:
    return explorer.build_case(PROBLEM, representation, FIDELITY_N, FIDELITY_HORIZON)


def _bare(representation: str, target: str, backend: str | None) -> dict[str, Any]:
    case = _fidelity_case(representation)
    return bare_jit(case.function(target), case.args, backend)


def _measured(representation: str, target: str, backend: str | None) -> dict[str, Any]:
    """The same program through ``explorer.measure`` (one steady run, so stages sum exactly)."""
    case = _fidelity_case(representation)
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
    """Where a measurement's time beyond its stages goes: each query ``measure`` makes after
    the compile, timed alone (the JAX calls themselves; explorer only wraps them)."""
    case = _fidelity_case(representation)
    dev = device(backend)
    with jax.default_device(dev):
        args = jax.device_put(case.args)
        jax.clear_caches()
        traced = jax.jit(case.function(target)).trace(*args)
        lowered = traced.lower()
        compiled = lowered.compile()

    def put() -> None:
        with jax.default_device(dev):
            jax.block_until_ready(jax.device_put(list(case.args)))

    parts = {
        "clear_caches": jax.clear_caches,
        "device_put": put,
        "stablehlo_text": lowered.as_text,
        "optimised_hlo_text": compiled.as_text,
        "cost_analysis": compiled.cost_analysis,
        "count_eqns": lambda: explorer.count_eqns(traced.jaxpr),
        # Not part of a default measurement: what memory=True would add.
        "memory_analysis (memory=True only)": compiled.memory_analysis,
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
        log(f"fidelity round {r + 1}/{rounds} done")
    programs = {}
    for key, items in pairs.items():
        compile_ratio = [p["measure"]["compile_s"] / p["bare"]["compile_s"] for p in items]
        total_ratio = [(p["measure"]["trace_s"] + p["measure"]["lower_s"] + p["measure"]["compile_s"])
                       / p["bare"]["total_s"] for p in items]
        programs[key] = {
            "compile_ratio": summary(compile_ratio),
            # The fastest run of each side is the one least disturbed by other processes.
            "compile_ratio_of_fastest": (min(p["measure"]["compile_s"] for p in items)
                                         / min(p["bare"]["compile_s"] for p in items)),
            "total_compile_ratio": summary(total_ratio),
            "overhead_pct": summary([p["measure"]["overhead_pct"] for p in items]),
            "overhead_ms": summary([1e3 * p["measure"]["overhead_s"] for p in items]),
            "bare_compile_s": summary([p["bare"]["compile_s"] for p in items]),
            "measure_compile_s": summary([p["measure"]["compile_s"] for p in items]),
            "measure_wall_s": summary([p["measure"]["wall_s"] for p in items]),
            "all_cold": all(p["measure"]["cold"] and p["measure"]["cache_hits"] == 0 for p in items),
            "bare_compiled_every_time": all(p["bare"]["backend_compiles"] >= 1 for p in items),
            "bare_cold_every_time": all(p["bare"]["cold"] for p in items),
            "hlo_pre_bytes": items[0]["measure"]["hlo_pre_bytes"],
            "pairs": items,
        }
    breakdown = {f"{rep}/{target}": _overhead_breakdown(rep, target, backend)
                 for target in targets for rep in FIDELITY_PROGRAMS}
    return {"problem": PROBLEM, "n_states": FIDELITY_N, "horizon": FIDELITY_HORIZON,
            "rounds": rounds, "targets": list(targets), "programs": programs,
            "overhead_breakdown_s": breakdown}


# -- b. worker overhead ----------------------------------------------------------------------
def timed(fn: Callable, *args: Any) -> float:
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
    # The job a sweep sends to its worker; it has no public name (see the module docstring).
    from explorer._src.jobs.jobs import run_spec  # noqa: PLC0415

    spec = explorer.Spec(PROBLEM, "array", 10, 20, "loss", backend_requested=backend, runs=5)
    executor = explorer.WorkerExecutor(timeout=300)
    try:
        t0 = time.perf_counter()
        executor.submit(run_spec, spec).result()  # starts the child, imports jax, first compile
        first_job_s = time.perf_counter() - t0
        executor.submit(timed, run_spec, spec).result()
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
                    inside = executor.submit(timed, run_spec, spec).result()
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
    log("worker overhead done")
    return {"spec": spec.label, "rounds": rounds, "first_job_s": first_job_s,
            "in_process_s": summary(in_process), "worker_s": summary(worker),
            "overhead_ms": summary(diffs), "transport_ms": summary(transport),
            "noop_round_trip_ms": summary(noop), "workers_started": workers_started}


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
    with jax.default_device(device(backend)):
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
            log(f"representations N={n} {target}: {rounds} rounds done")
            cell: dict[str, Any] = {"n_states": n, "target": target, "rounds": runs,
                                    "named_over_array_paired_run_s": summary(paired)}
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
                    med_other = median([run[other][fig] for run in runs if other in run])
                    med_array = median([run["array"][fig] for run in runs])
                    ratios[fig] = {"ratio_of_medians": _ratio(med_other, med_array),
                                   "per_round": summary(per_round)}
                cell[f"{other}_over_array"] = ratios
            cell["medians"] = {
                rep: {fig: median([run[rep][fig] for run in runs if rep in run])
                      for fig in (*REP_FIGURES, "jaxpr_eqns", "n_leaves")}
                for rep in ("array", "named", "dict")}
            cell["dict_rounds"] = sum("dict" in run for run in runs)
            cells.append(cell)
    return {"problem": PROBLEM, "horizon": REP_HORIZON, "sizes": list(sizes), "rounds": rounds,
            "dict_rounds": dict_rounds, "dict_large_n": DICT_LARGE_N,
            "runs_per_measurement": REP_RUNS, "cells": cells}


# -- d. dashboard ----------------------------------------------------------------------------
def bench_dashboard_section(quick: bool) -> dict[str, Any]:
    """Run ``bench_dashboard.py`` (a browser against ``panel serve``) if it can run here."""
    import bench_dashboard  # noqa: PLC0415 - lives next to this script

    why = bench_dashboard.available()
    if why:
        return {"skipped": why}
    log("dashboard (panel serve + chromium) ...")
    result = bench_dashboard.run(quick)
    log("dashboard done" + (f" with errors: {result['errors']}" if result["errors"] else ""))
    return result


# -- all of it -------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    """The measuring options (``run_benchmarks.py`` adds its own to these)."""
    p.add_argument("--quick", action="store_true",
                   help=f"fewer rounds; N capped at {QUICK_MAX_N}; loss only in the fidelity check")
    p.add_argument("--backend", default=None, help="cpu, gpu, ... (default: JAX's default)")
    p.add_argument("--out", default=str(HERE / "results.json"), help="JSON output")
    p.add_argument("--note", default="", help="a line for the doc, e.g. whether the machine was quiet")
    p.add_argument("--only", default=",".join(SECTIONS),
                   help="which benchmarks (comma-separated from a,b,c,d)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7 quick, 9 full)")
    p.add_argument("--sizes", default=None,
                   help="state counts for c, comma-separated (default 10,100,300 quick, 10,100,1000,3000 full)")


def sections(only: str) -> set[str]:
    """The sections named in ``--only``; an unknown one is a ``ValueError``."""
    chosen = {x.strip() for x in only.split(",") if x.strip()}
    unknown = sorted(chosen - set(SECTIONS))
    if unknown or not chosen:
        raise ValueError(f"--only takes a comma-separated list from {','.join(SECTIONS)}, "
                         f"got {only!r}")
    return chosen


def parse_sizes(text: str | None) -> tuple[int, ...] | None:
    """``--sizes`` as a tuple of positive integers (``None`` when not given); else ``ValueError``."""
    if text is None:
        return None
    try:
        sizes = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--sizes takes comma-separated positive integers, got {text!r}")
    return sizes


def measure_all(*, quick: bool, backend: str | None, only: set[str], rounds: int | None,
                note: str, command: str, sizes: tuple[int, ...] | None = None,
                out: Path | None = None) -> dict[str, Any]:
    """Run the chosen sections and return every raw figure (what the JSON file holds). With
    ``out``, what is measured so far is written there after each section (``"partial": true``),
    so a run stopped at a time limit keeps the sections it finished."""
    dev = device(backend)
    rounds = rounds or (7 if quick else 9)
    if sizes is None:
        sizes = (tuple(n for n in REP_SIZES_FULL if n <= QUICK_MAX_N) + (QUICK_MAX_N,) if quick
                 else REP_SIZES_FULL)
    sizes = tuple(sorted(set(sizes)))
    results: dict[str, Any] = {
        "machine": machine_info(backend),
        "config": {"quick": quick, "backend": backend, "rounds": rounds, "sizes": list(sizes),
                   "note": note, "command": command, "only": sorted(only),
                   "quick_max_n": QUICK_MAX_N, "full_sizes": list(REP_SIZES_FULL)},
    }
    log(f"benchmarks on {dev.platform} ({dev.device_kind}), rounds={rounds}, sizes={sizes}")
    start = time.perf_counter()

    def checkpoint() -> None:
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({**results, "partial": True}, indent=1, default=str) + "\n",
                           encoding="utf-8")

    if "a" in only:
        targets = ("loss",) if quick else ("loss", "grad")
        results["fidelity"] = bench_fidelity(rounds, targets, backend)
        checkpoint()
    if "b" in only:
        results["worker"] = bench_worker(max(rounds * 4, 20), backend)
        checkpoint()
    if "c" in only:
        dict_rounds = 2 if quick else 3
        results["representations"] = bench_representations(sizes, rounds, dict_rounds, backend)
        checkpoint()
    if "d" in only:
        results["dashboard"] = bench_dashboard_section(quick)
    results["elapsed_s"] = time.perf_counter() - start
    results["machine"]["loadavg_end"] = loadavg()
    results["gpu_note"] = (
        f"This run is on {dev.device_kind}." if dev.platform == "gpu" else
        "No GPU run yet: this machine has none. On a GPU machine run "
        "`python benchmarks/run_benchmarks.py --backend gpu --out benchmarks/results-gpu.json "
        "--doc docs/benchmarks-gpu.md`; the results are labelled with the GPU's device kind.")
    return results


def run(args: argparse.Namespace, script: str, argv: list[str] | None) -> dict[str, Any] | None:
    """Measure what ``args`` ask for and write the JSON file; ``None`` (after a one-line
    message on stderr) when the request cannot be measured here."""
    name = Path(script).stem
    try:
        only = sections(args.only)
        sizes = parse_sizes(getattr(args, "sizes", None))
        device(args.backend)
    except ValueError as err:
        print(f"{name}: {err}", file=sys.stderr)
        return None
    except RuntimeError as err:
        print(f"{name}: backend {args.backend!r} is not available here ({err})", file=sys.stderr)
        return None
    command = f"python benchmarks/{Path(script).name} " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    out = Path(args.out)
    results = measure_all(quick=args.quick, backend=args.backend, only=only, rounds=args.rounds,
                          note=args.note, command=command.strip(), sizes=sizes, out=out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    log(f"wrote {out}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    return 0 if run(args, __file__, argv) is not None else 2


if __name__ == "__main__":
    raise SystemExit(main())
