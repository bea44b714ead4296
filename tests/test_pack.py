"""explorer.pack: same numbers as the unwrapped step on every path, a size-free program, and
one-line errors."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import explorer
from explorer import pack


def _check(step, state, params, *, rtol=1e-6):
    p = pack(step, state, params)
    x, theta = p.pack_args(state, params)
    got = p.unpack(p(x, theta))
    want = step(state, params)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=1e-6)
    return p


def _chain(n):
    """Neighbour coupling: s[i-1] and s[i+1], different formulas at the two ends."""
    def step(s, p):
        out = []
        for i in range(n):
            left = s[i - 1] if i > 0 else 0.0
            right = s[i + 1] if i + 1 < n else 0.0
            out.append(s[i] + p[i] * (left - 2.0 * s[i] + right))
        return out
    rng = np.random.default_rng(0)
    return step, list(rng.normal(size=n).astype(np.float32)), list(
        rng.uniform(0.1, 0.3, n).astype(np.float32))


@pytest.mark.parametrize("name", ["decay", "oscillator", "lotka_volterra"])
def test_problems_match_their_per_name_step(name):
    prob = explorer.get_problem(name)
    n = 12
    s = dict(zip(prob.state_names(n), prob.initial_state(n)))
    p = dict(zip(prob.param_names(n), prob.initial_params(n)))
    packed = _check(lambda s, p: prob.step_scalar(s, p, n), s, p)
    assert packed.report.eqns_after < packed.report.eqns_before
    assert packed.report.scalar == ()


def test_contiguous_slice_and_constant_vector():
    # Per-name constants (i + 1) become one constant vector; reads are slices.
    def step(s, p):
        return {k: s[k] * (i + 1.0) + p[k] for i, k in enumerate(sorted(s))}
    s = {f"a{i}": np.float32(i) for i in range(5)}
    p = {f"a{i}": np.float32(2 * i) for i in range(5)}
    packed = _check(step, s, p)
    assert packed.report.packs == 1
    text = str(jax.make_jaxpr(packed)(*packed.pack_args(s, p)))
    assert "slice" in text and "gather" not in text


def test_a_chains_ends_join_its_middle_and_out_of_order_keys_are_permuted_back():
    # The ends read the constant 0.0 where the middle reads s[i-1] / s[i+1]: one formula up
    # to its leaves, so one pack whose shifted reads are [0.0] + a slice, as the array
    # program's own shift: no gather, no permutation.
    step, s, p = _chain(7)
    packed = _check(step, s, p)
    assert packed.report.packs == 1 and not packed.report.permuted
    assert "gather" not in str(jax.make_jaxpr(packed)(*packed.pack_args(s, p)))
    # A state whose keys sort out of lane order needs gathers and a permutation.
    def step2(s, p):
        return {"a": s["a"] * p["a"], "b": s["b"] + p["b"], "c": s["c"] * p["c"]}
    s2 = {k: np.float32(v) for k, v in zip("abc", (1.0, 2.0, 3.0))}
    packed2 = _check(step2, s2, {k: np.float32(v) for k, v in zip("abc", (4.0, 5.0, 6.0))})
    assert packed2.report.packs == 2 and packed2.report.permuted
    assert "gather" in str(jax.make_jaxpr(packed2)(*packed2.pack_args(s2, s2)))


def test_leaves_mixed_in_many_pieces_stay_separate_packs():
    # Odd lanes read a neighbour, even lanes a constant: merging would cut that operand into
    # one piece per lane, so the two formulas stay two packs (interleaved back by stride).
    def step(s, p):
        return [s[i] * p[i] + (s[i - 1] if i % 2 else 1.0) for i in range(len(s))]
    s = list(np.linspace(-1, 1, 12, dtype=np.float32))
    packed = _check(step, s, list(np.linspace(0.5, 2, 12, dtype=np.float32)))
    assert packed.report.packs == 2 and packed.report.permuted
    text = str(jax.make_jaxpr(packed.step_in_layout)(*packed.pack_args(s, s)))
    assert "gather" not in text and text.count("concatenate") == 0


def test_mixed_formulas_are_split_and_recombined():
    def step(s, p):
        return [jnp.sin(s[i]) * p[i] if i % 3 == 0 else s[i] - p[i] ** 2 for i in range(9)]
    s = list(np.linspace(-1, 1, 9, dtype=np.float32))
    packed = _check(step, s, list(np.linspace(0.5, 2, 9, dtype=np.float32)))
    assert packed.report.packs == 2 and packed.report.permuted


def test_unknown_primitive_falls_back_leaf_by_leaf_and_is_named():
    def step(s, p):
        return {"a": jax.nn.relu(s["a"]) + jnp.where(s["b"] > 0, s["b"], p["a"]),
                "b": jnp.clip(s["b"], -1.0, 1.0) * p["b"]}
    s = {"a": np.float32(-1.0), "b": np.float32(2.0)}
    with warnings.catch_warnings():
        # the leaf-by-leaf path runs each equation as a one-equation Jaxpr; JAX >= 0.12
        # deprecates one made without a DebugInfo (jax-ml/jax#26480)
        warnings.simplefilter("error", DeprecationWarning)
        packed = _check(step, s, {"a": np.float32(3.0), "b": np.float32(4.0)})
    assert "custom_jvp_call" in packed.report.scalar
    assert packed.report.n_scalar >= 1


def test_a_primitive_whose_vmap_gives_one_value_for_the_batch_stays_name_by_name():
    """equinox's unvmap_max and unvmap_any reduce over a jax.vmap's batch, and its nonbatchable
    (allow_constant_across_batch) gives lane 0's value after a run-time check that every lane
    holds the same. Packed across names they gave other numbers, or failed when run (a diffrax
    solve's gradient under explorer.jit did: 'Nonconstant batch'). They stay name by name, in
    explorer.pack and explorer.jit alike, and the numbers are the original's."""
    eqxi = pytest.importorskip("equinox.internal")
    names = [f"x{i}" for i in range(6)]

    def step(s, p):
        return {k: s[k] * p[k] + eqxi.unvmap_max(s[k])
                + eqxi.nonbatchable(s[k], allow_constant_across_batch=True)
                + jnp.where(eqxi.unvmap_any(s[k] > 2.5), 1.0, 0.0) for k in names}

    s = {k: np.float32(i) for i, k in enumerate(names)}
    p = {k: np.float32(0.5 + i) for i, k in enumerate(names)}
    packed = _check(step, s, p)
    assert {"unvmap_max", "unvmap_any", "nonbatchable"} <= set(packed.report.scalar)
    j = explorer.jit(step)
    got, want = j(s, p), jax.jit(step)(s, p)
    for k in names:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-6)
    text = str(j.report)
    for name in ("unvmap_max", "unvmap_any", "nonbatchable"):
        assert f"lanes of {name} (its jax.vmap gives one value for the whole batch" in text, text


