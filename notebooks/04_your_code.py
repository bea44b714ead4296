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
# # 04 · Your code: diagnose it, define it, sweep it, fix it
#
# Notebooks 01 to 03 measured the explorer's built-in systems. This one starts from *your*
# function: a small simulation written the readable way, one name at a time, whose compile time
# grows with the number of names (the pattern of jax-ml/jax#4667 "Slow compilation for functions
# acting on PyTrees", https://github.com/jax-ml/jax/issues/4667). In five steps:
#
# 1. **the slow function**: a chain of leaky tanks, its state a dict of named levels, stepped
#    in a `lax.scan` loss;
# 2. **`explorer.diagnose`** it, and read each finding in plain words;
# 3. **`explorer.define_problem`**: hand the explorer the per-name step, and it derives the
#    other representations (`packed`, and `array` from a vectorised step you give);
# 4. **`explorer.sweep`** it over a few sizes, `dict` against `packed` and `array`;
# 5. **apply the remedy** (`explorer.pack` around the step you already have) and see the
#    numbers fall, diagnosis and all.
#
# Served as an app (`panel serve notebooks/04_your_code.ipynb --address 127.0.0.1`), this
# notebook skips the measurements and shows only the dashboard at the end, with your problem in
# its menu.

# %%
# One switch for the full-size run. False: small sizes, well under a minute on a laptop CPU.
FULL_SIZE = False

HORIZON = 50                      # time steps in the loss
N_TANKS = 300 if FULL_SIZE else 100   # size of the worked example in sections 1, 2 and 5
SWEEP_N = [20, 50, 100, 300] if FULL_SIZE else [20, 50, 100]
TARGETS = ["loss", "grad"] if FULL_SIZE else ["loss"]
REUSE_STORED = False   # True: reuse measurements already in your results store (fast re-runs)

# %%
import linecache
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
from explorer import plots

hv.extension("bokeh", inline=True)   # JS and CSS inside the notebook: exports work offline
pn.extension(inline=True)
pd.set_option("display.precision", 4)
pd.set_option("display.max_colwidth", None)   # whole messages, not cut with "…"

# True when this notebook runs as an app under `panel serve`: the measuring cells are skipped
# and only the dashboard at the end is shown.
SERVED = pn.state.served
NOTEBOOK_START = time.perf_counter()
print(f"jax {jax.__version__}, backend {jax.default_backend()}; results store: {explorer.default_path()}")

# %% [markdown]
# ## 1 · A slow function, written per name
#
# A row of tanks, each leaking into the next; the first is fed at a constant rate. The state is
# a dict of named levels (`level_0`, `level_1`, ...), the parameters a dict of named leak rates
# (`leak_0`, ...), and the step is the loop over names you would write first. The loss fits
# the leak rates to an observed trajectory of every level, rolling the step out with
# `lax.scan`: exactly the kind of code whose compile time grows with the number of names.

# %%
DT, FEED = 0.1, 1.0


def step(levels, leaks):
    """Leaky tanks in a chain: each drains into the next."""
    new = {}
    for i in range(len(levels)):
        inflow = levels[f"level_{i - 1}"] if i > 0 else FEED
        new[f"level_{i}"] = levels[f"level_{i}"] + DT * (inflow - leaks[f"leak_{i}"] * levels[f"level_{i}"])
    return new


def loss(observed, leaks):
    def body(levels, _):
        return step(levels, leaks), levels

    start = {name: series[0] for name, series in observed.items()}
    _, predicted = lax.scan(body, start, None, length=HORIZON)
    return sum(jnp.sum((observed[name] - predicted[name]) ** 2) for name in observed)


def make_args(n):
    """The loss's arguments for n tanks: observed levels (HORIZON values each) and leak rates."""
    rng = np.random.default_rng(n)
    observed = {f"level_{i}": jnp.asarray(rng.uniform(0.0, 2.0, HORIZON), dtype=jnp.float32)
                for i in range(n)}
    leaks = {f"leak_{i}": jnp.float32(1.0 + 0.1 * i / n) for i in range(n)}
    return observed, leaks


