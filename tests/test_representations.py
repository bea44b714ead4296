"""Problems, NamedArray and the eight representations: same numbers, different shapes."""

import functools

import jax
import numpy as np
import pytest

from explorer import NamedArray, build_case, get_problem, representations
from explorer.testing import MAX_HORIZON, MAX_N_STATES, REPRESENTATIONS

PROBLEMS = ("decay", "oscillator", "lotka_volterra")
# Twelve: names with two digits (state_10 sorts before state_2 as text), so that a representation
# that puts its leaves in another order than the names' is caught mapping them back.
N, HORIZON = 12, 12


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














# -- representations ------------------------------------------------------------


def test_representation_registry():
    assert REPRESENTATIONS == ("dict", "array", "unflatten", "ravel", "module", "struct",
                               "named", "packed", "jit")
    described = representations()
    assert tuple(described) == REPRESENTATIONS
    assert all(d and "\n" not in d for d in described.values())


@pytest.mark.parametrize("representation", REPRESENTATIONS)
@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.slow
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


@pytest.mark.parametrize("representation", ["dict", "module", "named", "packed", "jit"])
def test_single_unit_oscillator_matches_array(representation):
    ref_loss, ref_grad, ref_rollout = reference("oscillator", 1, 15)
    case = build_case("oscillator", representation, 1, 15)
    loss, grad = case.evaluate()
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert_close(grad, ref_grad)
    assert_close(case.rollout(), ref_rollout)


@pytest.mark.parametrize("representation", REPRESENTATIONS)
def test_one_state_matches_array(representation):
    """N=1 of decay: one state and one parameter, so every group of leaves is one leaf (the
    jit representation's rollout once failed there with an IndexError, in the example sweep)."""
    ref_loss, ref_grad, ref_rollout = reference("decay", 1, 7)
    case = build_case("decay", representation, 1, 7)
    loss, grad = case.evaluate()
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert grad.shape == (1,)
    assert_close(grad, ref_grad)
    assert case.rollout().shape == (7, 1)
    assert_close(case.rollout(), ref_rollout)


@pytest.mark.parametrize("problem,n,expected", [
    ("decay", 5, {"dict": 10, "array": 2, "unflatten": 2, "ravel": 10, "module": 2,
                  "struct": 2, "named": 2, "packed": 2, "jit": 2}),
    ("oscillator", 5, {"dict": 20, "array": 2, "unflatten": 2, "ravel": 20, "module": 4,
                       "struct": 4, "named": 2, "packed": 2, "jit": 2}),
])
def test_leaf_counts(problem, n, expected):
    counts = {r: build_case(problem, r, n, 4).n_leaves for r in REPRESENTATIONS}
    assert counts == expected


@pytest.mark.slow
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
@pytest.mark.slow
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
     "module, struct, named, packed, jit"),
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
















