"""explorer.jit on leaves of several shapes and dtypes: one group each, one sum over names of
all of them, and the benchmark's mixed-shape loss (per name an angle and a 3-vector) with
jax.jit's numbers against its array yardstick."""

import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import explorer
from _support import same_as_jax_jit as _same_as_jax


def test_mixed_shapes_get_one_group_each():
    rng = np.random.default_rng(3)
    n = 9
    state = {f"joint{i}": {"angle": np.float32(rng.normal()),
                           "pos": rng.normal(size=3).astype(np.float32)} for i in range(n)}
    gain = {f"joint{i}": np.float32(rng.uniform(0.1, 0.5)) for i in range(n)}

    def loss(gain, state):
        def body(s, _):
            new = {k: {"angle": v["angle"] - gain[k] * jnp.sin(v["angle"]),
                       "pos": v["pos"] * jnp.cos(v["angle"]) + gain[k]} for k, v in s.items()}
            return new, None
        final = lax.scan(body, state, None, length=5)[0]
        return sum(jnp.sum(v["pos"]) + v["angle"] ** 2 for v in final.values()), final

    j = _same_as_jax(loss, gain, state)
    shapes = sorted((shape, n_leaves) for _, shape, _, n_leaves in j.report.inputs)
    assert shapes == [((), n), ((), n), ((3,), n)]
    (scan,) = j.report.regions
    assert sorted(scan.classes) == [("carry", n), ("carry", n), ("const", n)]
    _same_as_jax(jax.grad(lambda g, s: loss(g, s)[0]), gain, state)


def test_a_sum_over_names_of_leaves_of_several_shapes_is_one_sum():
    """``angle_0 + position_0 + angle_1 + ...``: a chain of adds whose terms alternate between
    two formulas sums over names; it is one sum of two packs, not one add per leaf."""
    def loss(x):
        errors = jax.tree_util.tree_map(lambda v: jnp.sum(jnp.sin(v) ** 2), x)
        return jax.tree_util.tree_reduce(operator.add, errors)

    counts = []
    for n in (10, 40):
        rng = np.random.default_rng(n)
        x = {f"body{i}": {"angle": np.float32(rng.normal()),
                          "position": rng.normal(size=3).astype(np.float32)} for i in range(n)}
        j = _same_as_jax(loss, x)
        assert j.report.leaf_by_leaf == ()
        counts.append(j.report.eqns_after)
        _same_as_jax(jax.grad(loss), x)
    assert counts[0] == counts[1] < 15


def _bench_jit():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_jit.py"
    spec = importlib.util.spec_from_file_location("bench_jit", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_mixed_shape_loss_and_its_array_yardstick():
    """benchmarks/bench_jit.py's ``mixed`` case (per name an angle and a 3-vector position,
    a gain and a 3-vector velocity, a scan inside): explorer.jit gives jax.jit's loss and
    gradient, the array program it is measured against computes the same numbers, and the
    packed program does not grow with the names."""
    bench = _bench_jit()
    counts = []
    for n in (8, 30):
        (loss, args, _), (array_loss, arrays, _) = bench._case_mixed(n, 12, "loss")
        j = _same_as_jax(loss, *args, rtol=1e-5)
        np.testing.assert_allclose(j(*args), jax.jit(array_loss)(*arrays), rtol=1e-5)
        (grad, args, _), (array_grad, arrays, _) = bench._case_mixed(n, 12, "grad")
        jg = _same_as_jax(grad, *args, rtol=1e-4, atol=1e-5)
        assert j.report.leaf_by_leaf == () and jg.report.leaf_by_leaf == ()
        got = jg(*args)
        names = [f"body_{i}" for i in range(n)]
        want_gain, want_velocity = jax.jit(array_grad)(*arrays)
        np.testing.assert_allclose([got[k]["gain"] for k in names], want_gain, rtol=1e-4,
                                   atol=1e-5)
        np.testing.assert_allclose(np.stack([got[k]["velocity"] for k in names]),
                                   want_velocity, rtol=1e-4, atol=1e-5)
        shapes = sorted(shape for _, shape, _, _ in jg.report.inputs)
        assert shapes == [(), (3,), (12,), (12, 3)]
        counts.append((j.report.eqns_after, jg.report.eqns_after))
    assert counts[0] == counts[1]