observed, leaks = make_args(N_TANKS)
if not SERVED:
    print(f"{N_TANKS} tanks: loss = {float(jax.jit(loss)(observed, leaks)):.3f}")

# %% [markdown]
# ## 2 · `explorer.diagnose`: what makes it slow, and what to write instead
#
# `explorer.diagnose(fn, *args)` traces the function, compiles it cold, counts its equations
# per source line and looks for the patterns known to make compiles slow. Given `make_args`
# and several sizes instead of one set of arguments, it does this at each size and fits how
# each figure grows: the equation count exactly (`eqns ≈ e0 + e1·N^p`), and the compile time,
# beyond the measured sizes, as a range (at least the largest measured time, at most that time
# grown as the equations squared). A projection is never a measurement, and it refuses to
# reach past ten times the largest size measured.

# %%
if not SERVED:
    diagnosis = explorer.diagnose(loss, make_args=make_args, sizes=SWEEP_N)
    display(diagnosis)

# %% [markdown]
# The findings, one by one, each with what it means in plain words:

# %%
PLAIN_WORDS = {
    "many-arguments": (
        "Every named number is a separate argument of the compiled program. XLA handles each "
        "argument on its own, so its work grows with their count even when the arithmetic is "
        "tiny. Handing it one array instead (stacked once, outside the jitted function) removes "
        "that cost."),
    "per-leaf-repetition": (
        "The same few equations are written out once per name: the loop over names runs while "
        "JAX traces, so the program holds N copies of one formula. XLA compiles every copy. "
        "One vector operation per group of names does the same arithmetic in a program whose "
        "size does not depend on N."),
    "many-carry-leaves": (
        "The `lax.scan` carries one array per name from step to step. Each carried array is a "
        "loop variable XLA has to track through the loop; one stacked array is one loop "
        "variable."),
    "unrolled-loop": (
        "A Python loop runs at trace time, so one source line becomes a long chain of "
        "equations; `lax.scan` or `lax.fori_loop` keeps the body once in the program."),
    "large-constants": (
        "Arrays captured by closure are baked into the program as constants; pass them as "
        "arguments instead."),
    "large-unroll": (
        "A large scan `unroll` copies the body that many times into the program."),
}

if not SERVED:
    kinds = diagnosis.kinds
    # Robust facts: this per-name code repeats one formula per tank, and its equation count
    # grows with N (timings are shown, not asserted: they depend on the machine's load).
    assert "per-leaf-repetition" in kinds, kinds
    exponents = diagnosis.exponents.set_index("metric")["k"]
    assert exponents["jaxpr_eqns"] > 0.9, exponents
    def source_line(where):
        """The code at a finding's "file:line" (a notebook cell's file has no telling name)."""
        if where is None:
            return "the whole program"
        file, _, line = where.rpartition(":")
        return f"`{linecache.getline(file, int(line)).strip()}`"

    explained = set()
    for f in diagnosis.findings:
        sentence, _, sketch = f.remedy.partition("\n\n")
        plain = ("the same pattern as above, on another line." if f.kind in explained
                 else PLAIN_WORDS.get(f.kind, ""))
        explained.add(f.kind)
        display(Markdown(f"""
**`{f.kind}`** at {source_line(f.where)}

*Found:* {f.message}

*In plain words:* {plain}

*Remedy:* {sentence}

```python
{sketch.strip()}
```

*Saving:* {f.saving}
"""))
    repeated = [source_line(f.where) for f in diagnosis.findings
                if f.kind == "per-leaf-repetition" and f.where]
    assert len(repeated) >= 2, repeated   # the step's loop, and the loss's own loops over names
    display(Markdown(f"""
So the per-name loop is not only in `step`: the repetition is found on {len(repeated)} lines,

{chr(10).join(f"* {line}" for line in repeated)}

Whatever replaces the step has to replace the per-name bookkeeping in the loss too (taking the
first value of every series, summing over names): section 5 does both.
"""))

