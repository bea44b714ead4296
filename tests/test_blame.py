"""blame(): which source line multiplies into N equations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from _support import installed_library

import explorer


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
    assert list(big.columns) == ["file", "line", "function", "code", "eqns", "primitives", "via"]
    assert big["eqns"].sum() == explorer.measure(loss, {f"s{i}": jnp.ones(()) for i in range(10)}).jaxpr_eqns


def test_a_line_and_the_lambda_on_it_are_one_row():
    def loss(state):
        return sum(jnp.sum(v) for v in state.values())  # a genexpr inside loss, one line

    table = explorer.blame(loss, {f"s{i}": jnp.ones(()) for i in range(5)})
    rows = table[table["code"].str.contains("for v in state.values")]
    assert len(rows) == 1, table
    assert "reduce_sum×5" in rows.iloc[0]["primitives"] and "add" in rows.iloc[0]["primitives"]
    assert "loss" in rows.iloc[0]["function"] and "genexpr" in rows.iloc[0]["function"]


def test_equations_inside_a_library_jit_are_charged_to_the_line_calling_it(tmp_path):
    """A library's own jit keeps no frame of the caller in its equations' tracebacks: they are
    charged to the user's line that called it, the library line named in ``via``."""
    source = ("import jax\n"
              "import jax.numpy as jnp\n"
              "@jax.jit\n"
              "def solve(y):\n"
              "    return {k: jnp.sin(v) * 2.0 for k, v in y.items()}  # the library's line\n")
    with installed_library(tmp_path, "fakelib", source) as fakelib:

        def loss(y):
            out = fakelib.solve(y)  # the user's call
            return sum(out.values())

        table = explorer.blame(loss, {f"s{i}": jnp.ones(()) for i in range(6)})
    top = table.iloc[0]
    assert "fakelib.solve(y)" in top["code"] and top["file"] == __file__
    assert top["eqns"] >= 12  # sin and mul per leaf, inside the library's jit
    assert "fakelib/__init__.py:5" in top["via"]
    assert not table["file"].str.contains("site-packages").any()


def test_a_function_traced_before_is_still_blamed_on_the_users_lines():
    """The page's Programs tab traces a case for its program texts, then blames it. JAX's trace
    cache gave back the jaxpr traced outside blame, and an explorer.jit program's equations
    were charged to the packer's lines (on the page: ``State._region``, ``take``) or to the line
    that called the packed function, never to the per-name line they compute."""
    def loss(state):
        ys = lax.scan(lambda c, _: ({k: v * 0.5 + 1.0 for k, v in c.items()}, c), state, None,
                      length=3)[1]  # the per-name line
        return sum(jnp.sum(v) for v in ys.values())

    packed = explorer.jit(loss)

    def outer(state):
        return packed(state) * 2.0

    state = {f"s{i}": jnp.ones(()) for i in range(12)}
    jax.jit(outer).trace(state)  # as the Programs tab's texts do first
    table = explorer.blame(outer, state)
    assert (table["file"] == __file__).all(), table[["file", "function"]]
    assert table["code"].str.contains("v * 0.5 + 1.0", regex=False).any(), table
