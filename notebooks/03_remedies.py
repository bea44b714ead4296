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
# # 03 · Remedies: named access at array cost
#
# Notebooks 01 and 02 showed that a state held as N named scalars makes the program, and the
# compile time, grow with N, while pytree containers around whole arrays are free. This notebook
# measures the ways out:
#
# 1. **Representations** that keep names: `struct` (a dict of per-group arrays), `named`
#    (`explorer.NamedArray`), `ravel` (`jax.flatten_util.ravel_pytree` around the scan), against
#    `dict` and the plain `array`;
# 2. the **scan `unroll`** trade-off: compile time and program size against runtime;
# 3. **equation blame**: finding the line of your code that multiplies into N equations;
# 4. **adopting `NamedArray`** in your own step function;
# 5. **wrapping** the step you already have with `explorer.pack`, leaving its code as it is;
# 6. the **dashboard**, embedded, to explore further.
#
# Served as an app (`panel serve notebooks/03_remedies.ipynb --address 127.0.0.1`), this notebook skips the
# measurements and shows only the dashboard, so the page opens at once.

# %%
# One switch for the full-size run. False: small sizes, well under a minute on a laptop CPU.
FULL_SIZE = False

PROBLEM = "oscillator"          # a chain of masses and springs: two state groups, neighbours coupled
HORIZON = 100
SWEEP_N = [10, 30, 100, 300] if FULL_SIZE else [10, 30, 100]
TARGETS = ["loss", "grad"] if FULL_SIZE else ["loss"]
UNROLL_N, UNROLL_HORIZON = 30, 200
UNROLLS = [1, 2, 4, 8, 16] if FULL_SIZE else [1, 2, 4, 8]
UNROLL_ROUNDS = 3 if FULL_SIZE else 2
N_ROOMS = 100 if FULL_SIZE else 30   # size of the worked example in sections 3 and 4
REUSE_STORED = False   # True: reuse measurements already in your results store (fast re-runs)

# %%
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
from explorer import NamedArray
import explorer.plots as plots

hv.extension("bokeh", inline=True)   # JS and CSS inside the notebook: exports work offline
pn.extension(inline=True)
pd.set_option("display.precision", 4)
pd.set_option("display.max_colwidth", None)   # whole descriptions, not cut with "…"

# True when this notebook runs as an app under `panel serve`: the measuring cells are skipped
# and only the dashboard at the end is shown.
SERVED = pn.state.served
NOTEBOOK_START = time.perf_counter()
print(f"jax {jax.__version__}, backend {jax.default_backend()}; results store: {explorer.default_path()}")

# %% [markdown]
# ## 1 · Named access at array cost
#
# Five ways to hold the oscillator's state (`position` and `velocity` of N masses) and
# parameters (`stiffness`, `damping`), all computing the same loss:

# %%
if not SERVED:
    display(pd.Series(explorer.representations(), name="description")
            .loc[["dict", "ravel", "struct", "named", "array"]].to_frame())


# %%
def show_progress(event):
    if event.row is not None:
        print(f"\r{event.done}/{event.total} {event.spec.label:<50}", end="", flush=True)

if not SERVED:
    started = time.perf_counter()
    remedies = explorer.sweep(PROBLEM, ["dict", "ravel", "struct", "named", "array"],
                              n_states=SWEEP_N, horizons=[HORIZON], targets=TARGETS,
                              resume=REUSE_STORED, progress=show_progress)
    print(f"\n{len(remedies)} measurements in {time.perf_counter() - started:.0f} s")
    assert (remedies["status"] == "ok").all()
    remedies["total_compile_s"] = remedies[["trace_s", "lower_s", "compile_s"]].sum(axis=1)
    display(remedies.pivot(index=["target", "n_states"], columns="representation",
                           values=["total_compile_s", "jaxpr_eqns", "n_leaves"])
            .reindex(columns=["dict", "ravel", "struct", "named", "array"], level=1).round(3))

# %%
if not SERVED:
    display(hv.Layout([
        plots.compile_time_plot(remedies, problem=PROBLEM, target=TARGETS[-1]),
        plots.program_size_plot(remedies, problem=PROBLEM, target=TARGETS[-1]),
    ]).cols(2))

