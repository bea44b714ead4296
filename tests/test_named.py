"""NamedArray: one pytree leaf, read by name through static slices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from explorer import NamedArray


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


def test_named_array_refuses_impossible_sizes_and_out_of_range_rows():
    with pytest.raises(ValueError, match="fits no device"):
        NamedArray.zeros({"a": 10**12})
    x = NamedArray.zeros({"a": 2}, shape=(2,))
    assert x[1].data.shape == (2,) and x[-2].data.shape == (2,)
    with pytest.raises(IndexError, match="out of range for axis 0 of size 2"):
        x[5]  # JAX would clamp to the last row
    with pytest.raises(IndexError, match="out of range"):
        x[-3]
