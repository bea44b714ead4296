"""measure / blame / diagnose on real libraries' code, as their users write it: a diffrax solve,
an optax training step, an eqx.filter_jit step over an eqx.nn.MLP, a flax nnx.jit step.

The findings and blame lines must name this file's lines (the user's), with the library lines
shown under them; a remedy only where the user can apply it. Small sizes: the libraries' own
machinery (diffrax's solver loop, optax's transforms) dominates the programs.
"""

from __future__ import annotations

import html
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import explorer

diffrax = pytest.importorskip("diffrax")
optax = pytest.importorskip("optax")
eqx = pytest.importorskip("equinox")

N = 6


def line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


# -- diffrax: a per-name heat chain through diffeqsolve ---------------------------------------


def vector_field(t, y, k):
    return {f"T{i}": k * ((y[f"T{i - 1}"] if i else 0.0) - 2.0 * y[f"T{i}"]  # heat line
                          + (y[f"T{i + 1}"] if i < N - 1 else 0.0)) for i in range(N)}


def heat_loss(k, y0, solver=None):
    sol = diffrax.diffeqsolve(  # solve line
        diffrax.ODETerm(vector_field), solver or diffrax.Euler(), 0.0, 1.0, 0.25, y0, args=k,
        saveat=diffrax.SaveAt(t1=True), max_steps=4)
    return sum(jnp.sum(v) for v in sol.ys.values())


def heat_y0():
    return {f"T{i}": jnp.float32(i / N) for i in range(N)}


SOLVE_LINE = line_of(heat_loss, "# solve line")
HEAT_LINE = line_of(vector_field, "# heat line")


def test_diffrax_findings_and_blame_name_the_users_lines_not_the_librarys():
    d = explorer.diagnose(jax.grad(heat_loss), jnp.float32(0.5), heat_y0(), compile=False,
                          min_repeats=N + 1, min_chain=10, try_pack=False)
    assert d.name == "jax.grad(heat_loss)"
    assert d.findings and all(f.where.startswith(f"{__file__}:") for f in d.findings), d
    # diffrax's own fixed loops (its stages, its while loop's bookkeeping) are not the user's
    assert "unrolled-loop" not in d.kinds and "large-unroll" not in d.kinds
    library = [f for f in d.findings if f.via is not None]
    assert library and library[0].where == f"{__file__}:{SOLVE_LINE}"
    assert library[0].via.startswith(("equinox/", "diffrax/"))
    assert "one array" in library[0].remedy and "explorer.pack(step" not in library[0].remedy
    own = [f for f in d.findings if f.via is None]
    assert [f.where for f in own] == [f"{__file__}:{HEAT_LINE}"]
    top = d.top_lines.head(2)
    assert list(top["file"]) == [__file__, __file__]
    assert list(top["line"]) == [SOLVE_LINE, HEAT_LINE]
    assert "equinox/" in top.iloc[0]["via"] or "diffrax/" in top.iloc[0]["via"]
    assert "heat_loss" in str(d) and "site-packages" not in d.findings[0].message
    page = d._repr_html_()
    assert f"{__file__}:{SOLVE_LINE} (through {library[0].via})" in html.unescape(page)
    table = explorer.blame(jax.grad(heat_loss), jnp.float32(0.5), heat_y0())
    assert list(table.head(2)["line"]) == [SOLVE_LINE, HEAT_LINE]
    assert table["eqns"].sum() == d.jaxpr_eqns


def test_diffrax_pack_trial_is_skipped_with_its_reason_where_the_repetition_is_the_librarys(
        monkeypatch):
    """explorer.pack only rewrites the user's step: for a library's repetition it is not tried,
    and the solve never runs op by op."""
    from explorer.testing import diagnose_trial as trial_module

    monkeypatch.setattr(trial_module, "rewrite", trial_module._pack_rewrite)
    monkeypatch.setattr(trial_module, "REWRITE_NAME", "explorer.pack")
    monkeypatch.setattr(trial_module, "REWRITES_LIBRARY_CODE", False)
    d = explorer.diagnose(jax.grad(heat_loss), jnp.float32(0.5), heat_y0(), compile=False,
                          min_repeats=3 * N)  # only the library's repetition is a finding
    assert [f.via is not None for f in d.findings if f.kind == "per-leaf-repetition"] == [True]
    trial = d.pack_trial
    assert trial.status == "not tried" and trial.elapsed_s < 1
    assert "inside equinox's code" in trial.reason or "inside diffrax's code" in trial.reason
    assert "could not be tried" in d.findings[0].saving