def test_non_scalar_leaves_stack_on_a_new_axis():
    def step(s, p):
        return {k: s[k] @ p[k] + jnp.sum(s[k]) for k in s}
    rng = np.random.default_rng(1)
    s = {k: rng.normal(size=3).astype(np.float32) for k in "xyz"}
    p = {k: rng.normal(size=(3, 3)).astype(np.float32) for k in "xyz"}
    with pytest.raises(ValueError, match=r"argument 1.*shape"):
        pack(step, s, {**p, "z": np.zeros(3, np.float32)})
    packed = _check(step, s, p, rtol=1e-5)
    assert packed.pack_args(s, p)[0].shape == (3, 3)


@pytest.mark.slow
def test_jit_grad_through_scan_and_vmap():
    step, s, p = _chain(6)
    packed = pack(step, s, p)
    x, theta = packed.pack_args(s, p)

    def loss(theta, f, x0):
        def body(c, _):
            c = f(c, theta)
            return c, c
        return jnp.sum(lax.scan(body, x0, None, length=20)[1] ** 2)

    ref = lambda th, x0: step(list(x0), list(th))  # noqa: E731
    ref_step = lambda c, th: jnp.stack(step(list(c), list(th)))  # noqa: E731
    np.testing.assert_allclose(jax.jit(loss, static_argnums=1)(theta, packed, x),
                               loss(theta, ref_step, x), rtol=1e-5)
    np.testing.assert_allclose(jax.grad(loss)(theta, packed, x),
                               jax.grad(loss)(theta, ref_step, x), rtol=1e-4, atol=1e-6)
    xs = np.stack([x, 2 * x])
    np.testing.assert_allclose(jax.vmap(packed, (0, None))(xs, theta),
                               jax.vmap(ref_step, (0, None))(xs, theta), rtol=1e-6)
    del ref


