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
# # 02 · `eqx.tree_at` is free; splitting an array is not
#
# The equinox discussion [*Computational performance of eqx.tree_at*](https://github.com/patrick-kidger/equinox/issues/572): a user moved a time-stepping model from tuples to an Equinox
# `Module` updated with `eqx.tree_at` and expected it to be slower. It was not. The answers:
# `tree_at` never copies an array, it only rebuilds the containers around them, and *"all
# pytree manipulations are a Python-level operation that vanish under compilation"*: the two
# versions have the same jaxpr.
#
# This notebook checks that with `explorer.compare`, puts the runtimes side by side with
# `explorer.measure`, and then shows the case where the choice of representation **does**
# change the program, and why. Every number in the prose is computed here.

# %%
# One switch for the full-size run. False: small sizes (seconds). True: larger N and more rounds.
FULL_SIZE = False

N_S = 1000                 # as in the discussion: length of the state vectors x and y
STEPS = 1000               # as in the discussion: scan length
ROUNDS = 8 if FULL_SIZE else 4       # interleaved cold measurements per variant
RUNS = 50                            # timed calls per measurement (median kept)
COUNTER_N = [3, 10, 30, 100, 300, 1000] if FULL_SIZE else [3, 10, 30, 100]
HORIZON = 100

# %%
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from IPython.display import Markdown, display
from jax import lax

import explorer


def compare_cases(problem, rep_a, rep_b, n, target):
    # explorer.compare of one problem's program in two representations
    a = explorer.build_case(problem, rep_a, n, HORIZON)
    b = explorer.build_case(problem, rep_b, n, HORIZON)
    return explorer.compare(a.function(target), a.args, b.function(target), b.args,
                            labels=(rep_a, rep_b))

pd.set_option("display.precision", 4)
NOTEBOOK_START = time.perf_counter()
print(f"jax {jax.__version__}, equinox {eqx.__version__}, backend {jax.default_backend()}; "
      f"results store: {explorer.default_path()}")


# %% [markdown]
# ## 1 · The discussion's two programs
#
# As in the discussion: an object-oriented version whose `State` is an `eqx.Module`, updated field by
# field with `eqx.tree_at`, and a functional version on a plain tuple.

# %%
def update_y(x):
    return x**2


## OOP implementation
class State(eqx.Module):
    x: jax.Array
    y: jax.Array

    def __init__(self, N_s):
        self.x = jnp.linspace(0, 1, N_s)
        self.y = update_y(self.x)


class Model(eqx.Module):
    def update_state(self, x, dx):
        x = x + dx
        y = update_y(x)
        return x, y


model = Model()


def time_stepping_module(state, dx):
    new_x, new_y = model.update_state(state.x, dx)
    state = eqx.tree_at(lambda t: t.x, state, new_x)
    state = eqx.tree_at(lambda t: t.y, state, new_y)
    return state, new_y


## Functional programming
def update_state(x, dx):
    x = x + dx
    y = update_y(x)
    return x, y


def time_stepping_tuple(state, dx):
    x, y = state
    new_x, new_y = update_state(x, dx)
    return (new_x, new_y), new_y


state = State(N_S)
x = jnp.linspace(0, 1, N_S)
state_tuple = (x, update_y(x))
dx_array = jnp.linspace(0.1, 1, STEPS)


# The whole scan is what gets compiled (and, as one answer pointed out, what should be jitted).
def run_module(state, dx_array):
    return lax.scan(time_stepping_module, state, dx_array)


def run_tuple(state, dx_array):
    return lax.scan(time_stepping_tuple, state, dx_array)


# %% [markdown]
# First half of the answer: `tree_at` makes no copy. It returns a new container holding the very
# same array objects (the check from the discussion):

# %%
a, b, c = jnp.zeros(3), jnp.ones(3), jnp.full(3, 2.0)
new_x = eqx.tree_at(lambda y: y[0], [a, b], c)
assert new_x[0] is c and new_x[1] is b   # exact same objects, no copies made
print("tree_at copied nothing:", new_x[0] is c, new_x[1] is b)

# %% [markdown]
# Second half: the pytree handling vanishes under compilation. `explorer.compare` traces both
# programs, compares their jaxprs (up to variable and function names) and their StableHLO (up to
# module names and the attributes that spell each output's pytree path), and gives a diff when
# they differ.