def test_a_trial_past_its_budget_is_not_started(monkeypatch):
    from explorer.testing import diagnose_trial as trial_module

    monkeypatch.setattr(trial_module, "BUDGET_S", 0.01)
    d = explorer.diagnose(jax.grad(heat_loss), jnp.float32(0.5), heat_y0(), compile=False,
                          min_repeats=N + 1)
    assert d.pack_trial.status == "not tried" and d.pack_trial.elapsed_s < 1
    assert "past its 0 s budget" in d.pack_trial.reason


@pytest.mark.slow
def test_explorer_jit_on_a_diffrax_solve_is_checked_and_stays_within_its_budget():
    from explorer.testing import diagnose_trial as trial_module

    d = explorer.diagnose(jax.grad(heat_loss), jnp.float32(0.5), heat_y0(), compile=False,
                          min_repeats=N + 1)
    trial = d.pack_trial
    assert trial.rewrite == "explorer.jit"
    assert trial.elapsed_s < 1.5 * trial_module.BUDGET_S
    if trial.status == "measured":  # outputs checked equal; equations exact
        assert trial.eqns_after < 0.9 * trial.eqns_before
    else:
        assert trial.status in ("not tried", "no gain") and trial.reason


def kinetics_field(t, y, rates):
    names = list(y)
    return {k: (rates[names[i - 1]] * y[names[i - 1]] if i else 0.0) - rates[k] * y[k]
            for i, k in enumerate(names)}


def kinetics_loss(rates, y0, data):
    sol = diffrax.diffeqsolve(diffrax.ODETerm(kinetics_field), diffrax.Tsit5(), 0.0, 1.0, 0.1,
                              y0, args=rates, saveat=diffrax.SaveAt(ts=jnp.linspace(0, 1, 4)))
    return sum(jnp.sum((sol.ys[k] - data[k]) ** 2) for k in y0)


@pytest.mark.slow
def test_explorer_jit_of_a_diffrax_gradient_gives_jax_jits_numbers():
    """A user's kinetics fit: named species, Tsit5, SaveAt(ts), the gradient with respect to
    named rates. Its packed program failed when run ('Nonconstant batch': equinox's checks
    inside the solver's loop had been merged across names)."""
    names = [f"sp{i}" for i in range(4)]
    rates = {k: jnp.float32(0.5 + 0.1 * i) for i, k in enumerate(names)}
    y0 = {k: jnp.float32(1.0 if i == 0 else 0.0) for i, k in enumerate(names)}
    data = {k: jnp.zeros(4) for k in names}
    j = explorer.jit(jax.grad(kinetics_loss))
    got, want = j(rates, y0, data), jax.jit(jax.grad(kinetics_loss))(rates, y0, data)
    for k in names:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-5,
                                   atol=1e-6)
    assert j.report.fallback is None and j.report.eqns_after < j.report.eqns_before
    # Blame charges the packed solver to the user's solve line, as in jax.jit's program: the
    # calls the packer inlined (equinox's jit and custom_vjp) hold the user's line, not their
    # equations, which had all gone to the def line (3,014 of 3,121 at N=6).
    table = explorer.blame(j, rates, y0, data)
    solve = line_of(kinetics_loss, "diffeqsolve")
    rows = table.set_index("line")["eqns"]
    assert table.iloc[0]["line"] == solve and rows[solve] > 0.8 * rows.sum(), table
    assert rows.get(line_of(kinetics_loss, "def kinetics_loss"), 0) < 0.1 * rows.sum(), table


@pytest.mark.slow
def test_diffrax_tsit5_under_grad_flags_no_loop_of_the_librarys():
    d = explorer.diagnose(jax.grad(heat_loss), jnp.float32(0.5), heat_y0(), diffrax.Tsit5(),
                          static_argnums=2, min_repeats=N + 1, min_chain=10)
    assert "unrolled-loop" not in d.kinds
    assert all(f.where.startswith(f"{__file__}:") for f in d.findings)
    assert d.pack_trial is None or d.pack_trial.status != "measured" or (
        d.pack_trial.verdict is not None or d.pack_trial.reason)