# %% [markdown]
# ## 3 · Your function as a problem: `explorer.define_problem`
#
# `diagnose` looks at one function. To see how the cost grows, and what each way of holding the
# state would cost, hand the explorer the *step* itself. You give the per-name `step` above,
# unchanged, and two factories for the initial state and the true parameters at `n` tanks (one
# array per group: the names are then `level_0`, `level_1`, ...). The explorer synthesises the
# observations by rolling your step out under the true parameters, builds the same loss in
# every representation it can derive, and checks that each gives the loss and gradient of
# `dict`. From the per-name step alone it derives `dict`, `unflatten`, `ravel`, `packed` (the
# step vectorised by `explorer.pack`) and `jit` (the whole loss through `explorer.jit`); giving
# `step_vector`, the same step on stacked arrays, enables `array` too.

# %%
def step_vector(x, leak):
    """The same step on the levels and leak rates stacked in name order."""
    inflow = jnp.concatenate([jnp.full((1,), FEED), x[:-1]])
    return x + DT * (inflow - leak * x)


prob = explorer.define_problem(
    "tank_chain", step=step, step_vector=step_vector,
    state=lambda n: {"level": np.zeros(n)},
    params=lambda n: {"leak": 1.0 + 0.1 * np.arange(n) / n},
)
print(prob.description)

# %% [markdown]
# `explorer.build_case` builds one representation at one size, the program a sweep measures.
# Before measuring anything, check what the explorer built is what you wrote: `dict`,
# `packed` and `array` give the same loss and gradient (the gradient at the guess, in name order).

# %%
if not SERVED:
    evaluated = {rep: explorer.build_case(prob, rep, 10, HORIZON).evaluate()
                 for rep in ("dict", "packed", "array")}
    value_dict, grad_dict = evaluated["dict"]
    for rep, (value, grad) in evaluated.items():
        assert np.isclose(value, value_dict, rtol=1e-5) and np.allclose(grad, grad_dict, rtol=1e-4, atol=1e-4), rep
    display(pd.DataFrame({"loss": {rep: v for rep, (v, _) in evaluated.items()},
                          "|gradient|": {rep: float(np.linalg.norm(g)) for rep, (_, g) in evaluated.items()}})
            .rename_axis("at N = 10"))

# %% [markdown]
# ## 4 · Sweep it: `dict` against `packed` and `array`
#
# `explorer.sweep(prob, ...)` measures every representation at every size, cold, each in a
# worker process of its own (your problem travels there by value), and stores each row the
# moment it is measured, naming the problem and where its code came from.

# %%
def show_progress(event):
    if event.row is not None:
        print(f"\r{event.done}/{event.total} {event.spec.label:<50}", end="", flush=True)


REPS = ["dict", "packed", "array"]
if not SERVED:
    started = time.perf_counter()
    rows = explorer.sweep(prob, REPS, n_states=SWEEP_N, horizons=[HORIZON], targets=TARGETS,
                          resume=REUSE_STORED, progress=show_progress)
    print(f"\n{len(rows)} measurements in {time.perf_counter() - started:.0f} s")
    assert (rows["status"] == "ok").all()
    assert (rows["problem"] == prob.name).all()
    rows["total_compile_s"] = rows[["trace_s", "lower_s", "compile_s"]].sum(axis=1)
    display(rows.pivot(index=["target", "n_states"], columns="representation",
                       values=["total_compile_s", "jaxpr_eqns", "n_leaves"])
            .reindex(columns=REPS, level=1).round(3))

# %%
if not SERVED:
    display(hv.Layout([
        plots.compile_time_plot(rows, problem=prob.name, target=TARGETS[-1]),
        plots.program_size_plot(rows, problem=prob.name, target=TARGETS[-1]),
    ]).cols(2))

