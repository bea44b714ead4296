"""Bad input to the library is refused in one line before any work: the caps a sweep puts on
``repeats`` and ``runs`` hold for :func:`explorer.measure` too, and the records and stores a
user builds by hand name what is wrong instead of raising from deep inside JAX or SQLite."""

from __future__ import annotations

import numpy as np
import pytest
from _support import one_line

import explorer
from explorer.testing import validate as v


def _never_called(x):
    raise AssertionError("measure traced the function before checking its arguments")


@pytest.mark.parametrize("option, value, cap", [("repeats", 10**6, v.MAX_REPEATS),
                                                ("runs", 10**9, v.MAX_RUNS),
                                                ("repeats", 0, v.MAX_REPEATS),
                                                ("runs", 2.5, v.MAX_RUNS)])
def test_measure_caps_repeats_and_runs_as_a_sweep_does(option, value, cap):
    with pytest.raises(ValueError) as err:
        explorer.measure(_never_called, 1.0, **{option: value})
    text = one_line(str(err.value))
    assert text.startswith(f"{option} must be an integer between 1 and {cap}")
    assert repr(value) in text
    with pytest.raises(ValueError, match=f"{option} must be an integer between 1 and {cap}"):
        explorer.Spec("decay", "dict", 3, 5, "loss", **{option: value}).validated()


@pytest.mark.parametrize("groups, words", [
    ({}, "needs at least one group"),
    ({"position": np.zeros(3), "velocity": np.zeros((2, 3))},
     "groups must have the same leading axes"),
    ({"position": np.zeros((4, 3)), "velocity": np.zeros((2, 3))},
     "groups must have the same leading axes"),
    ({"position": "abc"}, "group 'position' is not an array of numbers"),
])
def test_named_array_from_bad_groups_is_one_line(groups, words):
    with pytest.raises(ValueError) as err:
        explorer.NamedArray.from_groups(groups)
    assert words in one_line(str(err.value))


def test_named_array_from_groups_still_concatenates():
    x = explorer.NamedArray.from_groups({"a": np.zeros((5, 2)), "b": np.ones((5, 3))})
    assert x.layout == (("a", 2), ("b", 3)) and x.data.shape == (5, 5)


@pytest.mark.parametrize("kwargs, words", [
    ({"targets": 3}, "target must be one name or a list of names"),
    ({"representations": 7}, "representation must be one name or a list of names"),
])
def test_sweep_names_that_are_not_names_are_one_line(kwargs, words):
    with pytest.raises(ValueError) as err:
        explorer.sweep("decay", **{"representations": ["dict"], **kwargs}, n_states=[2],
                       store=False)
    assert words in one_line(str(err.value))
    assert repr(next(iter(kwargs.values()))) in str(err.value)


@pytest.mark.parametrize("value", ["x", -1, 2.5, True])
def test_compare_max_diff_lines_is_checked(value):
    import jax.numpy as jnp  # noqa: PLC0415

    with pytest.raises(ValueError) as err:
        explorer.compare(jnp.sin, (jnp.ones(2),), jnp.cos, (jnp.ones(2),), max_diff_lines=value)
    assert one_line(str(err.value)).startswith("max_diff_lines must be an integer between 0 and")


@pytest.mark.parametrize("length", [-1, 2.5, "3", True, 0])
def test_a_packed_rollout_length_must_be_a_whole_number_of_steps(length):
    """``rollout(length=-1)`` raised from inside ``lax.scan``; ``length=2.5`` was cut to 2."""
    def step(s, p):
        return {k: 0.9 * s[k] + p[k] for k in s}

    s = {"a": np.float32(1.0), "b": np.float32(2.0)}
    packed = explorer.pack(step, s, s)
    x, theta = packed.pack_args(s, s)
    assert packed.rollout(x, theta, length=3).shape == (3, 2)
    with pytest.raises(ValueError) as err:
        packed.rollout(x, theta, length=length)
    assert one_line(str(err.value)).startswith("length must be an integer between 1 and")
