"""Problems, NamedArray and the seven representations: same numbers, different shapes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from explorer._named import NamedArray
from explorer._problems import get_problem, problems
from explorer._representations import (
    MAX_HORIZON,
    MAX_N_STATES,
    REPRESENTATIONS,
    build_case,
    representations,
)

PROBLEMS = ("decay", "oscillator", "lotka_volterra")
N, HORIZON = 3, 12


@functools.lru_cache(maxsize=None)
def reference(problem, n=N, horizon=HORIZON):
    case = build_case(problem, "array", n, horizon)
    loss, grad = case.evaluate()
    return loss, grad, case.rollout()


def assert_close(actual, expected, rtol=1e-5):
    actual, expected = np.asarray(actual), np.asarray(expected)
    atol = rtol * max(float(np.max(np.abs(expected))), 1e-30)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


# -- problems -----------------------------------------------------------------


def test_problem_registry_order_and_names():
    assert list(problems()) == list(PROBLEMS)
    assert get_problem("decay").state_names(3) == ("state_0", "state_1", "state_2")
    assert get_problem("decay").param_names(2) == ("p_0", "p_1")
    assert get_problem("oscillator").state_names(2) == (
        "position_0", "position_1", "velocity_0", "velocity_1")
    assert get_problem("lotka_volterra").param_names(1) == ("growth_0", "death_0")
    for p in problems().values():
        assert p.description.endswith(".") and "\n" not in p.description


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("n", [1, 4])
def test_three_dynamics_forms_agree(problem, n):
    p = get_problem(problem)
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, p.state_size(n)).astype(np.float32)
    theta = rng.uniform(0.5, 1.5, p.param_size(n)).astype(np.float32)
    names, pnames = p.state_names(n), p.param_names(n)

    vector = np.asarray(p.step_vector(jnp.asarray(x), jnp.asarray(theta), n))
    scalar = p.step_scalar(dict(zip(names, x)), dict(zip(pnames, theta)), n)
    assert tuple(scalar) == names
    grouped = p.step_grouped(
        {g: x[k * n:(k + 1) * n] for k, g in enumerate(p.groups)},
        {g: theta[k * n:(k + 1) * n] for k, g in enumerate(p.param_groups)})
    assert tuple(grouped) == p.groups

    assert vector.shape == (p.state_size(n),)
    assert not np.allclose(vector, x)           # the step does something
    assert_close([scalar[name] for name in names], vector)
    assert_close(np.concatenate([grouped[g] for g in p.groups]), vector)


def test_oscillator_chain_coupling():
    # Only mass 1 displaced: its springs pull mass 0 and mass 2 towards it.
    p = get_problem("oscillator")
    x = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0], np.float32)
    theta = np.array([1.0, 2.0, 3.0, 0.0, 0.0, 0.0], np.float32)
    new = np.asarray(p.step_vector(x, theta, 3))
    dt = p.dt
    force = np.array([2.0 * 1.0, -2.0 * 1.0 - 3.0 * 1.0, 3.0 * 1.0])
    assert_close(new[3:], dt * force)
    assert_close(new[:3], x[:3] + dt * dt * force)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_problem_data(problem):
    p = get_problem(problem)
    obs = p.observed(4, 30)
    assert obs.shape == (30, p.state_size(4)) and obs.dtype == np.float32
    assert not obs.flags.writeable
    np.testing.assert_array_equal(obs[0], p.initial_state(4))
    step = np.asarray(p.step_vector(jnp.asarray(obs[0]), jnp.asarray(p.true_params(4)), 4))
    assert_close(obs[1], step)
    for arr in (p.initial_state(4), p.true_params(4), p.initial_params(4)):
        assert arr.dtype == np.float32
    assert not np.allclose(p.true_params(4), p.initial_params(4))
    # Closed forms: unit i gets the same values whatever N is.
    for k in range(len(p.groups)):
        np.testing.assert_array_equal(p.initial_state(6)[6 * k:6 * k + 4],
                                      p.initial_state(4)[4 * k:4 * k + 4])
    for k in range(len(p.param_groups)):
        np.testing.assert_array_equal(p.true_params(6)[6 * k:6 * k + 4],
                                      p.true_params(4)[4 * k:4 * k + 4])


@pytest.mark.parametrize("problem", PROBLEMS)
def test_long_horizon_stays_finite_and_bounded(problem):
    obs = get_problem(problem).observed(5, 3000)
    assert np.isfinite(obs).all()
    assert np.abs(obs).max() < 10
    if problem == "lotka_volterra":
        assert obs.min() > 0


def test_unknown_problem_message():
    with pytest.raises(ValueError) as info:
        get_problem("pendulum")
    assert str(info.value) == (
        "unknown problem 'pendulum'; choose one of: decay, oscillator, lotka_volterra")


# -- representations ------------------------------------------------------------


def test_representation_registry():
    assert REPRESENTATIONS == ("dict", "array", "unflatten", "ravel", "module", "struct",
                               "named")
    described = representations()
    assert tuple(described) == REPRESENTATIONS
    assert all(d and "\n" not in d for d in described.values())


@pytest.mark.parametrize("representation", REPRESENTATIONS)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_representation_matches_array(problem, representation):
    ref_loss, ref_grad, ref_rollout = reference(problem)
    case = build_case(problem, representation, N, HORIZON)
    loss, grad = case.evaluate()
    rollout = case.rollout()

    p = get_problem(problem)
    assert grad.shape == (p.param_size(N),) and grad.dtype == np.float32
    assert rollout.shape == (HORIZON, p.state_size(N))
    assert ref_loss > 0 and np.abs(ref_grad).max() > 0
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert_close(grad, ref_grad)
    assert_close(rollout, ref_rollout)
    np.testing.assert_array_equal(rollout[0], p.observed(N, HORIZON)[0])
    assert case.state_names == p.state_names(N)
    assert case.param_names == p.param_names(N)


@pytest.mark.parametrize("representation", ["dict", "module", "named"])
def test_single_unit_oscillator_matches_array(representation):
    ref_loss, ref_grad, ref_rollout = reference("oscillator", 1, 15)
    case = build_case("oscillator", representation, 1, 15)
    loss, grad = case.evaluate()
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert_close(grad, ref_grad)
    assert_close(case.rollout(), ref_rollout)


@pytest.mark.parametrize("problem,n,expected", [
    ("decay", 5, {"dict": 10, "array": 2, "unflatten": 2, "ravel": 10, "module": 2,
                  "struct": 2, "named": 2}),
    ("oscillator", 5, {"dict": 20, "array": 2, "unflatten": 2, "ravel": 20, "module": 4,
                       "struct": 4, "named": 2}),
])
def test_leaf_counts(problem, n, expected):
    counts = {r: build_case(problem, r, n, 4).n_leaves for r in REPRESENTATIONS}
    assert counts == expected


def test_loss_and_grad_functions():
    case = build_case("oscillator", "named", 3, 5)
    loss_fn = case.function("loss")
    assert case.function() is loss_fn
    grad_fn = case.function("grad")
    assert loss_fn.__name__ == "loss_named" and grad_fn.__name__ == "grad_named"
    grad = grad_fn(*case.args)
    assert isinstance(grad, NamedArray) and grad.layout == case.args[1].layout
    np.testing.assert_allclose(np.asarray(grad.data), case.evaluate()[1], rtol=1e-5)
    text = jax.jit(grad_fn).lower(*case.args).as_text()
    assert "jit_grad_named" in text.splitlines()[0]
    with pytest.raises(ValueError, match=r"^unknown target 'hessian'; choose one of: loss, grad$"):
        case.function("hessian")


@pytest.mark.parametrize("representation", ["array", "dict", "named"])
def test_unroll_gives_same_numbers(representation):
    base = build_case("lotka_volterra", representation, 3, 13)
    unrolled = build_case("lotka_volterra", representation, 3, 13, unroll=4)
    assert unrolled.unroll == 4
    loss, grad = unrolled.evaluate()
    ref_loss, ref_grad = base.evaluate()
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert_close(grad, ref_grad)
    assert_close(unrolled.rollout(), base.rollout())


def test_named_program_stays_array_sized():
    # The point of NamedArray: its program is the size of the array program, not the dict's.
    sizes = {r: len(jax.jit(build_case("decay", r, 30, 5).function()).lower(
        *build_case("decay", r, 30, 5).args).as_text()) for r in ("dict", "array", "named")}
    assert sizes["named"] < 1.2 * sizes["array"]
    assert sizes["dict"] > 5 * sizes["named"]


@pytest.mark.parametrize("args,kwargs,message", [
    (("pendulum", "array", 3, 5), {},
     "unknown problem 'pendulum'; choose one of: decay, oscillator, lotka_volterra"),
    (("decay", "pytree", 3, 5), {},
     "unknown representation 'pytree'; choose one of: dict, array, unflatten, ravel, "
     "module, struct, named"),
    (("decay", "array", 0, 5), {}, "n_states must be an integer between 1 and 10000, got 0"),
    (("decay", "array", -1, 5), {}, "n_states must be an integer between 1 and 10000, got -1"),
    (("decay", "array", 10_001, 5), {},
     "n_states must be an integer between 1 and 10000, got 10001"),
    (("decay", "array", 2.5, 5), {}, "n_states must be an integer between 1 and 10000, got 2.5"),
    (("decay", "array", "10", 5), {},
     "n_states must be an integer between 1 and 10000, got '10'"),
    (("decay", "array", True, 5), {},
     "n_states must be an integer between 1 and 10000, got True"),
    (("decay", "array", 3, 0), {}, "horizon must be an integer between 1 and 100000, got 0"),
    (("decay", "array", 3, 100_001), {},
     "horizon must be an integer between 1 and 100000, got 100001"),
    (("decay", "array", 3, 5), {"unroll": 0}, "unroll must be an integer between 1 and 1000, got 0"),
    (("decay", "array", 3, 5), {"unroll": True}, "unroll must be an integer between 1 and 1000, got True"),
])
def test_bad_inputs(args, kwargs, message):
    with pytest.raises(ValueError) as info:
        build_case(*args, **kwargs)
    assert str(info.value) == message
    assert "\n" not in message


def test_limits_are_accepted():
    assert (MAX_N_STATES, MAX_HORIZON) == (10_000, 100_000)
    case = build_case("decay", "array", np.int64(2), 3, unroll=3)
    assert (case.n_states, case.horizon, case.unroll) == (2, 3, 3)
    assert type(case.n_states) is int


# -- NamedArray -------------------------------------------------------------------


def make_state():
    return NamedArray.from_groups({"position": jnp.arange(3.0), "velocity": 10 + jnp.arange(2.0)})


def test_named_array_is_one_leaf_with_static_layout():
    x = make_state()
    leaves, treedef = jax.tree_util.tree_flatten(x)
    assert len(leaves) == 1 and leaves[0] is x.data
    assert x.layout == (("position", 3), ("velocity", 2))
    assert x.groups == ("position", "velocity")
    assert x.names == ("position_0", "position_1", "position_2", "velocity_0", "velocity_1")
    assert x.shape == (5,) and len(x) == 5 and x.ndim == 1
    y = jax.tree_util.tree_unflatten(treedef, [jnp.zeros(5)])
    assert isinstance(y, NamedArray) and y.layout == x.layout
    assert "position (3)" in repr(x) and "velocity (2)" in repr(x)


def test_named_array_indexing():
    x = make_state()
    np.testing.assert_array_equal(x["position"], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(x["velocity"], [10.0, 11.0])
    assert float(x["position_2"]) == 2.0
    assert float(x["velocity_1"]) == 11.0
    assert {g: v.shape for g, v in x.to_dict().items()} == {"position": (3,), "velocity": (2,)}
    np.testing.assert_array_equal(np.asarray(x), x.data)


@pytest.mark.parametrize("key", ["speed", "position_3", "position_01", "velocity_-1",
                                 "position_"])
def test_named_array_unknown_key(key):
    with pytest.raises(KeyError) as info:
        make_state()[key]
    message = info.value.args[0]
    assert "\n" not in message and repr(key) in message
    assert "position (3), velocity (2)" in message


def test_named_array_leading_axis_indexing():
    layout = (("a", 2), ("b", 1))
    obs = NamedArray(jnp.arange(12.0).reshape(4, 3), layout)
    row = obs[1]
    assert isinstance(row, NamedArray) and row.layout == layout and row.shape == (3,)
    np.testing.assert_array_equal(row["a"], [3.0, 4.0])
    window = obs[1:3]
    assert isinstance(window, NamedArray) and window.shape == (2, 3)
    np.testing.assert_array_equal(obs["b_0"], [2.0, 5.0, 8.0, 11.0])
    np.testing.assert_array_equal(obs["a"][:, 1], [1.0, 4.0, 7.0, 10.0])
    with pytest.raises(IndexError, match="leading axes"):
        row[0]
    with pytest.raises(IndexError, match="leading axes"):
        obs[..., 0]


def test_named_array_replace_and_set():
    x = make_state()
    y = x.replace(position=jnp.array([5.0, 6.0, 7.0]), velocity_0=-1.0)
    assert isinstance(y, NamedArray) and y.layout == x.layout
    np.testing.assert_array_equal(y.data, [5.0, 6.0, 7.0, -1.0, 11.0])
    np.testing.assert_array_equal(x.data, [0.0, 1.0, 2.0, 10.0, 11.0])  # unchanged
    z = x.set("velocity", 0.0)
    np.testing.assert_array_equal(z.data, [0.0, 1.0, 2.0, 0.0, 0.0])
    with pytest.raises(KeyError):
        x.set("mass", 1.0)
    np_backed = NamedArray(np.ones(3, np.float32), {"a": 3})
    np.testing.assert_array_equal(np_backed.set("a_1", 0.0).data, [1.0, 0.0, 1.0])


def test_named_array_constructor_validation():
    with pytest.raises(ValueError, match="last axis of data must have length 3"):
        NamedArray(jnp.zeros(4), {"a": 3})
    with pytest.raises(ValueError, match="unique"):
        NamedArray(jnp.zeros(4), [("a", 2), ("a", 2)])
    with pytest.raises(ValueError, match="also the name of an element"):
        NamedArray(jnp.zeros(4), [("a", 2), ("a_1", 2)])
    zeros = NamedArray.zeros({"a": 2, "b": 3}, shape=(4,))
    assert zeros.shape == (4, 5) and zeros.layout == (("a", 2), ("b", 3))


def test_named_array_under_jit_grad_and_scan():
    x = make_state()

    @jax.jit
    def energy(state):
        return jnp.sum(state["velocity"] ** 2) + state["position_1"] ** 2

    assert float(energy(x)) == pytest.approx(10.0**2 + 11.0**2 + 1.0)
    g = jax.grad(energy)(x)
    assert isinstance(g, NamedArray) and g.layout == x.layout
    np.testing.assert_allclose(g.data, [0.0, 2.0, 0.0, 20.0, 22.0])

    def step(state, _):
        new = state.replace(position=state["position"] + 1.0)
        return new, state

    final, ys = lax.scan(step, x, None, length=4)
    assert isinstance(ys, NamedArray) and ys.shape == (4, 5) and ys.layout == x.layout
    np.testing.assert_array_equal(ys["position_0"], [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ys[0].data, x.data)
    np.testing.assert_array_equal(final["position"], [4.0, 5.0, 6.0])
    # Lookups are static slices: the traced program has no gather ops.
    jaxpr = str(jax.make_jaxpr(lambda s: s["position_2"] + s["velocity"].sum())(x))
    assert "gather" not in jaxpr and "dynamic_slice" not in jaxpr