# %%
if not SERVED:
    at = remedies[remedies["n_states"] == max(SWEEP_N)].set_index(["target", "representation"])
    t = TARGETS[-1]
    eqn_counts = remedies.groupby(["target", "representation"])["jaxpr_eqns"].nunique()
    fits = explorer.scaling_exponents(remedies, metrics=["jaxpr_eqns", "total_compile_s"])
    k = fits.set_index(["target", "representation", "metric"])["k"]

    # Robust facts: struct, named and array are the same program at every N; dict and ravel
    # grow with N (compile times are shown, not asserted: they depend on the machine's load).
    for target in TARGETS:
        for rep in ("struct", "named", "array"):
            assert eqn_counts.loc[(target, rep)] == 1, (target, rep)
        for rep in ("dict", "ravel"):
            assert k.loc[(target, rep, "jaxpr_eqns")] > 0.9, (target, rep)
        assert at.loc[(target, "named"), "jaxpr_eqns"] == at.loc[(target, "array"), "jaxpr_eqns"]

    c = at.loc[t, "total_compile_s"]
    e = at.loc[t, "jaxpr_eqns"]
    leaves = at.loc[t, "n_leaves"]
    ravel_vs_dict = c["ravel"] / c["dict"]
    assert e["ravel"] > 0.5 * e["dict"], "ravel leaves the per-name arithmetic in the step"
    display(Markdown(f"""
**Measured** ({PROBLEM}, horizon {HORIZON}, target `{t}`, N = {max(SWEEP_N)}):

| | dict | ravel | struct | named | array |
|---|---|---|---|---|---|
| compile (s) | {c['dict']:.2f} | {c['ravel']:.2f} | {c['struct']:.2f} | {c['named']:.2f} | {c['array']:.2f} |
| jaxpr equations | {e['dict']} | {e['ravel']} | {e['struct']} | {e['named']} | {e['array']} |
| array leaves | {leaves['dict']} | {leaves['ravel']} | {leaves['struct']} | {leaves['named']} | {leaves['array']} |

* `struct` and `named` keep the names and cost what the array costs: the same equation count at
  every N ({e['named']} for `named`, {e['struct']} for `struct`), and the dict's compile time is
  {c['dict'] / c['named']:.1f}× theirs (`named`) and {c['dict'] / c['struct']:.1f}× (`struct`) at N = {max(SWEEP_N)}.
* `ravel` is **not** a remedy for this program: {ravel_vs_dict:.1f}× the dict's compile time,
  {e['ravel']} equations against {e['dict']}, and equation count growing with
  k = {k.loc[(t, 'ravel', 'jaxpr_eqns')]:.2f}. `ravel_pytree` turns the scan carry into one
  vector, but the step function still unravels it into N named scalars and does N scalar updates
  in every step, so the program still grows with N (and gains the slicing and concatenating
  around them). Flattening once pays off when the cost sits in the code *around* your function,
  e.g. a solver that handles every leaf separately, not when your own step loops over names.
"""))

# %% [markdown]
# ## 2 · The scan `unroll` trade-off
#
# `lax.scan(..., unroll=u)` copies the step body `u` times into each loop iteration: fewer
# iterations (less loop overhead, more room for XLA to fuse across steps), but a bigger program
# to compile. The `named` representation, gradient target, measured cold at each `unroll`,
# interleaved over rounds:

# %%
if not SERVED:
    rows = []
    for round_ in range(UNROLL_ROUNDS):
        for u in UNROLLS:
            case = explorer.build_case(PROBLEM, "named", UNROLL_N, UNROLL_HORIZON, unroll=u)
            m = explorer.measure_case(case, "grad", runs=50)
            rows.append({"unroll": u, "round": round_, "total compile s": m.total_compile_s,
                         "StableHLO bytes": m.hlo_pre_bytes, "optimised HLO bytes": m.hlo_post_bytes,
                         "run µs": m.run_s * 1e6, "cold": m.cold})
    unroll = pd.DataFrame(rows)
    assert unroll["cold"].all()
    by_unroll = unroll.drop(columns=["round", "cold"]).groupby("unroll").median()
    display(by_unroll)

# %%
if not SERVED:
    # plots.log_ticks labels a log axis readably whatever its range (Bokeh's own labels only
    # whole decades).
    table = by_unroll.reset_index()
    xticks = plots.log_ticks(table["unroll"].min(), table["unroll"].max())
    opts = dict(logx=True, width=300, height=250, show_grid=True, tools=["hover"], xticks=xticks)
    curves = [hv.Curve(table, "unroll", col).opts(
                  title=col, logy=logy, **opts,
                  yticks=plots.log_ticks(table[col].min(), table[col].max()) if logy else None)
              * hv.Scatter(table, "unroll", col).opts(size=6, logy=logy, logx=True)
              for col, logy in (("total compile s", True), ("optimised HLO bytes", True),
                                ("run µs", False))]
    display(hv.Layout(curves).cols(3))

