"""explorer.jit: a chain's ends join its middle (explorer/_src/pack/merge.py), with the numbers
of jax.jit(fun) for chains with no middle at all, and the packed program the same at every N."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import explorer


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def _scan_bodies(jaxpr):
    return [e.params["jaxpr"].jaxpr for e in jaxpr.eqns if e.primitive.name == "scan"]


@pytest.mark.parametrize("target", ["loss", "grad"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 9])
def test_the_oscillators_loss_and_gradient_are_jax_jits_whatever_its_length(n, target):
    """N=1: one mass, both ends; N=2: two ends, no middle; N=3: a middle of one mass."""
    case = explorer.build_case("oscillator", "dict", n, 20)
    fun = case.function(target)
    j = explorer.jit(fun)
    _close(j(*case.args), jax.jit(fun)(*case.args))
    assert j.report.fallback is None
    if n > 3:   # with a few masses an end's values are a few one-lane packs, named so
        assert j.report.leaf_by_leaf == ()


@pytest.mark.slow
def test_the_oscillators_ends_join_its_middle_and_the_program_does_not_grow():
    """Its first mass reads a wall (a constant 0.0) where the others read their left
    neighbour, its last has no spring to its right: both join the middle's packs, so the scan
    body computes no mass on its own (no scalar squeezed out of a pack) and has the array
    program's size. Before the merge: 81 equations (loss) and 160 (gradient), 69 in the body."""
    counts = {}
    for target, before in (("loss", 81), ("grad", 160)):
        for n in (4, 12, 40):
            case = explorer.build_case("oscillator", "dict", n, 20)
            j = explorer.jit(case.function(target))
            jaxpr = j.trace(*case.args).jaxpr.jaxpr
            counts[target, n] = j.report.eqns_after
            assert counts[target, n] < before
            forward = _scan_bodies(jaxpr)[0]
            assert "squeeze" not in {e.primitive.name for e in forward.eqns}
            if target == "loss":
                array = explorer.build_case("oscillator", "array", n, 20)
                body = _scan_bodies(jax.jit(array.function("loss")).trace(
                    *array.args).jaxpr.jaxpr)[0]
                assert len(forward.eqns) <= len(body.eqns) + 6
        assert counts[target, 4] == counts[target, 12] == counts[target, 40]
    assert counts["loss", 40] <= 40


def _missing_term(n, side, op):
    """Lane i adds (or subtracts) ``k[i+1] * s[i+1]``; the last lane has no such term."""
    def f(s, k):
        out = {}
        for i in range(n):
            own = s[f"s{i}"] * k[f"k{i}"]
            if i + 1 < n:
                extra = k[f"k{i + 1}"] * s[f"s{i + 1}"]
                own = (own + extra if side == "right" else extra + own) if op == "add" \
                    else own - extra
            out[f"s{i}"] = jnp.sin(own)
        return out
    return f


@pytest.mark.parametrize("side, op", [("right", "add"), ("left", "add"), ("right", "sub")])
def test_an_absent_addend_joins_the_others_pack_with_its_own_infinities_and_nans(side, op):
    n = 8
    f = _missing_term(n, side, op)
    rng = np.random.default_rng(0)
    s = {f"s{i}": np.float32(v) for i, v in enumerate(rng.normal(size=n))}
    k = {f"k{i}": np.float32(v) for i, v in enumerate(rng.uniform(0.5, 2.0, n))}
    s["s7"], s["s2"] = np.float32(np.inf), np.float32(np.nan)   # the last lane, a middle one
    j = explorer.jit(f)
    got, want = j(s, k), jax.jit(f)(s, k)
    for name in want:   # NaN where jax.jit has NaN, the same infinities (XLA may fuse a
        # multiply-add in one program and not the other: the last bit may differ)
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=1e-6)
    ops = [e.primitive.name for e in j.trace(s, k).jaxpr.jaxpr.eqns]
    assert ops.count("sin") == 1 and "squeeze" not in ops
    g = jax.grad(lambda k: sum(jnp.sum(v) for v in f(s | {"s2": 0.5, "s7": 1.5}, k).values()))
    _close(explorer.jit(g)(k), jax.jit(g)(k))


def test_a_merge_whose_packs_would_read_one_another_is_not_made():
    """``x0 + 1.0`` has the form of ``x_i + sin(x0 + 1.0)``, but the latter read it: one pack
    would read itself. The packer groups by signature alone, with the same numbers."""
    def f(x):
        first = x["x0"] + 1.0
        return [first] + [x[f"x{i}"] + jnp.sin(first) for i in range(1, 6)]

    x = {f"x{i}": np.float32(i / 3) for i in range(6)}
    j = explorer.jit(f)
    _close(j(x), jax.jit(f)(x))
    assert j.report.fallback is None


def _natural(name):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9])
def test_the_oscillators_gradient_is_jax_jits_bit_for_bit_step_by_step(n):
    """The packed gradient computes each lane's own formula on its own operands (an end's
    absent addend is ``S + (-0.0)``, exactly ``S``): run equation by equation, as no compiler
    contracts a multiply and an add into one rounding, every bit is jax.jit's."""
    case = explorer.build_case("oscillator", "dict", n, 12)
    fun = case.function("grad")
    j = explorer.jit(fun)
    _close(j(*case.args), jax.jit(fun)(*case.args))
    program, stacked = j.packed_function(*case.args)
    with jax.disable_jit():
        (got,) = program(*stacked)
        want = fun(*case.args)
    names = sorted(want, key=_natural)
    np.testing.assert_array_equal(np.asarray(got), np.array([want[k] for k in names]))


@pytest.mark.slow
def test_the_oscillators_transposed_step_reads_slices_and_holds_no_scalar_lane():
    """The backward scan's ends join its middle (the first stiffness's and position's
    cotangents return ``S + (-0.0)``, the last position's reads one) and its carry and packs
    are laid out mass by mass: no scalar squeezed out of a pack, no gather, a body within
    twice the array program's, and a program the same at every N. Before: 131 equations, 69
    in the body, three scalar lanes."""
    counts = {}
    for n in (4, 12, 40):
        case = explorer.build_case("oscillator", "dict", n, 20)
        j = explorer.jit(case.function("grad"))
        backward = _scan_bodies(j.trace(*case.args).jaxpr.jaxpr)[1]
        names = [e.primitive.name for e in backward.eqns]
        assert "squeeze" not in names and "gather" not in names
        array = explorer.build_case("oscillator", "array", n, 20)
        body = _scan_bodies(jax.jit(array.function("grad")).trace(*array.args).jaxpr.jaxpr)[1]
        assert len(backward.eqns) <= 2 * len(body.eqns)
        counts[n] = j.report.eqns_after
    assert counts[4] == counts[12] == counts[40] <= 100