# -- optax: a training step on a dict of per-layer parameters ---------------------------------

OPT = optax.adam(1e-3)
LAYERS = 12


def mlp_loss(params, x, y):
    h = x
    for i in range(LAYERS):
        h = jnp.tanh(h * params[f"w{i}"] + params[f"b{i}"])  # layer line
    return jnp.mean((h - y) ** 2)


def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
    updates, opt_state = OPT.update(grads, opt_state, params)  # update line
    return optax.apply_updates(params, updates), opt_state, loss


def optax_args():
    params = {}
    for i in range(LAYERS):
        params[f"w{i}"] = jnp.full((4,), 0.5 + 0.01 * i)
        params[f"b{i}"] = jnp.zeros(4)
    return params, OPT.init(params), jnp.ones(4), jnp.zeros(4)


def test_optax_step_is_charged_to_the_users_update_line_via_optax():
    d = explorer.diagnose(train_step, *optax_args(), try_pack=False, min_repeats=2 * LAYERS,
                          min_chain=2 * LAYERS)
    assert d.name == "train_step" and d.compile_s is not None
    assert d.n_leaves == 2 * LAYERS * 3 + 1 + 2  # params, adam's mu and nu, its count; x, y
    update = f"{__file__}:{line_of(train_step, '# update line')}"
    rows = d.top_lines[d.top_lines["line"] == line_of(train_step, "# update line")]
    assert len(rows) == 1 and "optax/" in rows.iloc[0]["via"]
    assert set(d.top_lines["file"]) <= {__file__, "<unknown>"}, d.top_lines
    per_leaf = [f for f in d.findings if f.kind == "per-leaf-repetition"]
    assert any(f.where == update and f.via.startswith("optax/") for f in per_leaf), d
    assert "unrolled-loop" in d.kinds  # the user's own Python loop over layers is the user's
    assert all(f.where.startswith(f"{__file__}:") for f in d.findings if f.where)


# -- equinox: eqx.filter_jit over an eqx.nn.MLP (a custom_jvp activation among its leaves) --------


@eqx.filter_jit
def eqx_step(model, x, y):
    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)  # eqx loss line
    value, grads = eqx.filter_value_and_grad(loss)(model)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, eqx.filter(model, eqx.is_array),
                                  grads), value


def eqx_args():
    return eqx.nn.MLP(3, 3, 8, 2, key=jax.random.PRNGKey(0)), jnp.ones((5, 3)), jnp.zeros((5, 3))


def test_eqx_filter_jit_over_an_mlp_is_measured_blamed_and_diagnosed():
    model, x, y = eqx_args()
    arrays = len(jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)))
    m = explorer.measure(eqx_step, model, x, y, runs=1)
    assert m.n_leaves == arrays + 2 and m.cold and m.jaxpr_eqns > 0
    table = explorer.blame(eqx_step, model, x, y)
    assert table.iloc[0]["file"] == __file__ and "eqx loss line" in table.iloc[0]["code"]
    assert table["eqns"].sum() == m.jaxpr_eqns
    d = explorer.diagnose(eqx_step, model, x, y)
    assert d.name == "eqx.filter_jit(eqx_step)" and d.n_leaves == arrays + 2
    assert d.jaxpr_eqns == m.jaxpr_eqns


@pytest.mark.slow
def test_explorer_jit_of_a_module_with_functions_says_how_and_the_way_it_says_works():
    """explorer.jit, like jax.jit, takes arrays: an eqx.nn.MLP (its activation a function) is
    refused in one line that names the leaf and says what to write; written so, the numbers
    are eqx.filter_jit's."""
    model, x, y = eqx_args()

    def loss(m, x, y):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    with pytest.raises(TypeError) as refused:
        explorer.jit(eqx.filter_value_and_grad(loss))(model, x, y)
    text = str(refused.value)
    assert "\n" not in text and "m.activation" in text
    assert "eqx.partition(model, eqx.is_array)" in text
    arrays, rest = eqx.partition(model, eqx.is_array)
    j = explorer.jit(lambda a, x, y: eqx.filter_value_and_grad(loss)(eqx.combine(a, rest), x, y))
    (value, grads), (want, want_grads) = j(arrays, x, y), eqx.filter_jit(
        eqx.filter_value_and_grad(loss))(model, x, y)
    np.testing.assert_allclose(value, want, rtol=1e-6)
    for g, w in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(want_grads)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-7)