# %%
if not SERVED:
    # Robust facts: the program grows with unroll (compile and run times are reported, not
    # asserted: they depend on the machine's load).
    sizes = by_unroll["StableHLO bytes"]
    assert sizes.is_monotonic_increasing and sizes.iloc[-1] > sizes.iloc[0]
    u_max = by_unroll.index[-1]
    best = by_unroll["run µs"].idxmin()
    speedup = by_unroll.loc[1, "run µs"] / by_unroll.loc[best, "run µs"]
    compile_growth = by_unroll.loc[u_max, "total compile s"] / by_unroll.loc[1, "total compile s"]
    post_growth = by_unroll.loc[u_max, "optimised HLO bytes"] / by_unroll.loc[1, "optimised HLO bytes"]
    if best == 1:
        runtime_note = (f"No unroll made the run faster here: unroll=1 is the fastest at "
                        f"{by_unroll.loc[1, 'run µs']:.0f} µs per call, and unroll={u_max} takes "
                        f"{by_unroll.loc[u_max, 'run µs']:.0f} µs.")
    else:
        runtime_note = (f"The fastest run is at unroll={best}: {by_unroll.loc[best, 'run µs']:.0f} µs "
                        f"per call against {by_unroll.loc[1, 'run µs']:.0f} µs at unroll=1, a "
                        f"{speedup:.2f}× speed-up.")
    measure_note = ("A CPU run cannot tell you about your accelerator: measure" if jax.default_backend() == "cpu"
                    else "Measure") + (" on the backend you run on (choose it in the dashboard, or pass "
                                       "`backend=` to `explorer.measure`).")
    display(Markdown(f"""
Going from unroll=1 to unroll={u_max} multiplies the optimised program by {post_growth:.1f} and the
compile time by {compile_growth:.1f}. {runtime_note} On {jax.default_backend()} with N = {UNROLL_N},
that is the trade: pay compile time once for a run-time gain (if any) on every call. Unrolling
is meant for steps so cheap that the loop's own overhead matters, which differs from backend to
backend (on an accelerator every loop iteration can be a kernel launch). {measure_note}
"""))

# %% [markdown]
# ## 3 · Equation blame: which line multiplies?
#
# Here is user code of the kind jax#4667 had in mind: a row of `N_ROOMS` rooms exchanging
# heat with their neighbours, the state a dict of named temperatures, one parameter per room, and
# a loss that fits the parameters to an observed trajectory.

# %%
DT, OUTSIDE = 0.1, 0.0
ROOMS = [f"room_{i}" for i in range(N_ROOMS)]


def step_dict(temps, conductance):
    new = {}
    for i in range(N_ROOMS):
        t = temps[f"room_{i}"]
        left = temps[f"room_{i - 1}"] if i > 0 else OUTSIDE
        right = temps[f"room_{i + 1}"] if i + 1 < N_ROOMS else OUTSIDE
        new[f"room_{i}"] = t + DT * conductance[f"room_{i}"] * (left - 2 * t + right)
    return new


def loss_dict(observed, conductance):
    def body(temps, _):
        return step_dict(temps, conductance), temps

    init = {name: series[0] for name, series in observed.items()}
    _, predicted = lax.scan(body, init, None, length=HORIZON)
    return sum(jnp.sum((observed[name] - predicted[name]) ** 2) for name in ROOMS)


rng = np.random.default_rng(1)
observed_array = rng.normal(20.0, 1.0, size=(HORIZON, N_ROOMS)).astype(np.float32)
conductance_array = rng.uniform(0.1, 0.5, size=N_ROOMS).astype(np.float32)
observed_dict = {name: jnp.asarray(observed_array[:, i]) for i, name in enumerate(ROOMS)}
conductance_dict = {name: jnp.asarray(conductance_array[i]) for i, name in enumerate(ROOMS)}

# %% [markdown]
# `explorer.blame` traces the function and counts its jaxpr equations per source line (inside
# the scan body too), most first:

