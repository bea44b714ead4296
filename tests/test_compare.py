"""compare(): are two programs the same to XLA?"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import explorer


# -- compare -----------------------------------------------------------------------------
def test_compare_tree_at_module_equals_tuple():
    """The eqx.tree_at discussion, answered by one call."""
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
    assert verdict.op_summary == "" and verdict.distinct == ()
    assert verdict.ops_a == verdict.ops_b and verdict.ops_a["scan"] == 1


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


def test_compare_bad_arguments_are_one_line():
    f = lambda x: x + 1  # noqa: E731
    x = jnp.ones(3)
    with pytest.raises(ValueError, match="args_a must be a tuple"):
        explorer.compare(f, x, f, (x,))  # an array is not unpacked into its rows
    with pytest.raises(ValueError, match="labels must be two strings"):
        explorer.compare(f, (x,), f, (x,), labels=("x",))


def test_a_diff_leads_with_the_operation_counts_then_the_distinct_lines():
    """dict against array: a room reads "N × mul against 1 × mul" before any diff line."""
    n = 7
    dict_ = explorer.build_case("decay", "dict", n, 4)
    array = explorer.build_case("decay", "array", n, 4)
    verdict = explorer.compare(dict_.function("loss"), dict_.args, array.function("loss"),
                               array.args, labels=("dict", "array"))
    assert sum(verdict.ops_a.values()) == verdict.eqns_a
    assert sum(verdict.ops_b.values()) == verdict.eqns_b
    assert verdict.ops_a["mul"] >= 2 * n > verdict.ops_b["mul"]  # per name against once
    first, second = verdict.op_summary.splitlines()
    assert first.startswith("dict: ") and second.startswith("array: ")
    assert f"{verdict.ops_a['mul']} × mul" in first and f"{verdict.ops_b['mul']} × mul" in second
    # Side by side: only lines that differ, each pair one line of each program.
    assert verdict.distinct and all(len(pair) == 2 for pair in verdict.distinct)
    assert any("mul" in a for a, _ in verdict.distinct)
    short = explorer.compare(dict_.function("loss"), dict_.args, array.function("loss"),
                             array.args, max_diff_lines=3)
    assert len(short.distinct) == 4 and short.distinct[-1][0].startswith("... (")