def test_held_static_leaves_compute_what_filter_jit_computes():
    from explorer.testing import hold_static

    model, x, y = eqx_args()
    call, args, static = hold_static(eqx_step, (model, x, y))
    assert static == () and call is not eqx_step
    got = jax.jit(call)(*args)
    want = eqx_step(model, x, y)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    plain = (jnp.ones(3), {"a": jnp.ones(2), "b": 1.5})
    assert hold_static(mlp_loss, plain) == (mlp_loss, plain, ())  # untouched: same numbers


# -- flax nnx: an nnx.jit step updating its model and optimizer in place ----------------------


@pytest.mark.slow
def test_nnx_jit_step_is_measured_with_its_in_place_update():
    nnx = pytest.importorskip("flax.nnx")

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.a = nnx.Linear(3, 8, rngs=rngs)
            self.b = nnx.Linear(8, 3, rngs=rngs)

        def __call__(self, x):
            return self.b(jax.nn.relu(self.a(x)))

    @nnx.jit
    def nnx_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)  # nnx update line
        return loss

    def fresh():
        model = Model(nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    x, y = jnp.ones((4, 3)), jnp.zeros((4, 3))
    model, optimizer = fresh()
    state_leaves = len(jax.tree_util.tree_leaves(nnx.state((model, optimizer))))
    m = explorer.measure(nnx_step, model, optimizer, x, y, runs=1)
    loss_only = len(jax.jit(nnx_step).trace(model, optimizer, x, y).lower().as_text())
    assert m.n_leaves == state_leaves + 2
    assert m.hlo_pre_bytes > 3 * loss_only  # the optimizer's update is in the program
    d = explorer.diagnose(nnx_step, model, optimizer, x, y, try_pack=False, compile=False)
    assert d.name == "nnx.jit(nnx_step)"
    rows = d.top_lines[d.top_lines["code"].str.contains("nnx update line")]
    assert len(rows) == 1 and "optax/" in rows.iloc[0]["via"]
    # The measured program computes what the user's call does: the same updated parameters.
    from explorer.testing import hold_static

    call, args, _ = hold_static(nnx_step, (model, optimizer, x, y))
    loss, state = jax.jit(call)(*args)
    real_model, real_opt = fresh()
    real_loss = nnx_step(real_model, real_opt, x, y)
    np.testing.assert_allclose(np.asarray(loss), np.asarray(real_loss), rtol=1e-6)
    want = jax.tree_util.tree_leaves(nnx.state((real_model, real_opt)))
    got = jax.tree_util.tree_leaves(state)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_an_nnx_jit_function_in_the_watch_is_diagnosed_on_the_users_own_call():
    """nnx.jit hands jax.jit a wrapper whose call needs flax's own context (its replay ends as
    "No update context found"): the watch diagnoses the user's own call of the nnx.jit
    function instead, finds the user's per-name line, and leaves the model as it was. Called
    with a keyword argument (which diagnose cannot pass), it is named with what to run, and
    what it says to run works."""
    nnx = pytest.importorskip("flax.nnx")

    class Named(nnx.Module):
        def __init__(self, n):
            self.ws = nnx.Dict({f"w{i}": nnx.Param(jnp.ones(3) * 0.1) for i in range(n)})

        def __call__(self, x):
            return sum(jnp.sum((w * x - 1.0) ** 2) for w in self.ws.values())  # per name

    @nnx.jit
    def value(m, x):
        return m(x)

    model, x = Named(60), jnp.linspace(0.0, 1.0, 3)
    before = [np.asarray(v) for v in jax.tree_util.tree_leaves(nnx.state(model))]
    with explorer.watch(top=0.2) as w:
        got = value(model, x)
    (f,) = [f for f in w.findings if f.name == "value"]
    where = f"{__file__}:{line_of(Named.__call__, 'per name')}"
    assert f.diagnosis is not None and f.users, f
    # One finding at that line: its `w * x` runs in flax's Param.__mul__, but the loop is the
    # user's (it had been a second finding telling the user to hand flax one array).
    (at_line,) = [x for x in f.diagnosis.findings if x.where == where]
    assert at_line.kind == "per-leaf-repetition" and "through flax/nnx/" in at_line.message
    assert where.rsplit("/", 1)[-1] + " (" in str(w)  # the line, as the report prints it
    after = jax.tree_util.tree_leaves(nnx.state(model))
    assert len(after) == len(before)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, np.asarray(b))
    np.testing.assert_allclose(np.asarray(value(model, x)), np.asarray(got), rtol=1e-6)

    with explorer.watch(top=0.2) as w:
        value(model, x=x + 1.0)
    (f,) = [f for f in w.findings if f.name == "value"]
    assert f.diagnosis is None and f.users, f
    assert "explorer.diagnose(value, *args)" in f.note and "context" not in f.note
    d = explorer.diagnose(value, model, x, try_pack=False, compile=False)
    assert "per-leaf-repetition" in {x.kind for x in d.findings if x.where == where}, d