# %%
if not SERVED:
    blamed = explorer.blame(jax.grad(loss_dict, argnums=1), observed_dict, conductance_dict)
    total_eqns = int(blamed["eqns"].sum())
    top = blamed.iloc[0]
    assert "conductance[f\"room_{i}\"]" in top["code"] and top["eqns"] >= N_ROOMS
    display(Markdown(f"**{total_eqns} equations** in the gradient at N = {N_ROOMS}; the top line "
                     f"alone makes {top['eqns']} ({top['eqns'] / total_eqns:.0%}), "
                     f"{top['eqns'] / N_ROOMS:.1f} per room:"))
    display(blamed[["line", "function", "code", "eqns", "primitives"]].head(6))

# %% [markdown]
# ## 4 · Adopting `NamedArray` in your own code
#
# The fix is two changes, and it helps to see them separately:
#
# 1. **One leaf.** Hold the temperatures in an `explorer.NamedArray`: one array, read by name
#    (`temps["room"]` for the whole group, `temps["room_3"]` for one room) through static
#    slices. Lookups are resolved in Python while tracing; JAX sees one array.
# 2. **One operation per group, not per name.** Write the update on the group (`temps["room"]`,
#    shape `(N,)`) instead of looping over names. A loop over names stays a loop over names, one
#    leaf or not: each `temps[f"room_{i}"]` is its own slice.
#
# Version A makes only change 1; version B makes both.

# %%
LAYOUT = {"room": N_ROOMS}


def step_named_loop(temps, conductance):          # A: one leaf, still a loop over names
    new = []
    for i in range(N_ROOMS):
        t = temps[f"room_{i}"]
        left = temps[f"room_{i - 1}"] if i > 0 else OUTSIDE
        right = temps[f"room_{i + 1}"] if i + 1 < N_ROOMS else OUTSIDE
        new.append(t + DT * conductance[f"room_{i}"] * (left - 2 * t + right))
    return NamedArray(jnp.stack(new), LAYOUT)


def step_named(temps, conductance):                # B: one leaf, one update per group
    t = temps["room"]
    left = jnp.concatenate([jnp.full((1,), OUTSIDE), t[:-1]])
    right = jnp.concatenate([t[1:], jnp.full((1,), OUTSIDE)])
    return temps.replace(room=t + DT * conductance["room"] * (left - 2 * t + right))


def make_loss(step):
    def loss(observed, conductance):
        def body(temps, _):
            return step(temps, conductance), temps

        _, predicted = lax.scan(body, observed[0], None, length=HORIZON)
        return jnp.sum((observed.data - predicted.data) ** 2)
    return loss


loss_named_loop, loss_named = make_loss(step_named_loop), make_loss(step_named)
observed_named = NamedArray(jnp.asarray(observed_array), LAYOUT)
conductance_named = NamedArray(jnp.asarray(conductance_array), LAYOUT)

# %%
if not SERVED:
    # Same numbers first: the three versions compute the same loss and gradient.
    versions = {"dict": (loss_dict, observed_dict, conductance_dict),
                "A: NamedArray, loop over names": (loss_named_loop, observed_named, conductance_named),
                "B: NamedArray, one op per group": (loss_named, observed_named, conductance_named)}
    reference = None
    for name, (loss, obs, cond) in versions.items():
        value, grad = jax.jit(jax.value_and_grad(loss, argnums=1))(obs, cond)
        grad = np.array([grad[r] for r in ROOMS]) if isinstance(grad, dict) else np.asarray(grad.data)
        if reference is None:
            reference = (float(value), grad)
        assert np.allclose(float(value), reference[0], rtol=1e-4)
        assert np.allclose(grad, reference[1], rtol=1e-3, atol=1e-2)

    rows = []
    for target in ("loss", "grad"):
        for name, (loss, obs, cond) in versions.items():
            fn = loss if target == "loss" else jax.grad(loss, argnums=1)
            m = explorer.measure(fn, obs, cond, name=name)
            rows.append({"version": name, "target": target, "array leaves": m.n_leaves,
                         "jaxpr eqns": m.jaxpr_eqns, "StableHLO KB": m.hlo_pre_bytes / 1e3,
                         "total compile s": m.total_compile_s, "run µs": m.run_s * 1e6,
                         "cold": m.cold})
    adopt = pd.DataFrame(rows)
    assert adopt["cold"].all()
    display(adopt)