# %%
tree_at_cmp = explorer.compare(run_module, (state, dx_array), run_tuple, (state_tuple, dx_array),
                            labels=("module + tree_at", "tuple"))
print(tree_at_cmp)
assert tree_at_cmp.same_jaxpr and tree_at_cmp.same_hlo
assert tree_at_cmp.jaxpr_diff == "" and tree_at_cmp.hlo_diff == ""
print(jax.make_jaxpr(time_stepping_module)(state, dx_array[0]))
print(jax.make_jaxpr(time_stepping_tuple)(state_tuple, dx_array[0]))

# %% [markdown]
# The raw StableHLO texts are not byte-identical, and it is worth seeing why: the lines that
# differ only *name* things (the module is called after the function, and each result carries
# its pytree path, `.x` for a Module field, `[0]` for a tuple slot). No operation differs.

# %%
import difflib

raw_a = explorer.program_texts(run_module, state, dx_array)["stablehlo"]
raw_b = explorer.program_texts(run_tuple, state_tuple, dx_array)["stablehlo"]
changed = [line for line in difflib.unified_diff(raw_a.splitlines(), raw_b.splitlines(), lineterm="", n=0)
           if line[:1] in "+-" and not line.startswith(("+++", "---"))]
print(f"{len(changed)} changed lines out of {len(raw_a.splitlines())}:")
print("\n".join(changed))   # whole lines: a cut one could hide what differs
assert all(("jit_run_" in line) or ("result_info" in line) for line in changed)

# %% [markdown]
# ## 2 · Runtimes side by side
#
# Identical programs should run alike. Each variant is measured `ROUNDS` times, interleaved
# (module, tuple, then tuple, module, …) so that load on the machine and the order of the calls
# hit both alike; every round is a cold compile followed by `RUNS` timed calls.

# %%
rows = []
variants = [("module + tree_at", run_module, (state, dx_array)), ("tuple", run_tuple, (state_tuple, dx_array))]
for round_ in range(ROUNDS):
    for name, fn, args in (variants if round_ % 2 == 0 else variants[::-1]):   # A B, B A, A B, ...
        m = explorer.measure(fn, *args, runs=RUNS, name=name)
        rows.append({"variant": name, "round": round_, "run ms": m.run_s * 1e3,
                     "total compile s": m.total_compile_s, "jaxpr eqns": m.jaxpr_eqns,
                     "StableHLO bytes": m.hlo_pre_bytes, "cold": m.cold})
timing = pd.DataFrame(rows)
assert timing["cold"].all()
summary = timing.groupby("variant", sort=False).agg(
    run_ms=("run ms", "median"), run_ms_min=("run ms", "min"), run_ms_max=("run ms", "max"),
    compile_s=("total compile s", "median"), eqns=("jaxpr eqns", "first"),
    stablehlo_bytes=("StableHLO bytes", "first"))
summary

# %%
mod, tup = summary.loc["module + tree_at"], summary.loc["tuple"]
run_ratio = mod["run_ms"] / tup["run_ms"]
noise = max((r["run_ms_max"] - r["run_ms_min"]) / r["run_ms"] for _, r in summary.iterrows())
assert mod["eqns"] == tup["eqns"]
within = abs(run_ratio - 1) <= noise
display(Markdown(f"""
Median runtime of one jitted call ({STEPS} steps on {N_S}-vectors): **{mod['run_ms']:.3f} ms** with
the Module and `tree_at`, **{tup['run_ms']:.3f} ms** with the tuple, a ratio of {run_ratio:.2f}.
From round to round each variant ranged over up to {noise:.0%} of its median, so the difference
is {"within" if within else "larger than"} the round-to-round spread on this machine{"." if within else
" this time. The two programs are identical (asserted above), so the difference is the machine's,"
" not the program's."} Compile times: {mod['compile_s']:.3f} s and {tup['compile_s']:.3f} s.
"""))

# %% [markdown]
# ## 3 · A counter-example: when the representation does change the program
#
# `tree_at`, Modules, tuples, dicts of arrays: all of these move *the same arrays* around, and
# that plumbing is gone by the time XLA sees the program. What does change the program is
# changing the arrays themselves. Hold N states as a `dict` of N scalars (jax#4667's
# representation) instead of one array of N, and the program gets N times the work to describe.
#
# The explorer builds both for the same problem (`decay`, jax#4667's dynamics):