def test_the_watch_diagnosing_an_nnx_step_leaves_its_model_and_optimizer_one_step_on():
    """The watch's diagnosis of an nnx.jit training step (its per-name loss and optax's update,
    both in place) traces the user's call again and tries explorer.jit on it: after the block
    the model and optimizer are exactly one step on, as without the watch."""
    nnx = pytest.importorskip("flax.nnx")

    class Named(nnx.Module):
        def __init__(self, n):
            self.ws = nnx.Dict({f"w{i}": nnx.Param(jnp.ones(3) * 0.1 * (i + 1))
                                for i in range(n)})

        def __call__(self, x):
            return sum(jnp.sum((w * x - 1.0) ** 2) for w in self.ws.values())  # per name

    @nnx.jit
    def train_step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: m(x))(model)
        optimizer.update(model, grads)  # optax's update, in place
        return loss

    def fresh():
        model = Named(60)
        return model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    x = jnp.linspace(0.0, 1.0, 3)
    model, optimizer = fresh()
    with explorer.watch(top=0.2) as w:
        loss = train_step(model, optimizer, x)
    (f,) = [f for f in w.findings if f.name == "train_step"]
    assert f.diagnosis is not None, f
    where = f"{__file__}:{line_of(Named.__call__, 'per name')}"
    assert "per-leaf-repetition" in {x.kind for x in f.diagnosis.findings if x.where == where}
    want_model, want_optimizer = fresh()
    np.testing.assert_array_equal(np.asarray(loss),
                                  np.asarray(train_step(want_model, want_optimizer, x)))
    got = jax.tree_util.tree_leaves(nnx.state((model, optimizer)))
    want = jax.tree_util.tree_leaves(nnx.state((want_model, want_optimizer)))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_explorer_jit_of_an_nnx_model_with_a_scan_per_sensor_runs_one_scan():
    """A flax.nnx model as a user wrote it: a dict of named sensors, each its own
    ``nnx.Linear(1, 1)`` and drift, a ``lax.scan`` per sensor in ``__call__``, the loss summed
    over names. explorer.jit of its gradient (over ``nnx.split``'s state) made a program twice
    jax.jit's size (one scan per sensor kept on its own, 3,132 → 6,232 equations in a 40-sensor
    training step); the sensors' scans now run as one, with jax.jit's numbers."""
    nnx = pytest.importorskip("flax.nnx")
    names = [f"sensor_{i}" for i in range(8)]

    class Calib(nnx.Module):
        def __init__(self, rngs):
            self.heads = nnx.Dict({k: nnx.Linear(1, 1, rngs=rngs) for k in names})
            self.drift = nnx.Dict({k: nnx.Param(jnp.array(0.01)) for k in names})

        def __call__(self, readings):
            out = {}
            for k in names:
                def step(c, r, k=k):
                    c = c + self.drift[k][...]
                    return c, self.heads[k](r[None, None] + c)[0, 0]
                _, out[k] = jax.lax.scan(step, jnp.float32(0.0), readings[k])
            return out

    graphdef, state = nnx.split(Calib(nnx.Rngs(0)))
    rng = np.random.default_rng(0)
    readings = {k: rng.normal(size=10).astype(np.float32) for k in names}

    def loss(state, readings):
        pred = nnx.merge(graphdef, state)(readings)
        return sum(jnp.mean((pred[k] - 2.0 * readings[k]) ** 2) for k in names)

    grad = jax.grad(loss)
    j = explorer.jit(grad)
    got, want = j(state, readings), jax.jit(grad)(state, readings)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
    assert [r.merged for r in j.report.regions if r.kind == "scan"] == [8, 8], str(j.report)
    assert j.report.eqns_after * 4 < j.report.eqns_before, str(j.report)