def test_equation_count_does_not_depend_on_n():
    counts = []
    for n in (10, 1000):
        step, s, p = _chain(n)
        packed = pack(step, s, p)
        counts.append(packed.report.eqns_after)
        assert packed.report.eqns_before >= 4 * n
    assert counts[0] == counts[1]


def test_bad_input_gives_one_line_errors():
    s, p = {"a": np.float32(1.0), "b": np.float32(2.0)}, {"k": np.float32(3.0)}
    cases = [
        (lambda s, p: {"a": s["a"] + p["k"]}, r"lacks leaf \['b'\]"),
        (lambda s, p: {"a": s["a"], "c": s["b"]}, r"leaf \['c'\]"),
        (lambda s, p: {k: float(v) for k, v in s.items()}, r"could not be traced"),
        (lambda s, p: {k: jnp.stack([v, v]) for k, v in s.items()}, r"leaf \['a'\] has shape"),
    ]
    for step, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            pack(step, s, p)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"argument 0 leaf \['b'\]") as info:
        pack(lambda s, p: s, {"a": np.float32(1.0), "b": np.zeros(2, np.float32)}, p)
    assert "\n" not in str(info.value)
    packed = pack(lambda s, p: {k: v * p["k"] for k, v in s.items()}, s, p)
    with pytest.raises(ValueError, match=r"argument 0 lacks leaf \['b'\]"):
        packed.pack_args({"a": np.float32(1.0)}, p)


def test_a_packed_step_can_be_jitted_and_printed_directly():
    """jit names a function by ``__name__`` (else its repr, which computes the report)."""
    import time  # noqa: PLC0415

    names = [f"x_{i}" for i in range(8)]
    state = {k: float(i) for i, k in enumerate(names)}
    p = explorer.pack(lambda s, q: {k: 0.5 * s[k] + q[k] for k in names}, state, state)
    x, theta = p.pack_args(state, state)
    started = time.perf_counter()
    out = jax.jit(p)(x, theta)
    assert time.perf_counter() - started < 5  # no recursion through repr on the way
    assert np.allclose(out, 0.5 * x + theta)
    assert "equations before" in repr(p) and p.__name__.startswith("packed_")


def _oscillator(n):
    prob = explorer.get_problem("oscillator")
    s = dict(zip(prob.state_names(n), prob.initial_state(n)))
    p = dict(zip(prob.param_names(n), prob.true_params(n)))
    return (lambda s, p: prob.step_scalar(s, p, n)), s, p


@pytest.mark.slow
def test_oscillator_reads_neighbours_as_slices_whatever_the_key_order():
    """Sorted keys put position_10 before position_2; pack lays the lanes out so that the
    step reads s[i-1], s[i+1] as slices: no gather (no scatter-add in its gradient), and the
    same program at N=10 (where sorted order is already numeric) and N=1000."""
    counts, ops = [], []
    for n in (10, 1000):
        step, s, p = _oscillator(n)
        packed = _check(step, s, p, rtol=1e-5)
        assert packed.report.relaid == (n > 10)
        x, theta = packed.to_layout(*packed.pack_args(s, p))
        assert isinstance(x, np.ndarray)           # laid out with NumPy, outside any trace
        jaxpr = jax.make_jaxpr(packed.step_in_layout)(x, theta)
        grad = jax.make_jaxpr(jax.grad(lambda t: jnp.sum(packed.step_in_layout(x, t) ** 2)))(
            theta)
        prims = {e.primitive.name for e in jaxpr.eqns} | {e.primitive.name for e in grad.eqns}
        assert not prims & {"gather", "scatter", "scatter-add", "scatter_add"}, prims
        assert "slice" in prims
        counts.append(packed.report.eqns_after)
        ops.append(sorted(e.primitive.name for e in jaxpr.eqns))
    assert counts[0] == counts[1] and ops[0] == ops[1]