# %%
counter_rows = []
for n in COUNTER_N:
    cmp = compare_cases("decay", "dict", "array", n, "loss")
    counter_rows.append({"N": n, "same_jaxpr": cmp.same_jaxpr, "same_hlo": cmp.same_hlo,
                         "dict eqns": cmp.eqns_a, "array eqns": cmp.eqns_b,
                         "dict StableHLO bytes": cmp.hlo_bytes_a, "array StableHLO bytes": cmp.hlo_bytes_b})
counter = pd.DataFrame(counter_rows)
assert not counter["same_jaxpr"].any() and not counter["same_hlo"].any()
assert counter["dict eqns"].is_monotonic_increasing and counter["dict eqns"].nunique() == len(COUNTER_N)
assert counter["array eqns"].nunique() == 1, "the array program does not depend on N"
per_state = np.polyfit(counter["N"], counter["dict eqns"], 1)[0]
bytes_per_state = np.polyfit(counter["N"], counter["dict StableHLO bytes"], 1)[0]
counter

# %% [markdown]
# Why: JAX builds the program by running your Python once with tracers. `jax.tree.map(f, state)`
# over a dict of N leaves calls `f` N times and records N separate equations, and the scan carries
# N separate buffers. One array of N goes through each operation once, whatever N is. Here are
# the whole jaxprs of both losses at N = 3 (the scan body is the `jaxpr={ ... }` inside the
# `scan` equation): the dict program repeats its two multiplies and an add once per name, the
# array program does each once:

# %%
small_dict = explorer.build_case("decay", "dict", 3, HORIZON)
small_array = explorer.build_case("decay", "array", 3, HORIZON)
print(explorer.program_texts(small_dict.function("loss"), *small_dict.args)["jaxpr"])
print(explorer.program_texts(small_array.function("loss"), *small_array.args)["jaxpr"])

# %%
n_big = max(COUNTER_N)
cost = {rep: explorer.measure_case(explorer.build_case("decay", rep, n_big, HORIZON), "loss")
        for rep in ("dict", "array")}
assert cost["dict"].cold and cost["array"].cold
display(Markdown(f"""
Each extra state adds **{per_state:.1f} jaxpr equations** and **{bytes_per_state:,.0f} bytes** of
StableHLO to the dict program's loss; the array program has {counter['array eqns'].iloc[0]} equations
at every N. At N = {n_big} that is {cost['dict'].jaxpr_eqns} equations against
{cost['array'].jaxpr_eqns}, and a total compile time of {cost['dict'].total_compile_s:.2f} s
against {cost['array'].total_compile_s:.2f} s ({cost['dict'].total_compile_s / cost['array'].total_compile_s:.1f}×).
"""))

# %% [markdown]
# ## 4 · Named *and* cheap: representations that give the same program
#
# So the rule is: pytree containers are free, splitting arrays is not. Two consequences the
# explorer's built-in representations make checkable:
#
# * `struct` (a dict with one array per state *group*, e.g. `{"position": (N,), "velocity": (N,)}`)
#   and `module` (an `eqx.Module` with one array field per group, updated with `tree_at`) are the
#   equinox discussion again, at every N: the very same program.
# * `named` (`explorer.NamedArray`: one array leaf whose groups and elements are read by name
#   through static slices) compiles to the very same program as the stacked `array`: the names
#   live in the pytree's static metadata and cost nothing.

# %%
same_rows = []
for problem in ("decay", "oscillator"):
    for a, b in (("struct", "module"), ("named", "array")):
        for target in ("loss", "grad"):
            cmp = compare_cases(problem, a, b, 30, target)
            same_rows.append({"problem": problem, "pair": f"{a} vs {b}", "target": target,
                              "same_jaxpr": cmp.same_jaxpr, "same_hlo": cmp.same_hlo,
                              "eqns": f"{cmp.eqns_a} vs {cmp.eqns_b}"})
same = pd.DataFrame(same_rows)
assert same["same_jaxpr"].all() and same["same_hlo"].all()
print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s")
same

# %% [markdown]
# Notebook 03 measures what these buy in compile time, and how to move your own code to them.