# %%
if not SERVED:
    t = TARGETS[-1]
    eqns = rows[rows["target"] == t].pivot(index="n_states", columns="representation",
                                            values="jaxpr_eqns")
    # Robust facts: the dict program grows with N; the packed and array programs are the same
    # size at every N (compile times are shown, not asserted).
    assert eqns["dict"].is_monotonic_increasing and eqns["dict"].iloc[-1] > 2 * eqns["dict"].iloc[0]
    assert eqns["packed"].nunique() == 1 and eqns["array"].nunique() == 1
    fits = explorer.scaling_exponents(rows, metrics=["jaxpr_eqns", "total_compile_s"])
    k = fits.set_index(["target", "representation", "metric"])["k"]
    at = rows[(rows["target"] == t) & (rows["n_states"] == max(SWEEP_N))].set_index("representation")
    c = at["total_compile_s"]
    display(Markdown(f"""
**Measured** (tank chain, horizon {HORIZON}, target `{t}`, N = {', '.join(map(str, SWEEP_N))}):

* `dict`: the program grows with N, {eqns['dict'].iloc[0]} equations at N = {min(SWEEP_N)} and
  {eqns['dict'].iloc[-1]} at N = {max(SWEEP_N)} (fitted k = {k.loc[(t, 'dict', 'jaxpr_eqns')]:.2f});
  compile time grows with k = {k.loc[(t, 'dict', 'total_compile_s')]:.2f}.
* `packed`: the same per-name step, vectorised by `explorer.pack`: {eqns['packed'].iloc[0]}
  equations at every N.
* `array`: your `step_vector`: {eqns['array'].iloc[0]} equations at every N.

At N = {max(SWEEP_N)} the dict program compiles in {c['dict']:.2f} s, the packed one in
{c['packed']:.2f} s ({c['dict'] / c['packed']:.1f}× faster) and the array one in {c['array']:.2f} s.
"""))

# %% [markdown]
# ## 5 · Apply the remedy and see the numbers fall
#
# The first finding's remedy is `explorer.pack`: keep `step` exactly as written, let the
# explorer trace it once and group the equations that compute the same formula on different
# names (here every tank: the first reads the feed where the others read the tank upstream, one
# formula up to that value), and emit one vector operation per group. The packed step takes and
# returns stacked arrays, in
# `jax.tree_util.tree_leaves` order (dict keys sorted), which you stack once with NumPy,
# outside any trace. The loss around it changes only where the state is stacked.

# %%
start = {name: series[0] for name, series in observed.items()}
packed_step = explorer.pack(step, start, leaks)
start_packed, leaks_packed = packed_step.pack_args(start, leaks)
# The observed levels in the same leaf order: one column per tank, (HORIZON, N_TANKS).
observed_packed = np.stack(jax.tree_util.tree_leaves(observed), axis=1)


def loss_packed(observed, leaks):
    # The packed step's own loop: its lane layout is applied once before the scan and undone
    # once after it (a scan of `packed_step(...)` would reorder the lanes in every step).
    predicted = packed_step.rollout(observed[0], leaks, length=HORIZON)
    return jnp.sum((observed - predicted) ** 2)


print(packed_step.report)
assert packed_step.report.packs == 1   # the first tank (fed from outside) joins the others

# %%
if not SERVED:
    # Same numbers first: the packed loss and gradient are the dict's.
    value_d, grad_d = jax.jit(jax.value_and_grad(loss, argnums=1))(observed, leaks)
    value_p, grad_p = jax.jit(jax.value_and_grad(loss_packed, argnums=1))(observed_packed, leaks_packed)
    assert np.allclose(float(value_p), float(value_d), rtol=1e-5)
    assert np.allclose(np.asarray(grad_p), np.stack(jax.tree_util.tree_leaves(grad_d)),
                       rtol=1e-4, atol=1e-3)

    after = explorer.diagnose(loss_packed, observed_packed, leaks_packed)
    display(after)

