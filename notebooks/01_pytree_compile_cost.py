# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · What a dict-shaped state costs the compiler
#
# In 2020 a JAX user ([jax-ml/jax#4667, *Slow compilation for functions acting on PyTrees*](https://github.com/jax-ml/jax/issues/4667)) wanted to write
# `state["position"]` instead of `state[idx]` and held the state of a discrete dynamical system
# as a `dict` of 100 arrays. Compiling the loss and its gradient took long and produced
# pre-optimisation HLO files **up to 26 MB**; the same model on one stacked array gave
# **50 KB**, and a third program that turned the array into a dict and back *inside* every step
# gave **1.1 MB**.
#
# A JAX maintainer answered that the cost comes from the number of arrays, not from pytrees
# as such: *"In the best case, you might achieve linear scaling – but I suspect in reality
# you'll see closer to quadratic scaling with the number of array inputs."*
#
# This notebook reruns the three programs on today's JAX with `explorer.measure` (a cold,
# stage-by-stage measurement), sweeps the state count N with `explorer.sweep`, fits
# `time ≈ c·N^k` with `explorer.scaling_exponents`, and tests that claim with the fitted `k`.
# Every number in the prose below is computed in this notebook, on the machine that runs it.

# %%
# One switch for the full-size run. False: small sizes, well under a minute on a laptop CPU.
# True: the sweep goes up to N = 1000 (the regime of the original report; minutes, not seconds).
FULL_SIZE = False

PROPAGATION_HORIZON_LENGTH = 200   # as in jax#4667
STATE_DIMENSION = 100              # as in jax#4667: the three programs are measured at this N
SWEEP_N = [10, 30, 100, 300, 1000] if FULL_SIZE else [10, 20, 50, 100]
SWEEP_REPEATS = 3 if FULL_SIZE else 1   # cold compiles per point (the median is kept)
REUSE_STORED = False   # True: reuse measurements already in your results store (fast re-runs)

# %%
import operator
import time

import holoviews as hv
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import panel as pn
from IPython.display import Markdown, display
from jax import lax

import explorer
import explorer.plots as plots

# JS and CSS inside the notebook (HoloViews draws through Panel): exports work offline
hv.extension("bokeh", inline=True)
pn.extension(inline=True)
pd.set_option("display.precision", 4)
NOTEBOOK_START = time.perf_counter()
print(f"jax {jax.__version__}, backend {jax.default_backend()}, "
      f"device {jax.devices()[0].device_kind}; results store: {explorer.default_path()}")


# %% [markdown]
# ## 1 · The three programs of the report, on today's JAX
#
# Written out as in the report, with today's names: `jax.tree.map` (which takes several trees,
# so `tree_multimap` is gone), `jax.tree.reduce(operator.add, ...)` for `tree_reduce(sum, ...)`,
# `jax.numpy as jnp`, and no `from jax import partial`. There is no `@jit` on the functions:
# `explorer.measure` wraps them in a fresh `jax.jit(..., static_argnums=0)` itself, after
# clearing JAX's caches, so that it can time tracing, lowering and XLA's compile separately and
# check that XLA really compiled (`cold=True`).
#
# One slip of the report is fixed: programs 2 and 3 summed `predictions - states` without
# squaring. Here all three square the error, so they compute the same loss; the cell after the
# programs checks that they do.

# %%
# The report's first program: the state is a dict of STATE_DIMENSION arrays.
def sum_of_squares_loss(dynamics, states, parameters):
    initial_states = jax.tree.map(lambda s: s[0], states)
    horizon_length = jax.tree.leaves(states)[0].shape[0]
    predictions = propagate_dynamics(dynamics, initial_states, horizon_length, parameters)
    errors = jax.tree.map(lambda s, p: jnp.sum((s - p) ** 2, keepdims=True), states, predictions)
    return jax.tree.reduce(operator.add, errors)[0]


def propagate_dynamics(dynamics, initial_states, horizon_length, parameters):
    return lax.scan(
        f=lambda state, _: (dynamics(state, parameters), state),
        init=initial_states, xs=None, length=horizon_length,
    )[1]


