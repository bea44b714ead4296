"""The three problems: their three forms of the dynamics agree, and their data."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from explorer import get_problem, problems

PROBLEMS = ("decay", "oscillator", "lotka_volterra")


def assert_close(actual, expected, rtol=1e-5):
    actual, expected = np.asarray(actual), np.asarray(expected)
    atol = rtol * max(float(np.max(np.abs(expected))), 1e-30)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


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