# %%
if not SERVED:
    g = adopt[adopt["target"] == "grad"].set_index("version")
    d, a, b = (g.loc[v] for v in versions)
    assert a["array leaves"] == b["array leaves"] == 2 < d["array leaves"]
    assert b["jaxpr eqns"] * 5 < a["jaxpr eqns"], "the per-name loop is what multiplies"
    blamed_b = explorer.blame(jax.grad(loss_named, argnums=1), observed_named, conductance_named)
    # Version B's program does not depend on N: trace it at three times the size.
    big = NamedArray(jnp.tile(observed_named.data, 3), {"room": 3 * N_ROOMS})
    big_c = NamedArray(jnp.tile(conductance_named.data, 3), {"room": 3 * N_ROOMS})
    eqns_big = explorer.count_eqns(jax.make_jaxpr(jax.grad(loss_named, argnums=1))(big, big_c))
    assert eqns_big == b["jaxpr eqns"]
    display(Markdown(f"""
Gradient, N = {N_ROOMS}: the dict version has {d['array leaves']} array leaves, {d['jaxpr eqns']}
equations and compiles in {d['total compile s']:.2f} s. Version A has {a['array leaves']} leaves but
still {a['jaxpr eqns']} equations ({a['total compile s']:.2f} s): the loop over names is still
there. Version B has {b['jaxpr eqns']} equations (and still {eqns_big} at N = {3 * N_ROOMS}), and compiles in
{b['total compile s']:.2f} s (the dict version takes {d['total compile s'] / b['total compile s']:.1f}× as long).
Blame now finds at most {int(blamed_b['eqns'].max())} equations on any one line.

To adopt it in your code: build the state once with `NamedArray.from_groups({{"position": p,
"velocity": v}})` (or `NamedArray(array, {{"room": N}})`), read groups by name inside the step,
return `state.replace(group=new_values)`, and pass `NamedArray`s through `lax.scan`, `jax.jit` and
`jax.grad` like any pytree. Read single elements by name where you need them (`state["room_3"]`),
outside loops over all names.
"""))

# %% [markdown]
# ## 5 · Or keep your code and wrap it: `explorer.pack`
#
# Rewriting the step group-wise is not always possible: the code may be generated per name, the
# formulas may differ by name, or there may simply be a lot of it. `explorer.pack(step,
# *example_args)` keeps `step_dict` exactly as written above. It traces the step once, groups the
# equations that compute the same formula on different names (here every room: the two end rooms
# read the outside temperature where the others read a neighbour, and pack reads that operand as
# a constant beside a slice), and emits one vector operation per group. The packed step
# takes and returns stacked arrays (leaves in `jax.tree_util.tree_leaves` order, dict keys
# sorted), which you stack once with NumPy, outside any trace: a jitted function that receives
# N scalars and stacks them inside still compiles slowly.

# %%
initial_dict = {name: series[0] for name, series in observed_dict.items()}
packed_step = explorer.pack(step_dict, initial_dict, conductance_dict)
x0_packed, conductance_packed = packed_step.pack_args(initial_dict, conductance_dict)
# The observed trajectory in the same leaf order: one column per room, (HORIZON, N_ROOMS).
observed_packed = np.stack(jax.tree_util.tree_leaves(observed_dict), axis=1)


def loss_packed(observed, conductance):
    # The packed step's own loop: its lane layout is applied once before the scan and undone
    # once after it (a scan of `packed_step(...)` would reorder the lanes in every step).
    predicted = packed_step.rollout(observed[0], conductance, length=HORIZON)
    return jnp.sum((observed - predicted) ** 2)


print(packed_step.report)

