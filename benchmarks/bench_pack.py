"""Goals of explorer.pack (issue 9), on the CPU: packed vs array at N=1000, horizon 200.

For decay, oscillator and lotka_volterra, loss and grad, array and packed interleaved
(A B A B ...), medians of cold compiles: the compile-time ratio, StableHLO bytes (and the bytes of
the integer constant vectors in the programs, raw and as text), pack's own time against one
cold ``jax.make_jaxpr`` of the unwrapped per-name step (fresh function, cleared caches), and the
runtime ratio. Writes ``benchmarks/bench_pack.json``.

    python benchmarks/bench_pack.py [--n 1000] [--horizon 200] [--rounds 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
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
    """Medians of one cold ``jax.make_jaxpr`` of the per-name step and of ``explorer.pack``.

    Each call gets a fresh closure and cleared caches: ``make_jaxpr`` caches by function, so a
    repeated call on the same function would measure a cache hit."""
    names, pnames = problem.state_names(n), problem.param_names(n)
    s, p = dict.fromkeys(names, np.float32(0)), dict.fromkeys(pnames, np.float32(0))

    def fresh_step():
        return lambda s, p: problem.step_scalar(s, p, n)

    trace, packs = [], []
    for _ in range(rounds):
        jax.clear_caches()
        t = time.perf_counter()
        jax.make_jaxpr(fresh_step())(s, p)
        trace.append(time.perf_counter() - t)
        jax.clear_caches()
        t = time.perf_counter()
        packed = explorer.pack(fresh_step(), s, p)
        packs.append(time.perf_counter() - t)
    return statistics.median(trace), statistics.median(packs), packed.report


# An integer constant vector in StableHLO text, e.g. the static indices of a gather:
#   %c = stablehlo.constant dense<[0, 2, 1]> : tensor<3xi32>
# (a splat "dense<0> : tensor<3xi32>" is not an index vector).
_INT_CONST = re.compile(r"^.*stablehlo\.constant dense<\[.*\]> : tensor<([\dx]+)x?([iu])(\d+)>.*$",
                        re.M)


def _index_constants(case, target):
    """StableHLO text of ``case``'s ``target`` and its integer constant vectors: raw bytes
    (elements x width) and the characters their lines take in the text; plus op counts."""
    text = jax.jit(case.function(target)).lower(*case.args).as_text()
    raw = chars = 0
    for m in _INT_CONST.finditer(text):
        dims = [int(d) for d in m.group(1).split("x") if d]
        raw += int(np.prod(dims)) * int(m.group(3)) // 8
        chars += len(m.group(0)) + 1
    ops = {op: text.count(f"stablehlo.{op}") for op in ("gather", "scatter", "slice")}
    return len(text), raw, chars, ops


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
        trace_s, pack_s, report = _pack_time(problem, a.n, a.rounds)
        cases = {r: explorer.build_case(name, r, a.n, a.horizon) for r in ("array", "packed")}
        for target in ("loss", "grad"):
            program = {r: _index_constants(case, target) for r, case in cases.items()}
            got = {r: [] for r in cases}
            for _ in range(a.rounds):
                for r, case in cases.items():      # interleaved
                    jax.clear_caches()
                    got[r].append(explorer.measure_case(case, target))
            med = {r: {k: statistics.median(getattr(m, k) for m in ms)
                       for k in ("trace_s", "lower_s", "compile_s", "run_s", "hlo_pre_bytes")}
                   for r, ms in got.items()}
            total = {r: v["trace_s"] + v["lower_s"] + v["compile_s"] for r, v in med.items()}
            hlo = {r: v["hlo_pre_bytes"] for r, v in med.items()}
            beyond = hlo["packed"] - program["packed"][2]
            row = {
                "problem": name, "target": target, "n": a.n, "horizon": a.horizon,
                "compile_s": total, "compile_ratio": total["packed"] / total["array"],
                "stablehlo_bytes": hlo,
                # Integer constant vectors (static indices) in each program: raw bytes and
                # the characters of their lines in the StableHLO text.
                "const_index_bytes": {r: v[1] for r, v in program.items()},
                "const_index_text_bytes": {r: v[2] for r, v in program.items()},
                "stablehlo_ops": {r: v[3] for r, v in program.items()},
                "stablehlo_beyond_index_ratio": beyond / hlo["array"],
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