# %%
if not SERVED:
    before = diagnosis   # at the largest size of section 2, N = max(SWEEP_N)
    assert before.sizes["size"].iloc[-1] == N_TANKS
    # Robust facts: the remedy removes the per-name repetition and shrinks the program.
    assert "per-leaf-repetition" not in after.kinds, after.kinds
    assert after.n_leaves == 2 and after.jaxpr_eqns * 2 < before.jaxpr_eqns
    table = pd.DataFrame({
        f"per-name loss (N = {N_TANKS})": [before.n_leaves, before.jaxpr_eqns, before.stablehlo_bytes,
                                           before.measurement.total_compile_s, len(before.findings)],
        "packed loss": [after.n_leaves, after.jaxpr_eqns, after.stablehlo_bytes,
                        after.measurement.total_compile_s, len(after.findings)],
    }, index=["array leaves", "jaxpr equations", "StableHLO bytes", "total compile s", "findings"],
        dtype=object)
    display(table)
    ratio = before.measurement.total_compile_s / after.measurement.total_compile_s
    verdict = (f"{ratio:.1f}× faster" if ratio >= 1.2 else
               f"about the same ({ratio:.2f}×) at this small N: the saving grows with N, "
               f"measure it at your size")
    display(Markdown(f"""
The same step function, packed, in a loss that works on the stacked arrays: {before.n_leaves} array leaves became {after.n_leaves},
{before.jaxpr_eqns} equations became {after.jaxpr_eqns}, {before.stablehlo_bytes:,} bytes of
StableHLO became {after.stablehlo_bytes:,}, and the cold compile went from
{before.measurement.total_compile_s:.2f} s to {after.measurement.total_compile_s:.2f} s
({verdict}). The diagnosis had {len(before.findings)} finding(s); it now has {len(after.findings)}.

`pack` or a rewrite? `pack` keeps the per-name code you have; it costs one extra trace of the
step, and its program stays the same size as N grows as long as the number of distinct formulas
does. If you can write the step group-wise, do: your `step_vector` (the `array` column above)
or `explorer.NamedArray`, which keeps the names at array cost (notebook 03), is the array
program and traces nothing twice.
"""))

# %% [markdown]
# ## 6 · The dashboard, with your problem in its menu
#
# `explorer.dashboard(problems=[prob])` lists your problem beside the built-in ones, and reads
# the same results store, so the sweep above is already there. From a terminal, the same page is
# `pytree-explorer serve --problem MODULE:ATTR` with the problem saved in a module (see the
# README, "Your own problem").

# %%
if not SERVED:
    print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s before the dashboard")
dashboard = explorer.dashboard(problems=[prob], problem=prob.name, representations=REPS)
dashboard.servable(title="PyTree Compile Explorer")

# %% [markdown]
# ## 7 · `explorer.watch`: which compiles make a whole program slow to start
#
# Sections 1 to 6 started from a function you already suspected. Often you only know that your
# program takes a long time before its first step. `with explorer.watch() as w:` records every
# compilation the block makes, without changing what it computes: each function's name and the
# line of your code where it is defined, its trace, lower and XLA-compile seconds, its argument
# leaves, equations and StableHLO size, and, when a function compiles again, why (what changed
# in what JAX keyed its trace on, in one line). Then it ranks the functions by compile time and runs
# `explorer.diagnose` on the top ones, on the very call that compiled.
#
# The program below is a small training loop with three jitted functions:
#
# * `per_name_grad`, the gradient of a loss written per name (one scalar parameter per name):
#   one compile, but the slow one;
# * `clean_update`, the update on one stacked array: one fast compile;
# * `batch_mean`, which compiles again at every step, because the batch grows by a row each
#   time (a new shape is a new program to XLA).

# %%
N_WATCH = 200 if FULL_SIZE else 100   # names in the per-name loss
STEPS = 8                             # training steps, so batch_mean compiles 8 times

WATCH_NAMES = [f"w{i}" for i in range(N_WATCH)]


def per_name_loss(params, x):
    """One term per named parameter: N leaves, and N copies of the same few operations."""
    return sum((params[k] * x[i] - 1.0) ** 2 for i, k in enumerate(WATCH_NAMES))


per_name_grad = jax.jit(jax.grad(per_name_loss))


