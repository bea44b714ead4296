"""What ``explorer.diagnose`` costs on a 1000-leaf program, and how big its report is.

One command (from the repository root)::

    python benchmarks/bench_diagnose.py [--rounds 4] [--n 500] [--out FILE.json]

The program is the dict loss of jax-ml/jax#4667 "Slow compilation for functions acting on
PyTrees" (https://github.com/jax-ml/jax/issues/4667): ``decay`` with ``n`` states and ``n``
parameters, one scalar leaf each, so ``--n 500`` gives 1000 leaves.

Goals (each a median over interleaved rounds, so noise on a shared machine hits both sides):

- ``diagnose(..., compile=False, try_pack=False)`` ≤ 2× one bare trace + lower of the program;
- ``diagnose(..., try_pack=False)`` (compiled) ≤ 1.1× one cold ``explorer.measure``
  (``runs=1``, as diagnose uses) of it;
- the rewrite trial (``try_pack=True``, the default: explorer.jit tried, checked, and compared in
  interleaved cold compiles) stays within its stated budget: ≤ 1.1 × ``trial.BUDGET_S``;
- the standalone HTML report ≤ 2 MB; how long it takes to write, to parse, and to load in
  headless Chromium (browser start included, next to the same for a blank page) are recorded
  alongside, as is diagnose's own analysis time on the already traced program.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):  # run from a checkout without installing; measure.py
    if _path not in sys.path:
        sys.path.insert(0, _path)

import jax  # noqa: E402

import explorer  # noqa: E402
# diagnose's analysis on its own (``_analysis_s``) has no public entry point.
from explorer._src.diagnose import findings as _findings  # noqa: E402
from explorer._src.core.blame import blame_frame  # noqa: E402
from explorer._src.diagnose.diagnose import _leaf_paths, read_program  # noqa: E402
from measure import bare_jit, machine_info  # noqa: E402

from explorer._src.diagnose import trial as _trial  # noqa: E402

GOALS = {
    "uncompiled_over_trace_lower": 2.0,
    "compiled_over_measure": 1.1,
    "report_bytes": 2_000_000,
    "trial_s": 1.1 * _trial.BUDGET_S,
}


def _timed(call):
    t0 = time.perf_counter()
    result = call()
    return time.perf_counter() - t0, result


def _bare_trace_lower(fn, args) -> float:
    return bare_jit(fn, args, compile=False)["lower_s"]


def _chromium_load_s(url: str, marker: bytes) -> float | None:
    """Seconds for headless Chromium to start, load ``url`` and print its DOM."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    t0 = time.perf_counter()
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           url], capture_output=True, timeout=60, check=False)
    elapsed = time.perf_counter() - t0
    return elapsed if done.returncode == 0 and marker in done.stdout else None


def _s(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.2f} s"


