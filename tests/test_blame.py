"""blame(): which source line multiplies into N equations."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

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
    assert list(big.columns) == ["file", "line", "function", "code", "eqns", "primitives"]
    assert big["eqns"].sum() == explorer.measure(loss, {f"s{i}": jnp.ones(()) for i in range(10)}).jaxpr_eqns