def test_layout_round_trip_and_rollout_match_the_plain_loop():
    step, s, p = _oscillator(12)
    packed = pack(step, s, p)
    assert packed.report.relaid
    x, theta = packed.pack_args(s, p)
    lanes = packed.layout
    np.testing.assert_array_equal(packed.to_layout(x, theta)[0], x[lanes[0]])
    np.testing.assert_array_equal(packed.from_layout(packed.to_layout(x, theta)[0]), x)
    ys = jax.jit(functools.partial(packed.rollout, length=7))(x, theta)
    want, state = [], s
    for _ in range(7):
        want.append(jax.tree_util.tree_leaves(state))
        state = step(state, p)
    np.testing.assert_allclose(ys, np.asarray(want, np.float32), rtol=1e-5, atol=1e-6)
    # p(x, theta) still takes and returns tree_leaves order (the contract), relaid or not.
    np.testing.assert_allclose(packed(x, theta), ys[1], rtol=1e-6)


def test_strided_reads_are_strided_slices():
    # Even lanes read odd leaves: one formula, stride 2, no gather.
    def step(s, p):
        return [s[i] * p[i] + (s[i + 1] if i + 1 < len(s) else 0.0) if i % 2 == 0
                else s[i] - p[i] for i in range(len(s))]
    s = list(np.linspace(-1, 1, 10, dtype=np.float32))
    packed = _check(step, s, list(np.linspace(0.5, 2, 10, dtype=np.float32)))
    text = str(jax.make_jaxpr(packed.step_in_layout)(*packed.pack_args(s, s)))
    assert "gather" not in text.replace("scatter", "")