def _analysis_s(fn, args) -> float:
    """diagnose's own work on an already traced program: the walk, the findings, the table."""
    traced = jax.jit(fn).trace(*args)
    limits = _findings.Limits()
    t0 = time.perf_counter()
    program = read_program(traced.jaxpr, limits)
    _findings.find(program, limits, n_leaves=len(jax.tree_util.tree_leaves(args)),
                   leaf_paths=_leaf_paths(args, ()), total_eqns=explorer.count_eqns(traced.jaxpr),
                   hlo_bytes=0)
    blame_frame(program.counts)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--n", type=int, default=500, help="states (leaves = 2n)")
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "bench_diagnose.json")
    opts = parser.parse_args(argv)

    case = explorer.build_case("decay", "dict", opts.n, opts.horizon)
    fn, args = case.function("loss"), case.args
    # One small diagnose first: imports and XLA's backend set-up are not what we time.
    explorer.diagnose(lambda x: x * 2, jax.numpy.ones(3))

    rows = []
    for r in range(opts.rounds):
        # Alternate which side goes first, so neither always follows the other.
        if r % 2 == 0:
            bare = _bare_trace_lower(fn, args)
            uncompiled, _ = _timed(lambda: explorer.diagnose(fn, *args, compile=False,
                                                             try_pack=False))
            measured, m = _timed(lambda: explorer.measure(fn, *args, runs=1))
            compiled, d1 = _timed(lambda: explorer.diagnose(fn, *args, try_pack=False))
        else:
            uncompiled, _ = _timed(lambda: explorer.diagnose(fn, *args, compile=False,
                                                             try_pack=False))
            bare = _bare_trace_lower(fn, args)
            compiled, d1 = _timed(lambda: explorer.diagnose(fn, *args, try_pack=False))
            measured, m = _timed(lambda: explorer.measure(fn, *args, runs=1))
        rows.append({"round": r, "bare_trace_lower_s": bare, "diagnose_uncompiled_s": uncompiled,
                     "measure_s": measured, "diagnose_compiled_s": compiled,
                     "measure_cold": m.cold, "diagnose_cold": d1.measurement.cold,
                     "uncompiled_over_trace_lower": uncompiled / bare,
                     "compiled_over_measure": compiled / measured})
        print(f"round {r}: trace+lower {bare:.2f} s, diagnose(compile=False) {uncompiled:.2f} s; "
              f"measure {measured:.2f} s, diagnose {compiled:.2f} s", flush=True)

    analysis = statistics.median(_analysis_s(fn, args) for _ in range(3))
    with_trial_s, d2 = _timed(lambda: explorer.diagnose(fn, *args))
    trial = d2.pack_trial
    print(f"with the rewrite trial: diagnose {with_trial_s:.1f} s; trial {trial.status} in "
          f"{trial.elapsed_s:.1f} s ({trial.reason or trial.verdict})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        write_s, _ = _timed(lambda: d1.to_html(path))
        page = path.read_text(encoding="utf-8")
        parse_s, _ = _timed(lambda: html.parser.HTMLParser().feed(page))
        load_s = _chromium_load_s(path.as_uri(), b"pce-diagnosis")
        blank_s = _chromium_load_s("about:blank", b"<body>")
        report_bytes = path.stat().st_size

    figures = {
        name: statistics.median(r[name] for r in rows)
        for name in ("uncompiled_over_trace_lower", "compiled_over_measure")
    }
    figures["report_bytes"] = report_bytes
    figures["trial_s"] = trial.elapsed_s
    goals = {name: {"goal": f"<= {limit}", "value": figures[name], "met": figures[name] <= limit}
             for name, limit in GOALS.items()}
    result = {
        "machine": machine_info(),
        "program": {"problem": "decay", "representation": "dict", "target": "loss",
                    "n_states": opts.n, "horizon": opts.horizon, "n_leaves": d1.n_leaves,
                    "jaxpr_eqns": d1.jaxpr_eqns, "stablehlo_bytes": d1.stablehlo_bytes,
                    "findings": list(d1.kinds)},
        "rounds": rows,
        "analysis_s": analysis,
        "trial": {"rewrite": trial.rewrite, "status": trial.status, "reason": trial.reason,
                  "verdict": trial.verdict, "elapsed_s": trial.elapsed_s,
                  "budget_s": _trial.BUDGET_S, "eqns_before": trial.eqns_before,
                  "eqns_after": trial.eqns_after, "compile_before": trial.compile_before,
                  "compile_after": trial.compile_after, "diagnose_s": with_trial_s},
        "report": {"bytes": report_bytes, "write_s": write_s, "parse_s": parse_s,
                   "chromium_load_s_with_browser_start": load_s,
                   "chromium_blank_page_s": blank_s},
        "goals": goals,
        "goals_met": sum(g["met"] for g in goals.values()), "goals_total": len(goals),
    }
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, goal in goals.items():
        verdict = "met" if goal["met"] else "MISSED"
        print(f"{name}: {goal['value']:.3g} (goal {goal['goal']}) {verdict}")
    print(f"diagnose's own analysis of the traced program: {analysis:.3f} s")
    print(f"report: {report_bytes / 1e3:.0f} KB, written in {write_s:.3f} s, parsed in "
          f"{parse_s:.3f} s; headless Chromium start + load {_s(load_s)} (a blank page: "
          f"{_s(blank_s)}); wrote {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