def example_dynamics(states, parameters):
    return jax.tree.map(lambda s, p: 0.999 * s + 1e-3 * p, states, parameters)


STATE_NAMES = ["state_" + str(i) for i in range(STATE_DIMENSION)]
states = {name: jnp.ones(PROPAGATION_HORIZON_LENGTH) for name in STATE_NAMES}
parameters = {name: 1.0 for name in STATE_NAMES}


# %%
# The report's second program: one stacked array, indexed by position.
def sum_of_squares_loss_array(dynamics, states, parameters):
    initial_states = states[0]
    horizon_length = states.shape[0]
    predictions = propagate_dynamics(dynamics, initial_states, horizon_length, parameters)
    return jnp.sum((predictions - states) ** 2)


def example_dynamics_array(states, parameters):
    return 0.999 * states + 1e-3 * parameters


states_array = jnp.ones((PROPAGATION_HORIZON_LENGTH, STATE_DIMENSION))
parameters_array = jnp.ones((STATE_DIMENSION,))


# The report's third program: arrays outside, a dict of scalars inside every step.
def example_dynamics_unflatten(states, parameters):
    states_dict = {n: s for n, s in zip(STATE_NAMES, states)}
    parameters_dict = {n: p for n, p in zip(STATE_NAMES, parameters)}
    new_states_dict = {n: 0.999 * states_dict[n] + 1e-3 * parameters_dict[n]
                       for n in STATE_NAMES}
    return jnp.array(list(new_states_dict.values()))


# %%
# Same computation, three shapes: check it on random data before comparing costs.
rng = np.random.default_rng(0)
check_states = rng.normal(size=(PROPAGATION_HORIZON_LENGTH, STATE_DIMENSION)).astype(np.float32)
check_params = rng.normal(size=STATE_DIMENSION).astype(np.float32)
as_dict = lambda a: {n: jnp.asarray(a[..., i]) for i, n in enumerate(STATE_NAMES)}

PROGRAMS = {   # name -> (loss, dynamics, example args, args for the value check)
    "dict": (sum_of_squares_loss, example_dynamics, (states, parameters),
             (as_dict(check_states), as_dict(check_params))),
    "array": (sum_of_squares_loss_array, example_dynamics_array, (states_array, parameters_array),
              (check_states, check_params)),
    "unflatten": (sum_of_squares_loss_array, example_dynamics_unflatten,
                  (states_array, parameters_array), (check_states, check_params)),
}
values, grads = {}, {}
for program, (loss, dynamics, _, check_args) in PROGRAMS.items():
    value, grad = jax.jit(jax.value_and_grad(loss, argnums=2), static_argnums=0)(dynamics, *check_args)
    values[program] = float(value)
    grads[program] = (np.array([grad[n] for n in STATE_NAMES]) if isinstance(grad, dict)
                      else np.asarray(grad))
print({k: round(v, 3) for k, v in values.items()})
assert np.allclose(values["dict"], values["array"], rtol=1e-4)
assert np.allclose(values["unflatten"], values["array"], rtol=1e-4)
assert np.allclose(grads["dict"], grads["array"], rtol=1e-3, atol=1e-3)
assert np.allclose(grads["unflatten"], grads["array"], rtol=1e-3, atol=1e-3)


# %% [markdown]
# Now the cost. Each program is compiled cold twice, like in the report: the loss, and its
# gradient with respect to the parameters. For each we record the stage times, the jaxpr
# equation count (sub-jaxprs included: the scan body is where the work is), the number of array
# leaves, and the size of the program text before optimisation: the StableHLO that JAX hands to
# XLA today, and the same module printed in XLA's HLO text format, which is the format of the
# 2020 dumps.

# %%
def hlo_text_bytes(fn, *args):
    """Pre-optimisation program in XLA's HLO text format (the format of the 2020 dumps)."""
    return len(jax.jit(fn, static_argnums=0).lower(*args).as_text(dialect="hlo"))


