"""explorer.jit on per-name reads of one shared array (``x[:, i]`` for name ``i``, as a linear
model written per name reads its features, with an optax step around it): jax.jit's numbers,
one read of the array in the packed program, and a program that does not grow with the names."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import explorer
from _support import close_trees as _close
from _support import same_as_jax_jit as _same_as_jax


# -- per-name reads of one shared array: x[:, i] for name i ------------------------------------

def _optax_step(n, columns=None, take=False):
    """A linear model written per name (``params[k] * x[:, i]``) with an optax Adam step
    around it, and its arguments: x has one column per name, read in ``columns`` order."""
    optax = pytest.importorskip("optax")
    names = [f"w{i}" for i in range(n)]
    columns = list(range(n)) if columns is None else [int(c) for c in columns]
    params = {k: jnp.float32(0.1 * i) for i, k in enumerate(names)}

    def loss(params, x, y):
        pred = sum(params[k] * (jnp.take(x, c, axis=1) if take else x[:, c])
                   for c, k in zip(columns, names))
        return jnp.mean((pred - y) ** 2)

    opt = optax.adam(1e-2)

    def step(params, state, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        updates, state = opt.update(g, state, params)
        return optax.apply_updates(params, updates), state, l

    rng = np.random.RandomState(n)
    x = jnp.asarray(rng.randn(8, n), jnp.float32)
    y = jnp.asarray(rng.randn(8), jnp.float32)
    return step, (params, opt.init(params), x, y)


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_an_optax_step_reading_a_column_per_name_gives_jax_jits_numbers_and_packs(n):
    """``x[:, i]`` per name is N slices of one shared array whose starts differ lane by lane:
    one read of x (a slice of the columns, moved to the lanes), then the products, the loss's
    gradient and Adam's update pack as usual (it packed nothing: 898 -> 1146 equations at
    N=40, every slice and every Adam formula leaf by leaf)."""
    step, args = _optax_step(n)
    j = _same_as_jax(step, *args)
    r = j.report
    assert r.fallback is None
    if n >= 7:             # (with 1 or 2 names, a few one-lane values are listed too)
        assert r.leaf_by_leaf == ()
    if n == 40:
        assert r.eqns_after * 10 < r.eqns_before
        assert "gather" not in j.lower(*args).as_text()    # consecutive columns: a slice
        _close(j(*args), jax.jit(step)(*args))              # the cached entry, again


@pytest.mark.parametrize("order", ["reversed", "permuted", "every_other"])
def test_an_optax_step_reading_columns_out_of_order_gives_jax_jits_numbers(order):
    """Columns read in reverse or in a permutation: one static gather of them; every
    second column: one strided slice."""
    n = 40
    if order == "reversed":
        columns = list(range(n))[::-1]
    elif order == "permuted":
        columns = list(np.random.RandomState(0).permutation(n))
    else:
        columns = list(range(n))
    step, args = _optax_step(n, columns)
    if order == "every_other":
        params, state, x, y = args
        args = (params, state, jnp.repeat(x, 2, axis=1) * jnp.tile(jnp.float32([1, -1]), n), y)
        step, _ = _optax_step(n, [2 * c for c in columns])
    j = _same_as_jax(step, *args)
    assert j.report.fallback is None and j.report.leaf_by_leaf == ()
    assert j.report.eqns_after * 10 < j.report.eqns_before
    assert ("gather" in j.lower(*args).as_text()) == (order != "every_other")


def test_per_name_reads_through_jnp_take_give_jax_jits_numbers_and_pack():
    """``jnp.take(x, i, axis=1)`` per name is a gather whose index is computed from the
    literal i (``i < 0``, ``i + 40``: a sum whose zero term only lane 0 has): one gather of
    the computed indices (it fell back to running unpacked: a packer error in that sum)."""
    step, args = _optax_step(40, list(range(40))[::-1], take=True)
    j = _same_as_jax(step, *args)
    assert j.report.fallback is None and j.report.leaf_by_leaf == ()
    assert j.report.eqns_after * 10 < j.report.eqns_before


def test_the_packed_optax_step_does_not_grow_with_the_names():
    counts = {}
    for n in (10, 40):
        step, args = _optax_step(n)
        r = _same_as_jax(step, *args).report
        counts[n] = (r.eqns_before, r.eqns_after)
    assert counts[10][1] == counts[40][1]
    assert counts[40][1] * 10 < counts[40][0]
    assert counts[10][0] < counts[40][0]


@pytest.mark.parametrize("read", ["row", "last_axis", "vector", "point", "window"])
def test_per_name_reads_of_rows_points_and_vectors_give_jax_jits_numbers(read):
    """``x[i]``, ``x[..., i]``, ``params_array[i]``, ``x[i, j]`` (two varying axes: one gather
    of N points) and ``x[i, 1:3]`` per name, packed into one read; their gradient with respect
    to x (N pads, each placing a name's cotangent, summed) into one select and one sum."""
    n = 9
    names = [f"p{i}" for i in range(n)]
    params = {k: jnp.float32(0.3 + 0.1 * i) for i, k in enumerate(names)}
    x = jnp.asarray(np.random.RandomState(3).randn(n, 4, n), jnp.float32)

    def term(x, i):
        if read == "row":
            return x[i]
        if read == "last_axis":
            return x[..., i]
        if read == "vector":
            return x[0, 1][i]
        if read == "point":
            return x[(2 * i) % n, i % 4]
        return x[i, 1:3]

    def loss(params, x):
        return sum(jnp.sum(jnp.sin(params[k] * term(x, i))) for i, k in enumerate(names))

    fun = jax.value_and_grad(loss, argnums=(0, 1))
    j = _same_as_jax(fun, params, x)
    assert j.report.fallback is None and j.report.leaf_by_leaf == ()
    assert j.report.eqns_after * 3 < j.report.eqns_before


def test_pads_that_place_each_name_at_its_offset_give_jax_jits_numbers():
    """Pads of per-name values at per-name offsets, with per-name padding values and a
    padding shared by all of them, then summed: one select against a mask of the places (a
    program that does not grow with the names)."""
    after = []
    for n in (6, 24):
        names = [f"v{i}" for i in range(n)]
        vals = {k: jnp.asarray(np.random.RandomState(i).randn(1, 3), jnp.float32)
                for i, k in enumerate(names)}
        fill = {k: jnp.float32(i - 2.5) for i, k in enumerate(names)}

        def fun(vals, fill, n=n, names=names):
            return sum(lax.pad(jnp.exp(vals[k]), fill[k], ((n - 1 - i, i, 0), (1, 2, 0)))
                       for i, k in enumerate(names))

        j = _same_as_jax(fun, vals, fill)
        assert j.report.fallback is None and j.report.leaf_by_leaf == ()
        after.append(j.report.eqns_after)
    assert after[0] == after[1]
