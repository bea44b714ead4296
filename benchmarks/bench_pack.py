"""Goals of explorer.pack (issue 9), on the CPU: packed vs array at N=1000, horizon 200.

For decay, oscillator and lotka_volterra, loss and grad, array and packed interleaved
(A B A B ...), medians of cold compiles: the compile-time ratio, StableHLO bytes (and the bytes of
the constant index vectors pack emits), pack's own time against one ``jax.make_jaxpr`` of the
unwrapped per-name step, and the runtime ratio. Writes ``benchmarks/bench_pack.json``.

    python benchmarks/bench_pack.py [--n 1000] [--horizon 200] [--rounds 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
for _path in (str(HERE.parent), str(HERE)):  # run from a checkout without installing; measure.py
    if _path not in sys.path:
        sys.path.insert(0, _path)

import jax  # noqa: E402
import numpy as np  # noqa: E402

import explorer  # noqa: E402
from measure import machine_info  # noqa: E402


def _pack_time(problem, n, rounds):
    names, pnames = problem.state_names(n), problem.param_names(n)
    s, p = dict.fromkeys(names, np.float32(0)), dict.fromkeys(pnames, np.float32(0))

    def step(s, p):
        return problem.step_scalar(s, p, n)

    trace, packs, consts = [], [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        jax.make_jaxpr(step)(s, p)
        trace.append(time.perf_counter() - t)
        t = time.perf_counter()
        packed = explorer.pack(step, s, p)
        packs.append(time.perf_counter() - t)
    x, th = packed.pack_args(s, p)
    for c in jax.make_jaxpr(packed)(x, th).consts:
        consts += int(np.asarray(c).nbytes)
    return statistics.median(trace), statistics.median(packs), consts, packed.report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--horizon", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "bench_pack.json")
    a = ap.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    rows = []
    for name in ("decay", "oscillator", "lotka_volterra"):
        problem = explorer.get_problem(name)
        trace_s, pack_s, const_bytes, report = _pack_time(problem, a.n, a.rounds)
        cases = {r: explorer.build_case(name, r, a.n, a.horizon) for r in ("array", "packed")}
        for target in ("loss", "grad"):
            got = {r: [] for r in cases}
            for _ in range(a.rounds):
                for r, case in cases.items():      # interleaved
                    jax.clear_caches()
                    got[r].append(explorer.measure_case(case, target))
            med = {r: {k: statistics.median(getattr(m, k) for m in ms)
                       for k in ("trace_s", "lower_s", "compile_s", "run_s", "hlo_pre_bytes")}
                   for r, ms in got.items()}
            total = {r: v["trace_s"] + v["lower_s"] + v["compile_s"] for r, v in med.items()}
            row = {
                "problem": name, "target": target, "n": a.n, "horizon": a.horizon,
                "compile_s": total, "compile_ratio": total["packed"] / total["array"],
                "stablehlo_bytes": {r: v["hlo_pre_bytes"] for r, v in med.items()},
                "const_index_bytes": const_bytes,
                "run_s": {r: v["run_s"] for r, v in med.items()},
                "run_ratio": med["packed"]["run_s"] / med["array"]["run_s"],
                "make_jaxpr_s": trace_s, "pack_s": pack_s, "pack_over_trace": pack_s / trace_s,
                "report": str(report),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = a.out
    out.write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