def test_an_nnx_models_recompiles_are_named_by_its_attributes_and_the_weak_type_said():
    """A flax.nnx parameter made from a Python number (``nnx.Param(jnp.array(0.01))``) is
    weakly typed; adam's first update makes it typed, the next its moments: three compiles of
    the training step. The watch named the leaves by nnx.jit's inner structure
    (``model.states[0][0]``) and called it a shape change of f32[] into f32[]; it now names the
    user's attribute and says what to write."""
    nnx = pytest.importorskip("flax.nnx")

    class Drift(nnx.Module):
        def __init__(self):
            self.drift = nnx.Dict({k: nnx.Param(jnp.array(0.01)) for k in ("a", "b")})

        def __call__(self, x):
            return sum(jnp.sum((x - v[...]) ** 2) for v in self.drift.values())

    @nnx.jit
    def train_step(model, opt, x):
        loss, grads = nnx.value_and_grad(lambda m: m(x))(model)
        opt.update(model, grads)
        return loss

    model = Drift()
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    with explorer.watch(findings=False) as w:
        for _ in range(3):
            train_step(model, opt, jnp.ones(3))
    reasons = [r.reason for r in w.compiles if r.name == "train_step"]
    assert len(reasons) == 3 and reasons[0] is None, reasons
    assert reasons[1].startswith("weak type changed: model.drift.a.value is f32[], was "
                                 "f32[]{weak_type=True} (+"), reasons
    assert reasons[1].endswith("more) (weakly typed: made from a Python number; give it a "
                               "dtype where it is made, jnp.asarray(x, jnp.float32))"), reasons
    assert reasons[2].startswith("weak type changed: opt.opt_state[0].mu['drift']['a'].value "
                                 "is f32[]"), reasons


@pytest.mark.slow
def test_explorer_jit_of_an_equinox_gru_per_channel_runs_one_scan_with_the_same_gradient():
    """An equinox model as a user wrote it: one ``eqx.nn.GRUCell`` and readout per named
    channel, each scanned over its own series, the loss's gradient over ``eqx.partition``'s
    arrays. The channels' scans (forward and transposed) run as one, with jax.jit's numbers
    (24 channels: 1,728 → 94 equations)."""
    names = [f"chan_{i}" for i in range(4)]

    class Bank(eqx.Module):
        cells: dict
        readout: dict

        def __init__(self, key):
            keys = jax.random.split(key, 2 * len(names))
            self.cells = {k: eqx.nn.GRUCell(1, 2, key=keys[i]) for i, k in enumerate(names)}
            self.readout = {k: eqx.nn.Linear(2, 1, key=keys[len(names) + i])
                            for i, k in enumerate(names)}

        def __call__(self, xs):
            out = {}
            for k in names:
                def step(h, x, k=k):
                    h = self.cells[k](x[None], h)
                    return h, self.readout[k](h)[0]
                _, out[k] = jax.lax.scan(step, jnp.zeros(2), xs[k])
            return out

    # built under one jit: eagerly, its random inits were a dozen small compiles (3 s)
    params, static = eqx.partition(eqx.filter_jit(Bank)(jax.random.PRNGKey(0)), eqx.is_array)
    rng = np.random.default_rng(0)
    xs = {k: rng.normal(size=6).astype(np.float32) for k in names}

    def loss(p, xs):
        pred = eqx.combine(p, static)(xs)
        return sum(jnp.mean((pred[k] - xs[k]) ** 2) for k in names)

    grad = jax.grad(loss)
    j = explorer.jit(grad)
    got, want = j(params, xs), jax.jit(grad)(params, xs)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
    assert [r.merged for r in j.report.regions if r.kind == "scan"] == [4, 4], str(j.report)