# %%
if not SERVED:
    # Same numbers first: the packed loss and gradient are the dict's.
    value_d, grad_d = jax.jit(jax.value_and_grad(loss_dict, argnums=1))(observed_dict, conductance_dict)
    value_p, grad_p = jax.jit(jax.value_and_grad(loss_packed, argnums=1))(observed_packed,
                                                                          conductance_packed)
    assert np.allclose(float(value_p), float(value_d), rtol=1e-5)
    assert np.allclose(np.asarray(grad_p), np.stack(jax.tree_util.tree_leaves(grad_d)),
                       rtol=1e-4, atol=1e-2)

    m_packed = explorer.measure(jax.grad(loss_packed, argnums=1), observed_packed,
                                conductance_packed, name="packed")
    assert m_packed.cold
    d = adopt[(adopt["target"] == "grad")].set_index("version").loc["dict"]
    assert m_packed.n_leaves == 2 and m_packed.jaxpr_eqns * 2 < d["jaxpr eqns"]
    ratio = d["total compile s"] / m_packed.total_compile_s
    verdict = (f"the dict version takes {ratio:.1f}× as long" if ratio >= 1.2 else
               f"about the same as the dict version ({ratio:.2f}×) at this small N: the saving "
               f"grows with N, measure it at your size")
    display(Markdown(f"""
Gradient, N = {N_ROOMS}, the same code as the dict version: {packed_step.report.eqns_before}
equations in one step became {packed_step.report.eqns_after} vector operations in
{packed_step.report.packs} packs. The whole gradient has {m_packed.n_leaves} array leaves and
{m_packed.jaxpr_eqns} equations (dict: {d['array leaves']} and {d['jaxpr eqns']}) and compiles in
{m_packed.total_compile_s:.2f} s; {verdict}.

`pack` or `NamedArray`? `NamedArray` for code you write (or are willing to rewrite) group-wise:
its program is the array one and nothing is traced twice. `pack` for per-name code you keep: it
costs one extra trace of the step, and its program stays the same size as N grows as long as the
number of distinct formulas does. Anything it cannot vectorise is evaluated name by name, with
the same numbers, and listed in `packed_step.report`.
"""))

# %% [markdown]
# ### 5b · Or wrap the whole loss: `explorer.jit`
#
# `pack` wants a step outside the loop. `explorer.jit` takes the function as you call it, here
# `loss_dict` above with its `lax.scan` inside and `jax.value_and_grad` around it, and is used as
# `jax.jit` is: it traces the function on the arguments' structure, packs the whole program
# (scan carries included) and stacks the dicts' leaves with NumPy on each call, outside any
# trace. The gradient comes back as a dict, keyed like `conductance_dict`.

# %%
loss_and_grad_jit = explorer.jit(jax.value_and_grad(loss_dict, argnums=1))
value_j, grad_j = loss_and_grad_jit(observed_dict, conductance_dict)
print(loss_and_grad_jit.report)

# %%
if not SERVED:
    # Same numbers as jax.jit of the same function.
    value_d, grad_d = jax.jit(jax.value_and_grad(loss_dict, argnums=1))(observed_dict, conductance_dict)
    assert np.allclose(float(value_j), float(value_d), rtol=1e-5)
    assert set(grad_j) == set(grad_d)
    assert all(np.allclose(grad_j[k], grad_d[k], rtol=1e-4, atol=1e-2) for k in grad_d)

    # Its packed program, measured cold like any function (the arguments it stacks).
    program, stacked = loss_and_grad_jit.packed_function(observed_dict, conductance_dict)
    m_jit = explorer.measure(program, *stacked, name="explorer.jit")
    assert m_jit.cold
    d = adopt[(adopt["target"] == "grad")].set_index("version").loc["dict"]
    report = loss_and_grad_jit.report
    assert report.eqns_after * 2 < report.eqns_before
    display(Markdown(f"""
Loss and gradient of `loss_dict` as written, N = {N_ROOMS}: {report.eqns_before} equations
traced, {report.eqns_after} after packing; {m_jit.n_leaves} array leaves, compiled in
{m_jit.total_compile_s:.2f} s (the dict version under `jax.jit`: {d['total compile s']:.2f} s,
{d['array leaves']} leaves). Anything it cannot vectorise is evaluated name by name with the
same numbers, and listed in `.report`; `explorer.blame(loss_and_grad_jit, ...)` charges the
packed program's equations to the lines above.
"""))

# %% [markdown]
# ## 6 · The dashboard
#
# Everything above, and more, interactively: pick a problem, representations and sizes, sweep
# in the background, compare programs, read equation blame. It reads the same results store as
# these notebooks, so the measurements above are already there. Served as an app
# (`panel serve notebooks/03_remedies.ipynb --address 127.0.0.1`), this is the page you get.

# %%
if SERVED:
    # As an app: the dashboard's defaults, which show the example sweep shipped with the
    # package until something is measured.
    dashboard = explorer.dashboard()
else:
    # In the notebook: open it on this notebook's problem and representations.
    print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s before the dashboard")
    dashboard = explorer.dashboard(problem=PROBLEM,
                                   representations=["dict", "ravel", "struct", "named", "array"])
dashboard.servable(title="PyTree Compile Explorer")
