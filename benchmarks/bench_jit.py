"""Goals of explorer.jit, on the CPU: the user's own per-name loss against the array program.

Cases (horizon 200 by default):

- ``4667``: jax-ml/jax#4667's loss as the discussion printed it (``tree_map`` over a dict of
  N scalars, ``lax.scan`` inside, ``tree_reduce(sum, ...)``; ``tree_multimap`` is ``tree_map``
  today), through ``explorer.jit``, against ``jax.jit`` of the discussion's array program;
  loss and ``jax.grad`` with respect to the parameters.
- ``decay`` (the same dynamics, the same sum of squared errors in both programs, so the
  yardstick computes what the dict program computes), ``oscillator`` and ``lotka_volterra``:
  the ``dict`` representation's loss (a per-name step in a ``lax.scan``) through
  ``explorer.jit``, against ``jax.jit`` of the ``array`` representation. (The discussion's
  array program sums ``predictions - states``, not their squares: a smaller program.)
- ``mixed``: a state that mixes shapes, a body's angle (a scalar) and position (a 3-vector)
  per name, with a gain (a scalar) and a velocity (a 3-vector) per name as parameters; the
  per-name loss (a ``lax.scan`` inside, the sum of squared errors over every leaf) through
  ``explorer.jit``, against ``jax.jit`` of the same loss written as a user would with arrays:
  angles ``(T, N)`` and positions ``(T, N, 3)``, gains ``(N,)`` and velocities ``(N, 3)``.

Each round clears JAX's caches and measures the two interleaved (A B A B ...): explorer.jit's
trace of ``fun`` (what ``jax.jit`` pays too), its packing (beyond that trace), lowering and XLA
compile of the packed program, its StableHLO bytes and its run on stacked arrays (median of
several calls) and a whole call (stack, run, unstack), beside a whole call of ``jax.jit(fun)``
on the same per-name leaves (what the user calls without the explorer); the same stages for the
array program;
and one cold ``jax.make_jaxpr`` of ``fun`` (the yardstick of the packing time). Then the packed
program's equation count at several N. Writes ``benchmarks/bench_jit.json`` (``--out``),
replacing the rows of the cases and targets measured and keeping the others, each row with the
machine it was measured on.

    python benchmarks/bench_jit.py [--n 1000] [--horizon 200] [--rounds 3]
        [--cases 4667,decay,oscillator,lotka_volterra,mixed] [--targets loss,grad]
        [--sizes 10,100,1000,3000] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
for _path in (str(HERE.parent), str(HERE)):  # run from a checkout without installing
    if _path not in sys.path:
        sys.path.insert(0, _path)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import explorer  # noqa: E402
from measure import machine_info  # noqa: E402


# -- jax-ml/jax#4667, as printed (program 1: pytrees; program 2: arrays) ------------------------

def _programs_4667():
    """Fresh function objects each time (JAX caches traces by function)."""

    @functools.partial(jax.jit, static_argnums=(0,))
    def sum_of_squares_loss(dynamics, states, parameters):
        initial_states = jax.tree_util.tree_map(lambda s: s[0], states)
        horizon_length = jax.tree_util.tree_flatten(states)[0][0].shape[0]
        predictions = propagate_dynamics(dynamics, initial_states, horizon_length, parameters)
        errors = jax.tree_util.tree_map(lambda s, p: jnp.sum((s - p) ** 2, keepdims=True),
                                        states, predictions)
        return jax.tree_util.tree_reduce(sum, errors)[0]

    def propagate_dynamics(dynamics, initial_states, horizon_length, parameters):
        return lax.scan(f=lambda state, _: (dynamics(state, parameters), state),
                        init=initial_states, xs=None, length=horizon_length)[1]

    def example_dynamics(states, parameters):
        return jax.tree_util.tree_map(lambda s, p: 0.999 * s + 1e-3 * p, states, parameters)

    @functools.partial(jax.jit, static_argnums=(0,))
    def array_loss(dynamics, states, parameters):
        initial_states = states[0]
        horizon_length = states.shape[0]
        predictions = propagate_dynamics(dynamics, initial_states, horizon_length, parameters)
        return jnp.sum(predictions - states)

    def array_dynamics(states, parameters):
        return 0.999 * states + 1e-3 * parameters

    return sum_of_squares_loss, example_dynamics, array_loss, array_dynamics


def _case_4667(n, horizon, target):
    """``(fun, args, static_argnums)`` for explorer.jit and for the array yardstick."""
    loss, dyn, array_loss, array_dyn = _programs_4667()
    names = ["state_" + str(i) for i in range(n)]
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(horizon, n)).astype(np.float32)
    states = {k: jnp.asarray(obs[:, i]) for i, k in enumerate(names)}
    params = {k: 1.0 for k in names}
    if target == "grad":
        loss = jax.jit(jax.grad(loss, argnums=2), static_argnums=(0,))
        array_loss = jax.jit(jax.grad(array_loss, argnums=2), static_argnums=(0,))
    return ((loss, (dyn, states, params), 0),
            (array_loss, (array_dyn, jnp.asarray(obs), jnp.ones(n, jnp.float32)), 0))


# -- mixed shapes: per name, a body's angle (a scalar) and position (a 3-vector) ------------

_DT = 0.05


def _programs_mixed():
    """The per-name loss and its array yardstick (fresh function objects each time)."""

    def mixed_loss(obs, params):
        def step(state, _):
            new = {k: {"angle": s["angle"] - _DT * params[k]["gain"] * jnp.sin(s["angle"]),
                       "position": s["position"]
                       + _DT * jnp.cos(s["angle"]) * params[k]["velocity"]}
                   for k, s in state.items()}
            return new, state
        horizon = jax.tree_util.tree_leaves(obs)[0].shape[0]
        init = jax.tree_util.tree_map(lambda o: o[0], obs)
        predictions = lax.scan(step, init, None, length=horizon)[1]
        errors = jax.tree_util.tree_map(lambda o, y: jnp.sum((o - y) ** 2), obs, predictions)
        return jax.tree_util.tree_reduce(operator.add, errors)

    def array_loss(angles, positions, gains, velocities):
        def step(state, _):
            angle, position = state
            return (angle - _DT * gains * jnp.sin(angle),
                    position + _DT * jnp.cos(angle)[:, None] * velocities), state
        pred_angles, pred_positions = lax.scan(step, (angles[0], positions[0]), None,
                                               length=angles.shape[0])[1]
        return (jnp.sum((angles - pred_angles) ** 2)
                + jnp.sum((positions - pred_positions) ** 2))

    return mixed_loss, array_loss


def _mixed_data(n, horizon, seed=0):
    """``(obs, params)`` as dicts of per-name dicts, and the same numbers as four arrays."""
    rng = np.random.default_rng(seed)
    angles = rng.normal(scale=0.5, size=(horizon, n)).astype(np.float32)
    positions = rng.normal(size=(horizon, n, 3)).astype(np.float32)
    gains = rng.uniform(0.5, 1.5, size=n).astype(np.float32)
    velocities = rng.normal(size=(n, 3)).astype(np.float32)
    names = ["body_" + str(i) for i in range(n)]
    obs = {k: {"angle": jnp.asarray(angles[:, i]), "position": jnp.asarray(positions[:, i])}
           for i, k in enumerate(names)}
    params = {k: {"gain": jnp.asarray(gains[i]), "velocity": jnp.asarray(velocities[i])}
              for i, k in enumerate(names)}
    arrays = tuple(map(jnp.asarray, (angles, positions, gains, velocities)))
    return obs, params, arrays


def _case_mixed(n, horizon, target):
    loss, array_loss = _programs_mixed()
    obs, params, arrays = _mixed_data(n, horizon)
    if target == "grad":
        loss = jax.grad(loss, argnums=1)
        array_loss = jax.grad(array_loss, argnums=(2, 3))
    return (loss, (obs, params), ()), (array_loss, arrays, ())


def _case_problem(name, n, horizon, target):
    dict_case = explorer.build_case(name, "dict", n, horizon)
    array_case = explorer.build_case(name, "array", n, horizon)
    return ((dict_case.function(target), dict_case.args, ()),
            (array_case.function(target), array_case.args, ()))


def _case(name, n, horizon, target):
    if name == "4667":
        return _case_4667(n, horizon, target)
    if name == "mixed":
        return _case_mixed(n, horizon, target)
    return _case_problem(name, n, horizon, target)


# -- one round ----------------------------------------------------------------------------------

def _run_time(call, runs=7) -> float:
    jax.block_until_ready(call())
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _measure_jit(fun, args, static, plain_call=True) -> dict:
    jax.clear_caches()
    j = explorer.jit(fun, static_argnums=static)
    traced = j.trace(*args)
    report = j.report_for(*args)
    t = time.perf_counter()
    lowered = traced.lower()
    lower_s = time.perf_counter() - t
    t = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t
    # On the device once, as the yardstick's arguments are: NumPy arrays would be copied to
    # the device at every call and that copy timed as the packed program's run.
    stacked = jax.device_put(j.pack_args(*args))
    j(*args)
    if plain_call:  # what the user calls today, on the same leaves (seconds of compile: once)
        plain = jax.jit(fun, static_argnums=static)
        plain(*args)
    return {"trace_s": report.trace_s, "pack_s": report.pack_s, "lower_s": lower_s,
            "compile_s": compile_s, "stablehlo_bytes": len(lowered.as_text()),
            "run_s": _run_time(lambda: compiled(*stacked)),
            "call_s": _run_time(lambda: j(*args), runs=3),
            "jax_jit_call_s": _run_time(lambda: plain(*args), runs=3) if plain_call else None,
            "eqns_before": report.eqns_before, "eqns_after": report.eqns_after,
            "report": str(report)}


def _measure_jax(fun, args, static) -> dict:
    jax.clear_caches()
    jitted = jax.jit(fun, static_argnums=static)
    t = time.perf_counter()
    traced = jitted.trace(*args)
    trace_s = time.perf_counter() - t
    t = time.perf_counter()
    lowered = traced.lower()
    lower_s = time.perf_counter() - t
    t = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t
    statics = {static} if isinstance(static, int) else set(static)
    dynamic = jax.device_put([a for i, a in enumerate(args) if i not in statics])
    return {"trace_s": trace_s, "lower_s": lower_s, "compile_s": compile_s,
            "stablehlo_bytes": len(lowered.as_text()),
            "run_s": _run_time(lambda: compiled(*dynamic))}


def _make_jaxpr_s(fun, args, static) -> float:
    jax.clear_caches()
    t = time.perf_counter()
    jax.make_jaxpr(fun, static_argnums=static)(*args)
    return time.perf_counter() - t


def _median(rows, key):
    return statistics.median(r[key] for r in rows if r[key] is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--horizon", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="4667,decay,oscillator,lotka_volterra,mixed")
    ap.add_argument("--targets", default="loss,grad")
    ap.add_argument("--sizes", default="10,100,1000,3000")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "bench_jit.json")
    a = ap.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    rows = []
    for name in a.cases.split(","):
        for target in a.targets.split(","):
            (fun, args, static), (afun, aargs, astatic) = _case(name, a.n, a.horizon, target)
            got, yard, mk = [], [], []
            for r in range(a.rounds):                      # interleaved
                got.append(_measure_jit(fun, args, static, plain_call=r == 0))
                yard.append(_measure_jax(afun, aargs, astatic))
                mk.append(_make_jaxpr_s(fun, args, static))
            med = {k: _median(got, k) for k in ("trace_s", "pack_s", "lower_s", "compile_s",
                                                 "stablehlo_bytes", "run_s", "call_s",
                                                 "jax_jit_call_s")}
            ref = {k: _median(yard, k) for k in ("trace_s", "lower_s", "compile_s",
                                                  "stablehlo_bytes", "run_s")}
            jit_total = med["trace_s"] + med["pack_s"] + med["lower_s"] + med["compile_s"]
            ref_total = ref["trace_s"] + ref["lower_s"] + ref["compile_s"]
            eqns = {}
            for size in (int(s) for s in a.sizes.split(",")):
                (f, args_n, st), _ = _case(name, size, a.horizon, target)
                jax.clear_caches()
                eqns[size] = explorer.jit(f, static_argnums=st).report_for(*args_n).eqns_after
            row = {
                "case": name, "target": target, "n": a.n, "horizon": a.horizon,
                "jit": med, "array": ref,
                "xla_compile_ratio": med["compile_s"] / ref["compile_s"],
                "lower_plus_compile_ratio": (med["lower_s"] + med["compile_s"])
                / (ref["lower_s"] + ref["compile_s"]),
                "total_compile_ratio": jit_total / ref_total,
                "stablehlo_ratio": med["stablehlo_bytes"] / ref["stablehlo_bytes"],
                "run_ratio": med["run_s"] / ref["run_s"],
                "call_over_array_run": med["call_s"] / ref["run_s"],
                "call_over_jax_jit_call": med["call_s"] / med["jax_jit_call_s"],
                "make_jaxpr_s": statistics.median(mk),
                "pack_over_make_jaxpr": med["pack_s"] / statistics.median(mk),
                "eqns_before": got[0]["eqns_before"], "eqns_after_by_n": eqns,
                "report": got[0]["report"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    machine = machine_info()
    for row in rows:
        row["machine"] = machine
    a.out.write_text(json.dumps({"machine": machine, "rows": _merged(a.out, rows)}, indent=1))
    print(f"wrote {a.out}")


def _merged(out: pathlib.Path, rows: list) -> list:
    """``rows`` in place of the same (case, target) rows of ``out``'s earlier runs, which are
    kept with the machine they were measured on: a run of some cases updates only those."""
    if not out.exists():
        return rows
    earlier = json.loads(out.read_text())
    new = {(r["case"], r["target"]) for r in rows}
    kept = [dict(r, machine=r.get("machine", earlier.get("machine"))) for r in earlier["rows"]
            if (r["case"], r["target"]) not in new]
    return kept + rows


if __name__ == "__main__":
    main()