@jax.jit
def clean_update(w, g):
    """One stacked array: a few operations, whatever N is."""
    return w - 0.01 * g


@jax.jit
def batch_mean(batch):
    """Compiled again at every step: its argument's shape changes."""
    return jnp.mean(batch, axis=0)


def train(steps):
    params = {k: jnp.float32(1.0) for k in WATCH_NAMES}
    w = jnp.ones(N_WATCH)
    for step_ in range(steps):
        batch = jnp.ones((step_ + 2, N_WATCH))   # one row more each step
        g = per_name_grad(params, batch_mean(batch))
        w = clean_update(w, jnp.stack([g[k] for k in WATCH_NAMES]))
    return w


if not SERVED:
    unwatched = train(STEPS)
    jax.clear_caches()   # so the watched run compiles everything again, as a fresh program would
    with explorer.watch() as w:
        watched = train(STEPS)
    assert np.array_equal(np.asarray(watched), np.asarray(unwatched))   # same numbers
    print(w)

# %% [markdown]
# Reading the report. The first line is the budget: how many compilations, how many seconds of
# XLA compile, trace and lower, and compilation as a share of the program's wall time. Then the
# functions, most compile seconds first, each with the line of this notebook where it is defined,
# how many times it compiled, and why it compiled again. Besides our three functions you see
# operations JAX compiled for the eager `jnp` calls between them (`jnp.ones`, `jnp.stack`),
# charged to the line that made them: each new shape of an eager call is a compile of its own.
# The findings below the ranking are `explorer.diagnose`'s, on the top functions.

# %%
if not SERVED:
    summary = w.summary()
    display(summary[["name", "where", "compiles", "compile_s", "share", "eqns", "n_leaves",
                     "reason"]])
    by_name = summary.set_index("name")
    slow, clean, again = (by_name.loc[n] for n in ("per_name_loss", "clean_update", "batch_mean"))
    # Robust facts (no timing): what compiled how often, and why.
    assert slow["compiles"] == 1 and clean["compiles"] == 1 and again["compiles"] == STEPS
    assert again["reason"].startswith("shape changed: batch is f32["), again["reason"]
    assert slow["n_leaves"] == N_WATCH + 1 and slow["eqns"] > 10 * clean["eqns"]
    assert all(str(where).rsplit(":", 1)[0] not in explorer.__file__ for where in summary["where"])
    top = w.findings[0]
    assert top.name == "per_name_loss" and top.diagnosis is not None and top.diagnosis.findings
    first = top.diagnosis.findings[0]
    display(Markdown(f"""
* **`{top.name}`** took {top.share:.0%} of the compile time in one compile: {slow['n_leaves']} argument
  leaves and {slow['eqns']:,} equations, against {clean['eqns']} for `clean_update`.
  `explorer.diagnose` on the same call found {', '.join(f'`{k}`' for k in top.diagnosis.kinds)};
  the first one's remedy: {first.remedy.split(chr(10) * 2)[0]} The cure of section 5 applies
  too: one stacked array of parameters instead of a dict of scalars.
* **`batch_mean`** compiled {again['compiles']} times, {again['compile_s']:.2f} s in all, because
  "{again['reason']}". Pad the batch to a fixed size (and mask it), or bucket the sizes: one shape,
  one compile.
* **`clean_update`** compiled once, in {clean['compile_s']:.3f} s: nothing to do.

Compilation took {w.share_of_wall:.0%} of this block's {w.wall_s:.1f} s.
"""))

# %% [markdown]
# The same report as one page that opens offline (`w.to_html("compiles.html")`), or shown in the
# notebook: the ranking as a chart, the table, every compilation in order, and each top
# function's findings with their remedies.

# %%
if not SERVED:
    display(w)

# %% [markdown]
# From a terminal, the same for a whole script, run as `python train.py --epochs 3` would run it
# (its arguments, its exit status; the report goes to stderr):
#
# ```bash
# pytree-explorer watch --html compiles.html train.py --epochs 3
# python -m explorer.watch train.py --epochs 3        # the same
# ```