def _solve_each(rates, y0):
    total = 0.0
    for k in y0:               # a loop over names around a diffrax solve
        sol = diffrax.diffeqsolve(  # solve per name
            diffrax.ODETerm(lambda t, y, r: -r * y), diffrax.Tsit5(), 0.0, 1.0, 0.25, y0[k],
            args=rates[k], saveat=diffrax.SaveAt(t1=True))
        total = total + sol.ys[-1] ** 2
    return total


@pytest.mark.slow
def test_a_library_call_per_name_is_told_to_call_once_and_the_advice_works():
    """A loop over names around ``diffrax.diffeqsolve`` makes one copy of the solver's program
    per name (60 species: 53,520 of 53,820 equations). The finding said the library repeats
    "jit×1 once per leaf of the pytree it is given", counted 180 equations and told the user to
    give the library one array, which they were already doing, one name at a time. It now says
    the line calls the library once per name, counts the equations inside the calls, and says to
    call it once (jax.vmap over the names stacked), which gives the same numbers from a program
    about one name's size."""
    names = [f"sp_{i}" for i in range(3)]
    rates = {k: np.float32(0.5 + 0.1 * i) for i, k in enumerate(names)}
    y0 = {k: np.float32(1.0 + 0.1 * i) for i, k in enumerate(names)}
    d = explorer.diagnose(_solve_each, rates, y0, compile=False, min_repeats=3, try_pack=False)
    where = f"{__file__}:{line_of(_solve_each, '# solve per name')}"
    (found,) = [f for f in d.findings if f.where == where]
    assert "makes the same library call 3 times side by side" in found.message, found
    inside = int(re.search(r"the (\d+) equations in those calls", found.message).group(1))
    assert inside > 0.9 * d.jaxpr_eqns and "jax.vmap" in found.remedy, found
    assert d.findings[0] is found  # the biggest finding first

    def solve_once(rates, y0):  # the remedy, as its example writes it
        def solve(y, rate):
            return diffrax.diffeqsolve(
                diffrax.ODETerm(lambda t, y, r: -r * y), diffrax.Tsit5(), 0.0, 1.0, 0.25, y,
                args=rate, saveat=diffrax.SaveAt(t1=True)).ys
        stacked = jax.vmap(solve)(jnp.stack([y0[k] for k in names]),
                                  jnp.stack([rates[k] for k in names]))
        return jnp.sum(stacked[:, -1] ** 2)

    np.testing.assert_allclose(float(jax.jit(solve_once)(rates, y0)),
                               float(jax.jit(_solve_each)(rates, y0)), rtol=1e-6)
    after = explorer.diagnose(solve_once, rates, y0, compile=False, min_repeats=3)
    assert after.jaxpr_eqns * 2 < d.jaxpr_eqns, after     # 3 names: 2,691 -> 968
    # what is left at min_repeats=3: the stacking of the names inside jit, not the solve
    assert all("diffeqsolve" not in f.message and "library call" not in f.message
               for f in after.findings), after


@pytest.mark.slow
def test_explorer_jit_of_a_diffrax_solve_per_name_runs_the_solves_as_one_loop():
    """One ``diffrax.diffeqsolve`` per name: each solve's while loops (inside equinox's jit
    calls) are the same loop on other values, so after the calls are inlined they run as one
    loop per kind; equinox's ``error_if`` conditionals, whose branch calls back, stay one per
    name. jax.jit's numbers (60 species: 54,540 → 5,381 equations)."""
    names = [f"sp_{i}" for i in range(3)]
    rates = {k: np.float32(0.5 + 0.7 * i) for i, k in enumerate(names)}
    y0 = {k: np.float32(1.0 + 0.1 * i) for i, k in enumerate(names)}
    j = explorer.jit(_solve_each)
    np.testing.assert_allclose(float(j(rates, y0)), float(jax.jit(_solve_each)(rates, y0)),
                               rtol=1e-6)
    merged = [r.merged for r in j.report.regions if r.kind == "while"]
    assert merged and set(merged) == {3}, str(j.report)
    assert "sibling loops run as one" in str(j.report)
