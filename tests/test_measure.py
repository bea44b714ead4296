"""measure / compare / blame on user functions and built-in cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import explorer


def _user_fn(x, w):
    return jnp.sum(jnp.tanh(x @ w))


def test_measure_user_function_reports_stages_sizes_and_metadata():
    x, w = jnp.ones((8, 4)), jnp.ones((4, 3))
    m = explorer.measure(_user_fn, x, w, runs=3)
    assert m.name == "_user_fn"
    for stage in (m.trace_s, m.lower_s, m.compile_s, m.first_run_s, m.run_s):
        assert stage > 0
    assert m.n_leaves == 2
    # sizes are what JAX itself reports
    lowered = jax.jit(_user_fn).lower(x, w)
    assert m.hlo_pre_bytes == len(lowered.as_text())
    # The optimised HLO text carries a table of the caller's stack frames, so its length
    # depends a little on where compile() was called from; the program part is the same.
    bare_post = len(lowered.compile().as_text())
    assert abs(m.hlo_post_bytes - bare_post) < 0.2 * bare_post
    assert m.jaxpr_eqns == m.jaxpr_eqns_top == len(jax.make_jaxpr(_user_fn)(x, w).eqns)
    assert m.flops is not None and m.flops > 0  # the CPU backend gives a cost analysis
    assert m.backend == jax.default_backend()
    assert m.jax_version == jax.__version__
    assert m.repeats == 1 and m.compile_s_spread is None
    # Memory analysis only when asked for, and then what XLA reports.
    assert m.temp_bytes is None and m.generated_code_bytes is None
    with_memory = explorer.measure(_user_fn, x, w, runs=1, memory=True)
    stats = lowered.compile().memory_analysis()
    assert with_memory.argument_bytes == stats.argument_size_in_bytes == (8 * 4 + 4 * 3) * 4
    assert with_memory.output_bytes == stats.output_size_in_bytes > 0


def test_measure_counts_equations_inside_scan_bodies():
    def rollout(c):
        return lax.scan(lambda c, _: (jnp.sin(c) * 2 + 1, c), c, None, length=5)[1].sum()

    m = explorer.measure(rollout, jnp.ones(3))
    assert m.jaxpr_eqns_top < m.jaxpr_eqns  # the three body ops live inside the scan
    assert m.jaxpr_eqns == m.jaxpr_eqns_top + 3


def test_repeated_measures_are_each_cold():
    x, w = jnp.ones((8, 4)), jnp.ones((4, 3))
    results = [explorer.measure(_user_fn, x, w, repeats=2, runs=1) for _ in range(2)]
    for m in results:
        assert m.backend_compiles >= 2  # XLA compiled on every repeat...
        assert m.cache_hits == 0  # ...and nothing came from a cache
        assert m.cold
        assert m.compile_s_spread is not None and m.compile_s_spread >= 0


def test_measure_static_argnums_and_bad_options():
    def scaled(k, x):
        return jnp.sum(x * k)

    m = explorer.measure(scaled, 3, jnp.ones(4), static_argnums=0)
    assert m.n_leaves == 1
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        explorer.measure(scaled, 3, jnp.ones(4), static_argnums=0, repeats=0)
    with pytest.raises(ValueError, match="backend 'nope' is not available"):
        explorer.measure(_user_fn, jnp.ones((2, 2)), jnp.ones((2, 2)), backend="nope")


def test_measure_case_labels_and_grad_is_bigger_than_loss():
    case = explorer.build_case("decay", "dict", 4, 10)
    loss = explorer.measure_case(case, "loss")
    grad = explorer.measure_case(case, "grad")
    assert loss.name == "decay/dict/N=4/H=10/loss"
    assert grad.hlo_pre_bytes > loss.hlo_pre_bytes
    assert loss.n_leaves == case.n_leaves


# -- compare -----------------------------------------------------------------------------
def test_compare_tree_at_module_equals_tuple():
    """The second seed, answered by one call."""
    import equinox as eqx

    class State(eqx.Module):
        x: jax.Array
        y: jax.Array

    def step_module(state, dx):
        x = state.x + dx
        state = eqx.tree_at(lambda s: s.x, state, x)
        state = eqx.tree_at(lambda s: s.y, state, x**2)
        return state, state.y

    def step_tuple(state, dx):
        x, _ = state
        x = x + dx
        y = x**2
        return (x, y), y

    x, dxs = jnp.linspace(0, 1, 6), jnp.linspace(0.1, 1, 4)
    verdict = explorer.compare(lambda s, d: lax.scan(step_module, s, d), (State(x, x**2), dxs),
                               lambda s, d: lax.scan(step_tuple, s, d), ((x, x**2), dxs))
    assert verdict.same_jaxpr and verdict.same_hlo
    assert verdict.jaxpr_diff == "" and verdict.hlo_diff == ""
    assert "identical" in str(verdict)


def test_compare_different_programs_gives_a_diff():
    a = lambda x: jnp.sum(x * 2.0)  # noqa: E731
    b = lambda x: jnp.sum(jnp.sin(x))  # noqa: E731
    verdict = explorer.compare(a, (jnp.ones(3),), b, (jnp.ones(3),), labels=("double", "sine"))
    assert not verdict.same_jaxpr and not verdict.same_hlo
    assert "sin" in verdict.jaxpr_diff and "--- double" in verdict.jaxpr_diff
    assert "different programs" in str(verdict)


def test_named_is_the_same_program_as_array_and_dict_is_not():
    named = explorer.build_case("oscillator", "named", 5, 8)
    array = explorer.build_case("oscillator", "array", 5, 8)
    dict_ = explorer.build_case("oscillator", "dict", 5, 8)
    same = explorer.compare(named.function("grad"), named.args, array.function("grad"), array.args)
    assert same.same_hlo
    other = explorer.compare(dict_.function("grad"), dict_.args, array.function("grad"), array.args)
    assert not other.same_hlo and other.eqns_a > other.eqns_b


# -- blame -------------------------------------------------------------------------------
def test_blame_points_at_the_line_that_multiplies():
    def step(state):
        return {k: state[k] * 0.5 + 1.0 for k in state}  # the per-name line

    def loss(state):
        ys = lax.scan(lambda c, _: (step(c), c), state, None, length=3)[1]
        return sum(jnp.sum(v) for v in ys.values())

    small = explorer.blame(loss, {f"s{i}": jnp.ones(()) for i in range(2)})
    big = explorer.blame(loss, {f"s{i}": jnp.ones(()) for i in range(10)})
    top = big.iloc[0]
    assert "state[k] * 0.5 + 1.0" in top["code"]
    assert top["function"].endswith("<dictcomp>") or "step" in top["function"]
    assert top["eqns"] == 20  # mul + add per state
    assert small.iloc[0]["eqns"] == 4
    assert list(big.columns) == ["file", "line", "function", "code", "eqns", "primitives"]
    assert big["eqns"].sum() == explorer.measure(loss, {f"s{i}": jnp.ones(()) for i in range(10)}).jaxpr_eqns


def test_program_texts():
    texts = explorer.program_texts(_user_fn, jnp.ones((2, 2)), jnp.ones((2, 2)))
    assert "tanh" in texts["jaxpr"] and "stablehlo.tanh" in texts["stablehlo"]
    assert texts["hlo"] is None or "tanh" in texts["hlo"]
    np.testing.assert_equal(len(texts), 3)
