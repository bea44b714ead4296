"""explorer.diagnose under real use: projections that hold at a held-out size, the rewrite
trial's stated budgets, what a diagnosis is named, and the report's small things."""

from __future__ import annotations

import html
import re

import jax
import jax.numpy as jnp
import pytest
from test_diagnose import (
    _diagnose_cli,
    make_step_args,
    names,
    only,
    per_name_loss,
    per_name_step,
    python_time_loop,
    step,
)

import explorer


def test_sizes_fit_each_figure_and_project_a_range_that_holds_at_a_held_out_size():
    d = explorer.diagnose(step, make_args=make_step_args, sizes=(5, 10, 20))
    assert list(d.sizes["size"]) == [5, 10, 20]
    assert list(d.sizes["n_leaves"]) == [10, 20, 40]
    assert list(d.sizes["jaxpr_eqns"]) == [10, 20, 40]
    k = d.exponents.set_index("metric")["k"]
    assert k["n_leaves"] == pytest.approx(1.0) and k["jaxpr_eqns"] == pytest.approx(1.0)
    assert "compile_s" in k
    p = d.projection
    assert p.size == 200 and p.fitted_sizes == (5, 10, 20) and p.factor == 10
    assert 0 < p.low_s < p.high_s  # beyond the measured sizes: a range, not one number
    held_out = explorer.measure(step, *make_step_args(200), runs=1)
    assert p.eqns == held_out.jaxpr_eqns == 400  # the equation count's fit is exact
    assert p.low_s <= held_out.compile_s <= p.high_s, (p, held_out.compile_s)
    text = str(p)
    assert "not measured" in text and f"{p.size}" in text and " to " in text
    assert text in str(d)  # the text a user prints is this projection
    assert html.escape(text) in d._repr_html_()  # and the report's
    with pytest.raises(ValueError, match=r"at most 10×"):
        d.project(201)
    assert d.project(15).factor < 1
    assert d.n_leaves == 40  # the diagnosis itself is the largest size's


def per_name_grad_loss(state, params):
    def body(s, _):
        return {k: 0.999 * s[k] + 1e-3 * jnp.sin(params[k]) for k in s}, None
    return sum(jax.lax.scan(body, state, None, length=20)[0].values())


@pytest.mark.slow
def test_projection_from_sizes_where_a_fixed_cost_dominates_holds_at_ten_times():
    """'Trust under real use': sizes 10, 30, 100 of a per-name grad step projected 0.35 s at
    1000 (a power law through a fixed cost); measured there, 2.7 s. The range must hold it."""
    f = jax.grad(per_name_grad_loss)
    d = explorer.diagnose(f, make_args=make_step_args, sizes=(10, 30, 100), try_pack=False)
    p = d.projection
    held_out = explorer.measure(f, *make_step_args(1000), runs=1)
    assert p.eqns == held_out.jaxpr_eqns
    assert p.low_s <= held_out.compile_s <= p.high_s, (p, held_out.compile_s)


_PROJECTED = re.compile(r"projection: compile (?:about )?([0-9.e+-]+) s(?: to ([0-9.e+-]+) s)?"
                        r" at size (\d+)")


@pytest.mark.slow
def test_cli_projection_holds_at_the_held_out_size(tmp_path, monkeypatch):
    done = _diagnose_cli(tmp_path, "usercode:step", "--args", "usercode:make", "--sizes",
                         "5,10,20", "--no-pack")
    assert done.returncode == 0, done.stderr
    found = _PROJECTED.search(done.stdout)
    assert found, done.stdout
    low, high, size = float(found[1]), float(found[2] or found[1]), int(found[3])
    assert size == 200 and low < high
    monkeypatch.syspath_prepend(str(tmp_path))
    import usercode  # the same module the CLI imported

    held_out = explorer.measure(usercode.step, *usercode.make(size), runs=1)
    # printed with two significant digits: compare with the rounding's slack
    assert low * 0.95 <= held_out.compile_s <= high * 1.05, (done.stdout, held_out.compile_s)


# -- what was diagnosed, and small things ------------------------------------------------------


def test_diagnose_names_what_it_diagnosed():
    import functools

    def loss(x):
        return jnp.sum(x ** 2)

    x = jnp.ones(3)
    assert explorer.diagnose(jax.grad(loss), x, compile=False).name == "jax.grad(loss)"
    named = {
        "jax.value_and_grad(loss)": jax.value_and_grad(loss),
        "jax.vmap(loss)": jax.vmap(loss),
        "jax.jit(loss)": jax.jit(loss),
        "jax.jacobian(loss)": jax.jacrev(loss),
        "jax.jit(jax.grad(loss))": jax.jit(jax.grad(loss)),
        "partial(loss)": functools.partial(loss),
        "loss": loss,
    }
    from explorer.testing import describe

    assert {describe(f): f for f in named.values()}.keys() == named.keys()
    d = explorer.diagnose(jax.grad(loss), x, compile=False)
    assert str(d).startswith("diagnose(jax.grad(loss)):")


def test_a_sum_over_names_gets_the_reduce_once_remedy_not_pack_the_step():
    d = explorer.diagnose(per_name_loss, names(60), names(60), compile=False, try_pack=False)
    (found,) = only(d, "per-leaf-repetition")
    assert "adds them up one at a time" in found.message
    assert found.remedy.startswith("Reduce once over one array")
    assert "jnp.sum(" in found.remedy and "explorer.pack(step" not in found.remedy
    (step_finding,) = only(explorer.diagnose(per_name_step, names(60), names(60),
                                             compile=False, try_pack=False),
                           "per-leaf-repetition")
    assert "explorer.pack(step" in step_finding.remedy  # a step keeps the pack remedy


def test_the_summary_shows_each_line_once_with_its_primitives():
    def loss(state):
        return sum(jnp.sum(v) for v in state.values())  # genexpr line

    text = str(explorer.diagnose(loss, names(5), compile=False))
    rows = [r for r in text.splitlines() if "for v in state.values()" in r]
    assert len(rows) == 1 and "reduce_sum×5" in rows[0], text


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_report_file_mode_follows_the_umask(tmp_path, umask, mode):
    import os
    import stat

    d = explorer.diagnose(python_time_loop, jnp.ones(3), compile=False)
    old = os.umask(umask)
    try:
        path = d.to_html(tmp_path / "report.html")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_rewrite_trial_budgets_are_stated_and_skip_the_trial(monkeypatch):
    from explorer.testing import diagnose_trial as trial_module

    monkeypatch.setattr(trial_module, "MAX_EQNS", 100)
    d = explorer.diagnose(per_name_step, names(60), names(60), compile=False)
    assert d.pack_trial.status == "not tried"
    assert "180 equations, over the trial's budget of 100" in d.pack_trial.reason
    monkeypatch.undo()
    monkeypatch.setattr(trial_module, "BUDGET_S", 0.0)
    d = explorer.diagnose(per_name_step, names(60), names(60))
    assert d.pack_trial.status == "not tried" and "0 s budget" in d.pack_trial.reason
    assert d.pack_trial.compile_after == ()  # nothing of the rewrite was compiled


def test_project_needs_compiled_sizes_and_a_size():
    d = explorer.diagnose(step, make_args=make_step_args, sizes=(5, 10), compile=False)
    assert d.projection is None
    with pytest.raises(ValueError, match="needs compile times at two sizes"):
        d.project(20)
    with pytest.raises(ValueError, match="size"):
        d.project("big")