report_rows = []
for target in ("loss", "grad"):
    for program, (loss, dynamics, args, _) in PROGRAMS.items():   # interleaved: A B C A B C
        fn = loss if target == "loss" else jax.grad(loss, argnums=2)
        m = explorer.measure(fn, dynamics, *args, static_argnums=0, name=f"{program}/{target}")
        report_rows.append({
            "program": program, "target": target, "cold": m.cold, "array leaves": m.n_leaves,
            "jaxpr eqns": m.jaxpr_eqns, "StableHLO KB": m.hlo_pre_bytes / 1e3,
            "HLO text KB": hlo_text_bytes(fn, dynamics, *args) / 1e3,
            "trace s": m.trace_s, "lower s": m.lower_s, "XLA compile s": m.compile_s,
            "total compile s": m.total_compile_s, "run ms": m.run_s * 1e3,
        })
report = pd.DataFrame(report_rows)
assert report["cold"].all(), "every compile above must be a real XLA compile, not a cache hit"
report

# %%
by = report.set_index(["program", "target"])
REPORT_KB = {"dict": 26_000, "array": 50, "unflatten": 1_100}   # the 2020 report's largest files
largest = {p: by.loc[p, ["StableHLO KB", "HLO text KB"]].to_numpy().max() for p in REPORT_KB}
compile_s = {p: by.loc[p, "total compile s"].to_numpy() for p in REPORT_KB}   # [loss, grad]

# Robust facts (program sizes are deterministic for a JAX version; compile times are not):
assert by.loc[("dict", "loss"), "array leaves"] == 2 * STATE_DIMENSION
assert by.loc[("array", "loss"), "array leaves"] == 2
assert largest["dict"] < REPORT_KB["dict"] / 10, "today's dict program is >10x smaller than 2020's"
assert largest["dict"] > 10 * largest["array"], "...but still >10x the array program"
# (Compile times are reported, not asserted: a busy machine can move them; see benchmarks/.)

ratio = compile_s["unflatten"] / compile_s["dict"]
order = "slower" if (ratio > 1).all() else "faster" if (ratio < 1).all() else "about as fast"
ranking = ("still holds: dict > unflatten > array" if largest["dict"] > largest["unflatten"] > largest["array"]
           else "has changed: " + " > ".join(sorted(largest, key=largest.get, reverse=True)))
display(Markdown(f"""
**What changed since 2020** (N = {STATE_DIMENSION}, horizon {PROPAGATION_HORIZON_LENGTH},
JAX {jax.__version__}, {jax.default_backend()}):

| program | largest pre-optimisation text today (loss or gradient, StableHLO or HLO text) | in the 2020 report | today / 2020 |
|---|---|---|---|
| dict | {largest['dict']:,.0f} KB | 26 MB | 1/{REPORT_KB['dict'] / largest['dict']:,.0f} |
| array | {largest['array']:,.1f} KB | 50 KB | 1/{REPORT_KB['array'] / largest['array']:,.0f} |
| unflatten inside | {largest['unflatten']:,.0f} KB | 1.1 MB | 1/{REPORT_KB['unflatten'] / largest['unflatten']:,.0f} |

The dict program is {REPORT_KB['dict'] / largest['dict']:,.0f} times smaller than the 26 MB
of 2020, but still {largest['dict'] / largest['array']:,.0f} times the array program, and it
takes {compile_s['dict'][0] / compile_s['array'][0]:.1f}× (loss) and
{compile_s['dict'][1] / compile_s['array'][1]:.1f}× (gradient) the array program's compile
time. The size ranking of 2020 {ranking}. But compile time does not follow size: the
"unflatten inside" program, which the report found the cheaper of the two named versions,
compiles **{order}** than the dict one here ({ratio[0]:.1f}× the dict's time for the loss,
{ratio[1]:.1f}× for the gradient), with a program text {largest['dict'] / largest['unflatten']:.1f}×
smaller than the dict's.
"""))

# %% [markdown]
# What is in the two named programs? Counting the jaxpr's primitives (sub-jaxprs included) shows
# two different kinds of work: the dict program does its arithmetic on many separate scalars
# carried through the scan, the unflatten program slices one array into scalars and stacks them
# back in every step. Which kind costs XLA more is not something program size tells you: here
# the smaller program is the slower one to compile.