def _same_case(case, ref, *, grad_atol):
    """Loss, gradient and rollout of two built cases agree (``grad_atol`` times the largest
    reference gradient)."""
    (value, grad), (ref_value, ref_grad) = case.evaluate(), ref.evaluate()
    assert value == pytest.approx(ref_value, rel=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=grad_atol * np.abs(ref_grad).max())
    np.testing.assert_allclose(case.rollout(), ref.rollout(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["decay", "oscillator", "lotka_volterra"])
def test_packed_representation_matches_array_when_lanes_are_relaid(name):
    # N=12: the dicts' sorted keys (x_10, x_11 before x_2) differ from numeric order.
    n, horizon = 12, 9
    _same_case(explorer.build_case(name, "packed", n, horizon),
               explorer.build_case(name, "array", n, horizon), grad_atol=1e-5)


@pytest.mark.slow
def test_user_problem_with_relaid_lanes_matches_its_dict_program():
    """A user's per-name chain at N=12 (sorted keys: level_10 before level_2): observations
    made through pack's rollout and the packed representation equal the plain dict program."""
    def step(s, p):
        n = len(s)
        return {f"level_{i}": s[f"level_{i}"] + 0.1 * (
            (s[f"level_{i - 1}"] if i > 0 else 1.0) - p[f"leak_{i}"] * s[f"level_{i}"])
            for i in range(n)}

    prob = explorer.define_problem(
        "relaid_chain", step, state=lambda n: {f"level_{i}": 0.5 * np.cos(i) for i in range(n)},
        params=lambda n: {f"leak_{i}": 1.0 + 0.1 * i for i in range(n)})
    n, horizon = 12, 8
    obs = prob.observed(n, horizon)
    names, pnames = prob.state_names(n), prob.param_names(n)
    s, p = dict(zip(names, obs[0])), dict(zip(pnames, prob.true_params(n)))
    assert pack(step, s, p).report.relaid
    for t in range(1, horizon):
        s = step(s, p)
        np.testing.assert_allclose([float(s[k]) for k in names], obs[t], rtol=1e-5, atol=1e-6)
    _same_case(explorer.build_case(prob, "packed", n, horizon),
               explorer.build_case(prob, "dict", n, horizon), grad_atol=1e-6)


# -- a formula that lacks one term of the others ------------------------------------------------

def _missing_term(n, term, *, side="right", op="add"):
    """Every lane but the last adds ``term(s[i+1], p[i+1])`` to its own update; the last lane
    has no such term (a chain's last mass has no right-hand spring)."""
    def step(s, p):
        out = []
        for i in range(n):
            own = s[i] * p[i]
            if i + 1 < n:
                extra = term(s[i + 1], p[i + 1])
                own = ((own + extra if side == "right" else extra + own) if op == "add"
                       else own - extra)
            out.append(s[i] - 0.1 * own)
        return out
    rng = np.random.default_rng(1)
    return step, list(rng.normal(size=n).astype(np.float32)), list(
        rng.uniform(0.5, 2.0, n).astype(np.float32))


def _grads_match(packed, step, s, p):
    x, theta = packed.pack_args(s, p)
    g_packed = jax.grad(lambda t: jnp.sum(jnp.sin(packed(x, t))))(theta)
    g_step = jax.grad(lambda q: sum(jnp.sin(v) for v in jax.tree_util.tree_leaves(step(s, q))))(p)
    want = packed.pack_args(s, jax.tree_util.tree_map(np.asarray, g_step))[1]
    np.testing.assert_allclose(np.asarray(g_packed), want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("side, op", [("right", "add"), ("left", "add"), ("right", "sub")])
@pytest.mark.slow
def test_a_lane_without_a_zero_at_zero_term_joins_the_others_pack(side, op):
    # k * (x_right - 0.5 * x_right) is 0 when its reads are 0: the last lane reads it as a
    # constant 0 and joins the pack, numbers and gradient unchanged.
    step, s, p = _missing_term(8, lambda x, k: k * (x - 0.5 * x), side=side, op=op)
    packed = _check(step, s, p)
    assert packed.report.packs == 1, packed.report
    _grads_match(packed, step, s, p)


@pytest.mark.slow
def test_a_missing_term_that_is_not_zero_at_zero_stays_a_pack_of_its_own():
    # exp(x) + 1 is 2 at 0: reading it on zeros would change the last lane: not merged.
    step, s, p = _missing_term(8, lambda x, k: jnp.exp(x) + k)
    packed = _check(step, s, p)
    assert packed.report.packs == 2, packed.report
    _grads_match(packed, step, s, p)


def test_a_completed_lane_keeps_its_own_infinities_and_nans():
    step, s, p = _missing_term(6, lambda x, k: k * x)
    s[-1], s[2] = np.float32(np.inf), np.float32(np.nan)   # the last lane, and a neighbour
    p_ = pack(step, s, p)
    assert p_.report.packs == 1
    got = np.asarray(p_(*p_.pack_args(s, p)))
    want = np.asarray(step(s, p), dtype=np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.slow
def test_oscillators_last_mass_joins_the_chain():
    """Its last mass has no right-hand spring: with that term read as 0 it joins the pack, so
    positions and velocities are one pack each (the array program's zero-padded stiffness)."""
    for n in (12, 1000):
        step, s, p = _oscillator(n)
        packed = _check(step, s, p, rtol=1e-5)
        assert packed.report.packs == 2, packed.report
        if n == 12:
            _grads_match(packed, step, s, p)


# -- one computation traced twice -------------------------------------------------------------

def _flux_chain(n):
    """A conservative chain: each lane gains the flux from its right and loses the flux to its
    left, f(i) = k[i] * (s[i] - s[i-1]); every flux is traced twice (once per lane it joins),
    and the two end lanes lack one of the two terms."""
    def step(s, p):
        flux = {i: p[i] * (s[i] - s[i - 1]) for i in range(1, n)}
        out = []
        for i in range(n):
            value = s[i]
            if i + 1 < n:
                value = value + p[i + 1] * (s[i + 1] - s[i])   # = flux[i + 1], traced again
            if i > 0:
                value = value - flux[i]
            out.append(value)
        return out
    rng = np.random.default_rng(2)
    return step, list(rng.normal(size=n).astype(np.float32)), list(
        rng.uniform(0.1, 0.4, n).astype(np.float32))


@pytest.mark.slow
def test_a_term_traced_twice_is_computed_once_and_read_shifted():
    for n in (9, 400):
        step, s, p = _flux_chain(n)
        packed = _check(step, s, p, rtol=1e-5)
        _grads_match(packed, step, s, p)
        assert packed.report.packs == 1, packed.report
        jaxpr = jax.make_jaxpr(packed.step_in_layout)(*packed.pack_args(s, p))
        vector_muls = [e for e in jaxpr.eqns if e.primitive.name == "mul"
                       and e.outvars[0].aval.ndim and e.outvars[0].aval.shape[0] >= n - 1]
        assert len(vector_muls) == 1, jaxpr   # the fluxes, once; the other lanes slice them


def test_lanes_reused_out_of_order_are_computed_again():
    # b_i reads t at a scrambled lane: more pieces than a slice or three; computed afresh.
    n, perm = 8, [3, 0, 6, 1, 7, 2, 5, 4]

    def step(s, p):
        t = [s[f"a{i}"] * p[f"a{i}"] for i in range(n)]
        return {**{f"a{i}": t[i] for i in range(n)},
                **{f"b{i}": s[f"b{i}"] + s[f"a{perm[i]}"] * p[f"a{perm[i]}"] for i in range(n)}}

    rng = np.random.default_rng(3)
    keys = [f"a{i}" for i in range(n)] + [f"b{i}" for i in range(n)]
    s = {k: np.float32(v) for k, v in zip(keys, rng.normal(size=2 * n))}
    p = {k: np.float32(v) for k, v in zip(keys, rng.uniform(0.5, 2, 2 * n))}
    packed = _check(step, s, p)
    _grads_match(packed, step, s, p)


# -- like=: any argument order, outputs of any structure, leaves of several shapes ----------

def test_like_packs_mixed_shapes_and_keeps_the_numbers():
    rng = np.random.default_rng(4)
    s = {f"b{i}": {"angle": np.float32(rng.normal()), "pos": rng.normal(size=3).astype(np.float32)}
         for i in range(6)}
    p = {f"b{i}": np.float32(rng.uniform(0.1, 0.5)) for i in range(6)}

    def step(s, p):
        return {k: {"angle": v["angle"] * p[k], "pos": v["pos"] + jnp.sin(v["angle"])}
                for k, v in s.items()}

    with pytest.raises(ValueError, match="like=0"):
        pack(step, s, p)
    f = pack(step, s, p, like=0)
    x, theta = f.pack_args(s, p)
    assert [a.shape for a in x] == [(6,), (6, 3)] and theta.shape == (6,)
    out = jax.jit(f)(x, theta)                     # plain JAX on stacked arrays
    assert [a.shape for a in out] == [(6,), (6, 3)]
    got = f.unpack(out)
    want = step(s, p)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_like_none_packs_a_scalar_loss_and_its_gradient():
    step, s, p = _chain(12)

    def loss(p, s):
        return sum(v ** 2 for v in step(s, p))

    f = pack(loss, p, s, like=None)
    theta, x = f.pack_args(p, s)
    np.testing.assert_allclose(f(theta, x), loss(p, s), rtol=1e-5)
    g = jax.grad(f)(theta, x)
    np.testing.assert_allclose(g, jnp.stack(jax.grad(loss)(p, s)), rtol=1e-4, atol=1e-6)
    assert f.report.eqns_after < f.report.eqns_before


def test_a_diffrax_vector_field_packs_and_its_packed_state_goes_to_diffeqsolve():
    diffrax = pytest.importorskip("diffrax")
    n = 8
    names = [f"T_{i}" for i in range(n)]

    def field(t, y, args):            # heat along a chain of names, the state second
        out = {}
        for i, k in enumerate(names):
            left = y[names[i - 1]] if i else 0.0
            right = y[names[i + 1]] if i + 1 < n else 0.0
            out[k] = args["k"] * (left - 2 * y[k] + right) + 0.01 * t
        return out

    y0 = {k: np.float32(np.sin(i)) for i, k in enumerate(names)}
    args = {"k": np.float32(0.3)}
    f = pack(field, np.float32(0.0), y0, args, like=1)
    _, y0_packed, args_packed = f.pack_args(np.float32(0.0), y0, args)
    assert y0_packed.shape == (n,)

    def solve(vf, y):
        return diffrax.diffeqsolve(diffrax.ODETerm(vf), diffrax.Tsit5(), 0.0, 1.0, 0.1, y,
                                   args=args_packed if vf is f else args).ys

    got = f.unpack(solve(f, y0_packed)[-1])
    want = solve(field, y0)
    for k in names:
        np.testing.assert_allclose(got[k], want[k][-1], rtol=1e-5, atol=1e-6)


def test_the_report_says_one_pack_not_one_packs():
    import jax.numpy as jnp  # noqa: PLC0415

    import explorer  # noqa: PLC0415

    state = {f"x_{i}": jnp.float32(i) for i in range(4)}
    p = explorer.pack(lambda s, k: {n: 0.5 * v + k for n, v in s.items()}, state, jnp.float32(1))
    assert p.report.packs == 1
    assert "1 pack," in str(p.report) or str(p.report).rstrip().endswith("1 pack")
    assert "1 packs" not in str(p.report)