# %%
from collections import Counter

import jax.extend.core as jex


def primitive_counts(jaxpr):
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    counts = Counter(eqn.primitive.name for eqn in jaxpr.eqns)
    for sub in jex.subjaxprs(jaxpr):
        counts += primitive_counts(sub)
    return counts


prims = {program: primitive_counts(jax.make_jaxpr(loss, static_argnums=0)(dynamics, *args))
         for program, (loss, dynamics, args, _) in PROGRAMS.items()}
prims = pd.DataFrame(prims).fillna(0).astype(int)
prims = prims.loc[prims.max(axis=1).sort_values(ascending=False).index]
assert prims.loc["slice", "unflatten"] >= STATE_DIMENSION      # one slice per name, per step
assert prims.loc["mul", "dict"] >= 2 * STATE_DIMENSION         # two scalar multiplies per name
prims.head(10)


# %% [markdown]
# ### The dict program as written, compiled like the array one: `explorer.jit`
#
# The discussion's question was how to keep `states["state_3"]` without paying for it.
# `explorer.jit` is a drop-in for `jax.jit`: it takes `sum_of_squares_loss` exactly as printed
# above (the scan inside, `jax.grad` around it, `static_argnums=0` for the dynamics), packs the
# per-name equations of the whole program into one vector operation each, and stacks the dicts'
# leaves with NumPy on every call. The gradient comes back as a dict.

# %%
grad_jit = explorer.jit(jax.grad(sum_of_squares_loss, argnums=2), static_argnums=0)
grad_named = grad_jit(example_dynamics, *PROGRAMS["dict"][3])
assert set(grad_named) == set(STATE_NAMES)
assert np.allclose([grad_named[n] for n in STATE_NAMES], grads["dict"], rtol=1e-3, atol=1e-3)

# Its packed program for the arguments measured above (python-float parameters), measured cold
# like the three programs (on the arrays explorer.jit stacks).
program, stacked = grad_jit.packed_function(example_dynamics, states, parameters)
jit_report = grad_jit.report_for(example_dynamics, states, parameters)
print(jit_report)
m_jit = explorer.measure(program, *stacked, name="explorer.jit/grad")
assert m_jit.cold
display(Markdown(f"""
The gradient of the dict program, N = {STATE_DIMENSION}: {jit_report.eqns_before:,}
equations traced, {jit_report.eqns_after} after packing (the array program's:
{by.loc[("array", "grad"), "jaxpr eqns"]}); {m_jit.n_leaves} array leaves; StableHLO
{m_jit.hlo_pre_bytes / 1e3:.1f} KB (array {by.loc[("array", "grad"), "StableHLO KB"]:.1f} KB,
dict {by.loc[("dict", "grad"), "StableHLO KB"]:.1f} KB); compiled in
{m_jit.total_compile_s:.2f} s (array {by.loc[("array", "grad"), "total compile s"]:.2f} s, dict
{by.loc[("dict", "grad"), "total compile s"]:.2f} s). The same numbers as `jax.jit`'s, checked
above.
"""))

# %% [markdown]
# ## 2 · How the cost grows with N
#
# `explorer.sweep` measures the same three computations, as the explorer builds them (problem
# `decay` is the report's dynamics `s' = 0.999 s + 0.001 p`; representations `dict`, `array` and
# `unflatten` are its three programs) for several state counts, targets `loss` and `grad`. They
# are the explorer's own code, not the report's copied line for line, so their counts differ
# from section 1's (at N = 100 the report's dict loss above has about two more equations per
# name than the explorer's); what this section compares is how each grows with N. Each
# measurement runs cold in a worker process, the representations are interleaved at every size
# so that machine noise hits them alike, and each row is written to the results store the
# moment it is measured (the dashboard in notebook 03 reads the same store).

# %%
def show_progress(event):
    if event.row is not None:
        print(f"\r{event.done}/{event.total} {event.spec.label:<45}", end="", flush=True)

started = time.perf_counter()
results = explorer.sweep("decay", ["dict", "array", "unflatten"], n_states=SWEEP_N,
                         horizons=[PROPAGATION_HORIZON_LENGTH], targets=["loss", "grad"],
                         repeats=SWEEP_REPEATS, resume=REUSE_STORED, progress=show_progress)
print(f"\n{len(results)} measurements in {time.perf_counter() - started:.0f} s")
assert (results["status"] == "ok").all(), results[results["status"] != "ok"][["representation", "n_states", "error"]]
results["total_compile_s"] = results[["trace_s", "lower_s", "compile_s"]].sum(axis=1)
results.pivot_table(index="n_states", columns=["target", "representation"],
                    values="total_compile_s").round(3)

# %%
hv.Layout([
    plots.compile_time_plot(results, problem="decay", target="loss"),
    plots.compile_time_plot(results, problem="decay", target="grad"),
    plots.program_size_plot(results, problem="decay", target="loss"),
    plots.program_size_plot(results, problem="decay", target="grad"),
]).cols(2)

# %% [markdown]
# ### Testing "linear at best, closer to quadratic"
#
# `explorer.scaling_exponents` fits `metric ≈ c·N^k` by least squares in log-log space, per
# representation and target. Two more numbers make the fit fair at small N:
#
# * every compile pays a fixed cost that has nothing to do with N: the array program's compile
#   time, which does not grow with N, measures it. Subtracting it from the dict program's time
#   leaves the part that grows with N (the *excess*), whose exponent is what the claim is about;
# * the *local slope* between the two largest N says where the curve is heading.

# %%
fits = explorer.scaling_exponents(results, metrics=["total_compile_s", "jaxpr_eqns", "hlo_pre_bytes"])

base = results[results["representation"] == "array"].set_index(["target", "n_states"])["total_compile_s"]
excess = results[results["representation"] != "array"].copy()
excess["excess_compile_s"] = excess["total_compile_s"].to_numpy() - base.loc[
    list(zip(excess["target"], excess["n_states"]))].to_numpy()
fits = pd.concat([fits, explorer.scaling_exponents(excess, metrics=["excess_compile_s"])],
                 ignore_index=True)


def local_slope(rep, target, metric="total_compile_s"):
    part = results[(results["representation"] == rep) & (results["target"] == target)]
    part = part.sort_values("n_states").tail(2)
    (n1, n2), (t1, t2) = part["n_states"].astype(float), part[metric].astype(float)
    return float(np.log(t2 / t1) / np.log(n2 / n1))


def k(rep, target, metric):
    row = fits[(fits["representation"] == rep) & (fits["target"] == target) & (fits["metric"] == metric)]
    return float(row["k"].iloc[0]) if len(row) else float("nan")


K = pd.DataFrame([{"representation": rep, "target": target,
                   "k eqns": k(rep, target, "jaxpr_eqns"), "k StableHLO": k(rep, target, "hlo_pre_bytes"),
                   "k compile": k(rep, target, "total_compile_s"),
                   "k excess over array": k(rep, target, "excess_compile_s"),
                   "local k (two largest N)": local_slope(rep, target)}
                  for rep in ("dict", "unflatten", "array") for target in ("loss", "grad")])

# Robust facts: program size is exactly linear in N for the dict program and constant for
# the array one. Compile times are shown and fitted, not asserted: a busy machine can move
# them (timing goals live in benchmarks/).
eqns = results.groupby(["representation", "target"])["jaxpr_eqns"].nunique()
assert (eqns.loc["array"] == 1).all(), "the array program has the same equations at every N"
for target in ("loss", "grad"):
    assert 0.9 < k("dict", target, "jaxpr_eqns") < 1.1
    assert 0.85 < k("dict", target, "hlo_pre_bytes") < 1.15
K.round(2)


# %%
def shape_of(k):
    if not np.isfinite(k):
        return "not measurable here"
    if k < 0.85:
        return "sub-linear"
    if k < 1.2:
        return "about linear"
    if k < 1.7:
        return "between linear and quadratic"
    return "close to quadratic"


row = K.set_index(["representation", "target"])
n_max, n_min = max(SWEEP_N), min(SWEEP_N)
fixed = base.groupby("target").median()
ex = [row.loc[("dict", t), "k excess over array"] for t in ("loss", "grad")]
tail = [row.loc[("dict", t), "local k (two largest N)"] for t in ("loss", "grad")]
ex_max, tail_max = max(ex), max(tail)
if ex_max >= 1.5:
    verdict = (f"**supports \"closer to quadratic\"**: the compile time the dict program adds grows "
               f"with k up to {ex_max:.2f} over the whole range (1.5 is halfway between linear and quadratic)")
elif tail_max >= 1.5 and ex_max >= 0.85:
    verdict = (f"**supports both halves of it**: over the whole range the added compile time grows about "
               f"linearly (k up to {ex_max:.2f}: \"linear at best\"), and between the two largest N the "
               f"slope reaches {tail_max:.2f}, closer to quadratic than to linear")
elif max(ex_max, tail_max) >= 0.85:
    verdict = (f"**supports \"linear at best\"**: the added compile time grows at least linearly "
               f"(k up to {max(ex_max, tail_max):.2f}), but over this range not closer to quadratic")
else:
    verdict = (f"**does not show even linear growth yet**: over this range the compile time grows "
               f"slower than the program (k up to {max(ex_max, tail_max):.2f})")
caveat = ("" if n_max >= 300 else
          f" These are small sizes (N ≤ {n_max}); the claim is about hundreds of arrays. "
          "Set `FULL_SIZE = True` in the first cell to rerun with N up to 1000.")
display(Markdown(f"""
**Measured** (decay, horizon {PROPAGATION_HORIZON_LENGTH}, N = {n_min}…{n_max}, this machine):

* The dict program itself grows linearly: k = {row.loc[('dict', 'loss'), 'k eqns']:.2f} for jaxpr
  equations and k = {row.loc[('dict', 'loss'), 'k StableHLO']:.2f} for StableHLO bytes (loss;
  {row.loc[('dict', 'grad'), 'k eqns']:.2f} and {row.loc[('dict', 'grad'), 'k StableHLO']:.2f} for the
  gradient). The array program has the same equations at every N; only its shapes change.
* Its total compile time grows with k = {row.loc[('dict', 'loss'), 'k compile']:.2f} for the loss
  ({shape_of(row.loc[('dict', 'loss'), 'k compile'])}) and k = {row.loc[('dict', 'grad'), 'k compile']:.2f}
  for the gradient ({shape_of(row.loc[('dict', 'grad'), 'k compile'])}) over this range, a fit
  flattened by the fixed cost of any compile (the array program takes {fixed['loss']:.2f} s /
  {fixed['grad']:.2f} s, median over N).
* What the dict program adds on top of that grows with k = {ex[0]:.2f} for the loss
  ({shape_of(ex[0])}) and k = {ex[1]:.2f} for the gradient ({shape_of(ex[1])}). Between the two
  largest N the local slope is {tail[0]:.2f} (loss) and {tail[1]:.2f} (gradient).
* The unflatten-inside program: k = {row.loc[('unflatten', 'loss'), 'k compile']:.2f} (loss) and
  {row.loc[('unflatten', 'grad'), 'k compile']:.2f} (gradient) for total compile time.

Verdict on "linear at best, closer to quadratic": this run {verdict}.{caveat}
"""))

# %% [markdown]
# ## 3 · The results table
#
# Every measurement above, as stored (the full row has about 50 columns: stage times and their
# spread, program sizes, XLA's cost and memory analysis, device and versions). The same rows are
# in the results store, for the dashboard (`explorer.dashboard()`, notebook 03) and the
# `pytree-explorer` command line.

# %%
columns = ["representation", "target", "n_states", "n_leaves", "jaxpr_eqns", "hlo_pre_bytes",
           "hlo_post_bytes", "trace_s", "lower_s", "compile_s", "total_compile_s", "run_s", "cold"]
table = results.sort_values(["target", "representation", "n_states"])[columns].reset_index(drop=True)
print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s")
table
