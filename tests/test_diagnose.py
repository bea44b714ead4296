"""explorer.diagnose: each finding on a program that has it and one that does not, the clean
negative control, the size sweep, how a diagnosis reads, and bad input."""

from __future__ import annotations

import html
import inspect
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support import installed_library, one_line

import explorer
from explorer.testing import FINDING_KINDS as KINDS

# -- programs ----------------------------------------------------------------------------------


def names(n):
    return {f"s{i}": jnp.float32(1.0 + 0.01 * i) for i in range(n)}


def per_name_rollout(state, params):
    """The jax#4667 pattern: a Python loop over names inside the scan step."""
    def body(s, _):
        s = {k: 0.999 * s[k] + 1e-3 * params[k] for k in s}  # per-name line
        return s, None
    return jax.lax.scan(body, state, None, length=20)[0]


def vector_rollout(x, theta):
    """The same dynamics on one stacked array: the clean negative control."""
    def body(c, _):
        c = 0.999 * c + 1e-3 * theta
        return c, c
    return jnp.sum(jax.lax.scan(body, x, None, length=20)[1] ** 2)


def python_time_loop(x):
    """The jax#2777 / diffrax#94 pattern: a Python for over time steps."""
    for _ in range(60):
        x = x + 0.01 * jnp.sin(x)  # loop line
    return jnp.sum(x)


def scan_time_loop(x):
    def body(c, _):
        return c + 0.01 * jnp.sin(c), None
    return jnp.sum(jax.lax.scan(body, x, None, length=60)[0])


def line_of(fn, marker):
    """``file:line`` of the line of ``fn`` containing ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    offset = next(i for i, text in enumerate(lines) if marker in text)
    return f"{inspect.getsourcefile(fn)}:{start + offset}"


def only(diagnosis, kind):
    found = [f for f in diagnosis.findings if f.kind == kind]
    assert found, f"no {kind} finding in {diagnosis.kinds}"
    return found


def check_saving(finding):
    assert finding.saving.startswith(("measured:", "estimate")), finding.saving
    assert finding.kind in KINDS


def test_an_explorer_jit_function_is_diagnosed_as_the_program_its_call_compiles():
    """``explorer.diagnose(explorer.jit(f), ...)`` (and the watch, which diagnoses the call that
    compiled ``f_packed``) traced the wrapper whole: its stacking of every leaf, which runs in
    NumPy before the call, was a per-leaf finding at the explorer's own line, the user was told
    to give "the library" one array, and the trial packed explorer.jit's program again. What is
    diagnosed now is the packed program of stacked arrays, as explorer.measure measures it."""
    n = 60
    plain = explorer.diagnose(per_name_rollout, names(n), names(n), compile=False)
    assert "per-leaf-repetition" in plain.kinds and plain.n_leaves == 2 * n
    for compile in (False, True):
        d = explorer.diagnose(explorer.jit(per_name_rollout), names(n), names(n),
                              compile=compile)
        assert d.n_leaves == 2 and d.findings == (), d
        assert str(d).startswith("diagnose(explorer.jit(per_name_rollout)): 2 array leaves")
        assert d.jaxpr_eqns < plain.jaxpr_eqns / 10 and d.pack_trial is None
        assert not d.top_lines["file"].str.contains("explorer").any(), d.top_lines


# -- the clean negative control ---------------------------------------------------------------


def test_clean_program_has_no_findings_compiled_cold():
    n = 100
    d = explorer.diagnose(vector_rollout, jnp.ones(n), jnp.ones(n))
    assert d.findings == ()
    assert d.n_leaves == 2 and d.leaf_paths == ("args[0]", "args[1]")
    assert d.compile_s is not None and d.compile_s > 0
    assert d.measurement.cold and d.measurement.backend_compiles >= 1
    assert d.jaxpr_eqns == d.measurement.jaxpr_eqns == explorer.count_eqns(
        jax.jit(vector_rollout).trace(jnp.ones(n), jnp.ones(n)).jaxpr)
    assert "no findings" in str(d)


def test_no_findings_names_the_thresholds_a_short_per_name_loop_stays_under():
    """20 names: each line repeats its equations 20 times, under ``min_repeats``. The report
    says which thresholds were not crossed, never that nothing grows with the leaves."""
    names = [f"x{i}" for i in range(20)]

    def loss(state):
        return sum(jnp.sum(state[k] ** 2) for k in names)

    state = {k: jnp.float32(i) for i, k in enumerate(names)}
    d = explorer.diagnose(loss, state, compile=False)
    assert d.findings == ()
    assert "no findings at diagnose's thresholds" in str(d)
    assert "50 times side by side" in str(d) and "20 array leaves cross" in str(d)
    assert "grows" not in str(d)
    lowered = explorer.diagnose(loss, state, compile=False, min_repeats=20)
    assert lowered.kinds == ("per-leaf-repetition",)
    assert "no findings" not in str(lowered)


@pytest.mark.parametrize("representation", ["array", "named", "struct", "module"])
def test_built_in_stacked_representations_have_no_findings_under_grad(representation):
    case = explorer.build_case("oscillator", representation, 300, 20)
    d = explorer.diagnose(case.function("grad"), *case.args, compile=False)
    assert d.findings == ()


# -- many-arguments ---------------------------------------------------------------------------


def test_many_arguments_from_500_leaves_not_from_two_arrays():
    leaves = {f"w{i}": jnp.float32(i) for i in range(500)}
    d = explorer.diagnose(lambda p: jnp.sum(jnp.stack(list(p.values()))), leaves, compile=False)
    (found,) = only(d, "many-arguments")
    assert d.n_leaves == 500 and "500 array leaves" in found.message
    assert found.where is None and "ravel_pytree" in found.remedy and "NamedArray" in found.remedy
    check_saving(found)
    assert "args[0]['w499']" in d.leaf_paths
    two = explorer.diagnose(lambda a, b: jnp.sum(a * b), jnp.ones(500), jnp.ones(500),
                            compile=False)
    assert "many-arguments" not in two.kinds


def test_many_arguments_threshold_is_settable():
    args = (jnp.ones(2), jnp.ones(2), jnp.ones(2))
    fn = lambda a, b, c: a + b + c  # noqa: E731
    assert "many-arguments" in explorer.diagnose(fn, *args, compile=False, max_leaves=3).kinds
    assert "many-arguments" not in explorer.diagnose(fn, *args, compile=False, max_leaves=4).kinds


# -- per-leaf-repetition ----------------------------------------------------------------------


def test_per_leaf_repetition_points_at_the_loop_over_names():
    n = 60
    d = explorer.diagnose(per_name_rollout, names(n), names(n), compile=False)
    (found,) = only(d, "per-leaf-repetition")
    assert found.where == line_of(per_name_rollout, "per-name line")
    assert f"{n} times" in found.message and "mul×2, add×1" in found.message
    assert "jax-ml/jax#4667" in found.message and "NamedArray" in found.remedy
    check_saving(found)
    assert "unrolled-loop" not in d.kinds  # side by side, not a chain
    top = d.top_lines.iloc[0]
    assert (top["line"], top["eqns"]) == (int(found.where.rpartition(":")[2]), 3 * n)
    # Python 3.12 runs a comprehension in its enclosing function's frame (PEP 709)
    body = "per_name_rollout.<locals>.body"
    comprehension = f"{body}.<locals>.<dictcomp>"
    assert top["function"] == (body if sys.version_info >= (3, 12) else comprehension)


def per_name_choice(s):
    return {k: jax.lax.cond(s[k] > 1.2, lambda v: v - 0.5, lambda v: 2.0 * v, s[k])  # cond line
            for k in s}


def per_name_where(s):
    return {k: jnp.where(s[k] > 1.2, s[k] - 0.5, 2.0 * s[k]) for k in s}


def test_a_conditional_per_name_is_told_what_packs_it_and_the_advice_works():
    """A ``lax.cond`` on each name's own value: the finding's remedy names explorer.jit (which
    computes both branches for every name and chooses, where no branch loops) and jnp.where;
    both taken give jax.jit's numbers from a program a tenth the size or less."""
    n = 60
    d = explorer.diagnose(per_name_choice, names(n), compile=False)
    (found,) = only(d, "per-leaf-repetition")
    assert found.where == line_of(per_name_choice, "cond line")
    assert "explorer.jit(step)(s)" in found.remedy and "jnp.where(s[k] > 1.0" in found.remedy
    assert found.saving.startswith("measured: explorer.jit"), found.saving
    # The plain per-name line keeps the packing remedy.
    (plain,) = only(explorer.diagnose(per_name_rollout, names(n), names(n), compile=False),
                    "per-leaf-repetition")
    assert "jnp.where" not in plain.remedy
    # The advice, taken either way: jax.jit's numbers, and a packed program of a few equations.
    want = jax.jit(per_name_choice)(names(n))
    for fun in (per_name_choice, per_name_where):
        j = explorer.jit(fun)
        got = j(names(n))
        assert got.keys() == want.keys()
        assert all(float(got[k]) == float(want[k]) for k in want)
        assert j.report.eqns_after * 10 < j.report.eqns_before, str(j.report)


def test_per_leaf_repetition_absent_on_the_stacked_program_and_below_threshold():
    n = 60
    assert "per-leaf-repetition" not in explorer.diagnose(
        vector_rollout, jnp.ones(n), jnp.ones(n), compile=False).kinds
    few = explorer.diagnose(per_name_rollout, names(20), names(20), compile=False)
    assert few.findings == ()
    assert "per-leaf-repetition" in explorer.diagnose(
        per_name_rollout, names(20), names(20), compile=False, min_repeats=20).kinds


def test_a_loop_reading_one_value_many_times_is_not_per_leaf():
    # 100 multiplications side by side, all reading the same x: vectorisable, but no leaves
    # or names are being walked, so it is not the per-leaf pattern.
    def scaled(x):
        return [x * float(i) for i in range(100)]
    assert "per-leaf-repetition" not in explorer.diagnose(scaled, jnp.ones(3), compile=False).kinds


def test_per_leaf_repetition_when_each_name_reads_its_own_slice_of_one_array():
    # notebook 04's and bench_watch's per-name loss: each term reads x[i], a slice of the one
    # array x, whose start is a parameter, not an operand. Counted as one value read 60 times,
    # it had gone unflagged: "no findings" for 360 equations on one line.
    names_ = [f"w{i}" for i in range(60)]

    def loss(params, x):
        return sum((params[k] * x[i] - 1.0) ** 2 for i, k in enumerate(names_))  # per-name sum

    params = {k: jnp.float32(0.5) for k in names_}
    d = explorer.diagnose(loss, params, jnp.arange(60.0), compile=False, try_pack=False)
    (found,) = only(d, "per-leaf-repetition")
    assert found.where == line_of(loss, "per-name sum")
    assert "60 times" in found.message and "slice×1" in found.message
    assert "jnp.sum" in found.remedy


@pytest.fixture
def wrapper_library(tmp_path):
    """An installed library (under site-packages) with a value wrapper whose ``*`` is a method
    of the library's, as flax's ``nnx.Param`` is, and a function that maps over a list."""
    source = ("import jax\n"
              "@jax.tree_util.register_pytree_node_class\n"
              "class Param:\n"
              "    def __init__(self, value):\n"
              "        self.value = value\n"
              "    def tree_flatten(self):\n"
              "        return (self.value,), None\n"
              "    @classmethod\n"
              "    def tree_unflatten(cls, aux, children):\n"
              "        return cls(*children)\n"
              "    def __mul__(self, other):\n"
              "        return self.value * other  # the library's operator\n"
              "def doubled(params):\n"
              "    return [p.value * 2.0 for p in params]  # the library's own loop\n")
    with installed_library(tmp_path, "wraplib", source) as wraplib:
        yield wraplib


def test_a_loop_of_the_users_through_a_librarys_operator_is_one_finding(wrapper_library):
    """``sum(jnp.sum((w * x - 1) ** 2) for w in ws)`` with ``w`` a library's wrapper (flax's
    ``nnx.Param``): its ``*`` runs in the library, but the loop is the user's line: one finding
    there, counting the library's equations too, not a second one telling the user to hand the
    library one array. A single call into a library that loops over the leaves keeps its own
    finding."""
    ws = [wrapper_library.Param(jnp.ones(3) * 0.1 * i) for i in range(60)]
    x = jnp.linspace(0.0, 1.0, 3)

    def loss(ws, x):
        return sum(jnp.sum((w * x - 1.0) ** 2) for w in ws)  # loop through the operator

    d = explorer.diagnose(loss, ws, x, compile=False, try_pack=False)
    (found,) = only(d, "per-leaf-repetition")
    assert found.where == line_of(loss, "loop through the operator")
    assert "mul×1 through wraplib/__init__.py:12" in found.message, found.message
    assert f"{d.jaxpr_eqns} of the program's {d.jaxpr_eqns} equations" in found.message
    assert "calls library code" not in str(d)

    def scaled(ws):
        return sum(wrapper_library.doubled(ws))  # one call into the library

    d = explorer.diagnose(scaled, ws, compile=False, try_pack=False)
    library = [f for f in only(d, "per-leaf-repetition") if "calls library code" in f.message]
    assert len(library) == 1 and "wraplib/__init__.py:14" in library[0].message, str(d)


# -- per-leaf-repetition: trying the explorer's rewrite (explorer.jit, or explorer.pack) ----------
from explorer.testing import diagnose_trial as trial_module  # noqa: E402

REWRITES = {"explorer.jit": trial_module._jit_rewrite, "explorer.pack": trial_module._pack_rewrite}


def use_rewrite(monkeypatch, name):
    monkeypatch.setattr(trial_module, "rewrite", REWRITES[name])
    monkeypatch.setattr(trial_module, "REWRITE_NAME", name)


def per_name_step(state, params):
    return {k: 0.9 * state[k] + 0.1 * params[k] for k in state}  # per-name step


def per_name_loss(state, params):
    return sum(0.9 * state[k] + 0.1 * params[k] for k in state)  # same line, scalar out


def test_the_trial_tries_explorer_jit_on_the_users_function():
    assert trial_module.REWRITE_NAME == "explorer.jit" and explorer.jit  # the public one


@pytest.mark.parametrize("name", sorted(REWRITES))
@pytest.mark.parametrize("compile_", [True, False])
def test_rewrite_is_tried_checked_and_measured_on_a_per_name_dict_step(monkeypatch, name,
                                                                       compile_):
    use_rewrite(monkeypatch, name)
    n = 60
    d = explorer.diagnose(per_name_step, names(n), names(n), compile=compile_)
    (found,) = only(d, "per-leaf-repetition")
    trial = d.pack_trial
    assert trial.rewrite == name
    assert trial.status == "measured" and (trial.reason is None) == compile_
    assert trial.eqns_before == d.jaxpr_eqns == 3 * n
    assert 0 < trial.eqns_after < trial.eqns_before
    assert found.saving.startswith(f"measured: {name}")
    assert f"{trial.eqns_before} → {trial.eqns_after} equations" in found.saving
    if compile_:  # cold, through measure, interleaved with the original's repeats
        assert len(trial.compile_before) == len(trial.compile_after) == 3
        assert trial.compile_before[0] == d.compile_s
        assert trial.compile_s_before == sorted(trial.compile_before)[1]
        assert trial.compile_s_after == sorted(trial.compile_after)[1] > 0
        assert trial.verdict in ("faster", "slower", "no difference beyond the spread")
        if trial.verdict == "faster":
            assert max(trial.compile_after) < min(trial.compile_before)
            assert "beyond their spread" in found.saving
        else:  # load on a shared machine: no claim
            assert "faster" not in found.saving
    else:
        assert trial.compile_s_before is None and trial.compile_s_after is None
        assert trial.verdict is None and "compile times not compared" in found.saving
    check_saving(found)
    assert "explorer.jit(step)" in found.remedy and "explorer.pack(step" in found.remedy


def test_explorer_jit_takes_a_scalar_loss_pack_cannot(monkeypatch):
    d = explorer.diagnose(per_name_loss, names(60), names(60), compile=False)
    assert d.pack_trial.rewrite == "explorer.jit" and d.pack_trial.status == "measured"
    use_rewrite(monkeypatch, "explorer.pack")
    d = explorer.diagnose(per_name_loss, names(60), names(60), compile=False)
    (found,) = only(d, "per-leaf-repetition")
    assert d.pack_trial.status == "not tried" and d.pack_trial.eqns_after is None
    assert "returns a single array" in _note(found.saving)
    assert "could not be tried" in found.saving


def _note(saving):
    """The sentence diagnose appends after the estimate when the rewrite gives no ratio."""
    assert saving.startswith("estimate"), saving
    note = saving[saving.index(" explorer.") + 1:]
    assert note.endswith(".") and note.count(". ") == 0 and "\n" not in note, note
    return note


@pytest.mark.parametrize("name, target", [("explorer.pack", "pack_module"),
                                          ("explorer.jit", "jit_module")])
def test_a_rewrite_that_refuses_gives_one_sentence_not_a_crash(monkeypatch, name, target):
    use_rewrite(monkeypatch, name)

    def refuses(*_args, **_kwargs):
        raise RuntimeError("no vectoriser today\nsecond line")

    module = getattr(explorer.testing, target)
    monkeypatch.setattr(module, name.split(".")[1], refuses)
    d = explorer.diagnose(per_name_step, names(60), names(60), compile=False)
    assert d.pack_trial.status == "not tried"
    assert _note(only(d, "per-leaf-repetition")[0].saving).endswith(
        "could not be tried: RuntimeError: no vectoriser today.")


def test_pack_that_gives_no_fewer_equations_is_neither_run_nor_measured(monkeypatch):
    def same_program(step, dynamic, out_info, name):  # a rewrite that removes nothing
        return trial_module._Rewritten(lambda *xs: step(*xs), dynamic, lambda: step(*dynamic))

    def never(*_args, **_kwargs):
        raise AssertionError("a rewrite without fewer equations must not be measured")

    monkeypatch.setattr(trial_module, "rewrite", same_program)
    monkeypatch.setattr(trial_module, "measure_traced", never)
    d = explorer.diagnose(per_name_step, names(60), names(60))
    assert d.pack_trial.status == "no gain" and d.pack_trial.eqns_after == d.jaxpr_eqns
    assert "not 10% fewer" in _note(only(d, "per-leaf-repetition")[0].saving)


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_a_rewrite_that_changes_the_result_is_a_failure_not_a_ratio(monkeypatch, name):
    real = REWRITES[name]

    def off_by_one(*args):
        new = real(*args)
        return trial_module._Rewritten(new.program, new.inputs, lambda: jax.tree_util.tree_map(
            lambda x: x + 1.0, new.run()))

    monkeypatch.setattr(trial_module, "rewrite", off_by_one)
    monkeypatch.setattr(trial_module, "REWRITE_NAME", name)
    d = explorer.diagnose(per_name_step, names(60), names(60), compile=False)
    trial = d.pack_trial
    assert trial.status == "changed the result" and trial.eqns_after is None
    assert "differs by up to 1" in trial.reason
    note = _note(only(d, "per-leaf-repetition")[0].saving)
    assert "changed the result" in note and "measured:" not in note and "→" not in note


def _never(*_args, **_kwargs):
    raise AssertionError("the rewrite must not be tried")


def test_try_pack_false_skips_it(monkeypatch):
    monkeypatch.setattr(trial_module, "rewrite", _never)
    d = explorer.diagnose(per_name_step, names(60), names(60), compile=False, try_pack=False)
    (found,) = only(d, "per-leaf-repetition")
    assert d.pack_trial is None and "measured" not in found.saving
    check_saving(found)
    with pytest.raises(ValueError, match="try_pack must be True or False"):
        explorer.diagnose(per_name_step, names(2), names(2), try_pack="no")


def test_pack_is_not_tried_without_a_per_leaf_finding(monkeypatch):
    monkeypatch.setattr(trial_module, "rewrite", _never)
    d = explorer.diagnose(per_name_step, names(20), names(20), compile=False)
    assert d.findings == () and d.pack_trial is None


# -- unrolled-loop ------------------------------------------------------------------------------


def test_unrolled_loop_points_at_the_line_in_the_python_loop():
    d = explorer.diagnose(python_time_loop, jnp.ones(3), compile=False)
    (found,) = only(d, "unrolled-loop")
    assert found.where == line_of(python_time_loop, "loop line")
    assert "about 60 steps" in found.message and "lax.scan" in found.remedy
    assert "differentiated" not in found.message
    check_saving(found)
    assert "per-leaf-repetition" not in d.kinds  # a chain, not repeats side by side


def _layer(w, x):
    return jnp.tanh(w * x)  # layer line


def _layers_in_a_python_loop(ws, x):
    """A network as equinox and flax users write one: each layer's ``__call__`` holds no loop;
    the loop over the layers, one frame out, does."""
    for w in ws:
        x = _layer(w, x)  # calling line
    return jnp.sum(x)


def test_unrolled_loop_of_a_layer_names_the_line_that_calls_it():
    ws = [jnp.float32(1.0 + i / 100) for i in range(60)]
    d = explorer.diagnose(_layers_in_a_python_loop, ws, jnp.ones(3), compile=False)
    (found,) = only(d, "unrolled-loop")
    layer, calling = line_of(_layer, "layer line"), line_of(_layers_in_a_python_loop,
                                                            "calling line")
    assert found.where == layer  # where the equations are made, as before
    short = calling.rsplit("/", 1)[-1]
    assert f", called from {short} (_layers_in_a_python_loop)," in found.message
    # A loop on the line itself: that line still comes first in its message.
    (own,) = only(explorer.diagnose(python_time_loop, jnp.ones(3), compile=False),
                  "unrolled-loop")
    loop = line_of(python_time_loop, "loop line").rsplit("/", 1)[-1]
    assert own.message.startswith(f"{loop} (python_time_loop)")


def test_unrolled_loop_absent_with_scan_and_noted_under_grad():
    assert explorer.diagnose(scan_time_loop, jnp.ones(3), compile=False).findings == ()
    d = explorer.diagnose(jax.grad(python_time_loop), jnp.ones(3), compile=False)
    assert d.kinds == ("unrolled-loop",)
    assert "about 60 steps" in d.findings[0].message
    assert "differentiated" in d.findings[0].message


def test_unrolled_loop_chain_threshold_is_settable():
    short = explorer.diagnose(python_time_loop, jnp.ones(3), compile=False, min_chain=181)
    assert "unrolled-loop" not in short.kinds  # 60 steps × 3 equations = a chain of 180
    assert "unrolled-loop" in explorer.diagnose(python_time_loop, jnp.ones(3), compile=False,
                                                min_chain=180).kinds


# -- large-constants ----------------------------------------------------------------------------

WEIGHTS = jnp.asarray(np.random.default_rng(0).random((600, 600), dtype=np.float32))  # 1.44 MB


def closed_over(x):
    return jnp.tanh(WEIGHTS @ x)  # weights line


def passed_in(weights, x):
    return jnp.tanh(weights @ x)


def test_large_constants_when_weights_are_closed_over_not_when_passed():
    d = explorer.diagnose(closed_over, jnp.ones(600), compile=False)
    (found,) = only(d, "large-constants")
    assert d.constant_bytes == WEIGHTS.nbytes == 600 * 600 * 4
    assert found.where == line_of(closed_over, "weights line")
    assert "1.4 MB" in found.message and "float32[600, 600]" in found.message
    assert found.saving.startswith("measured:")
    assert d.stablehlo_bytes > WEIGHTS.nbytes  # the data really is in the program text
    clean = explorer.diagnose(passed_in, WEIGHTS, jnp.ones(600), compile=False)
    assert clean.findings == () and clean.constant_bytes == 0


def test_large_constants_threshold_is_settable():
    small = jnp.ones(300)  # 1.2 KB

    def fn(x):
        return x + small

    assert explorer.diagnose(fn, jnp.ones(300), compile=False).findings == ()
    d = explorer.diagnose(fn, jnp.ones(300), compile=False, max_constant_bytes=1000)
    assert d.kinds == ("large-constants",)


# -- many-carry-leaves, large-unroll --------------------------------------------------------------


def carry_tuple(x):
    init = tuple(x[i] for i in range(30))  # one array in, a 30-leaf carry inside
    final = jax.lax.scan(lambda c, _: (tuple(v * 0.5 for v in c), None), init, None, length=5)[0]
    return final[0]


def test_many_carry_leaves_from_a_wide_carry_not_a_stacked_one():
    d = explorer.diagnose(carry_tuple, jnp.ones(30), compile=False, max_leaves=25)
    (found,) = only(d, "many-carry-leaves")
    assert "carries 30 separate arrays" in found.message
    assert found.where == line_of(carry_tuple, "jax.lax.scan")
    assert "many-arguments" not in d.kinds  # one argument
    assert "many-carry-leaves" not in explorer.diagnose(
        scan_time_loop, jnp.ones(30), compile=False, max_leaves=25).kinds
    assert "many-carry-leaves" not in explorer.diagnose(carry_tuple, jnp.ones(30),
                                                        compile=False).kinds


def unrolled_scan(x, unroll):
    return jax.lax.scan(lambda c, _: (jnp.sin(c) * 2, None), x, None, length=64, unroll=unroll)[0]


def test_large_unroll_from_a_big_factor_not_the_default():
    d = explorer.diagnose(unrolled_scan, jnp.ones(3), 64, static_argnums=1, compile=False)
    (found,) = only(d, "large-unroll")
    assert "unroll=64 over length 64" in found.message and "unroll=1" in found.remedy
    assert d.n_leaves == 1  # the static argument is not a leaf
    assert explorer.diagnose(unrolled_scan, jnp.ones(3), 1, static_argnums=1,
                             compile=False).findings == ()
    assert explorer.diagnose(unrolled_scan, jnp.ones(3), 8, static_argnums=1,
                             compile=False).findings == ()


# -- several sizes ---------------------------------------------------------------------------------


def step(state, params):
    return {k: 0.9 * state[k] + params[k] for k in state}


def make_step_args(n):
    return names(n), names(n)


def test_sizes_report_how_a_flagged_line_grows_and_skip_projection_uncompiled():
    d = explorer.diagnose(step, make_args=make_step_args, sizes=(10, 20, 40), compile=False,
                          min_repeats=10)
    (found,) = only(d, "per-leaf-repetition")
    assert "grow as size^1.00 (20 → 40 → 80)" in found.message
    assert d.pack_trial.eqns_before == 80  # pack is tried at the largest size only
    assert found.saving.startswith("measured: explorer.")
    assert d.projection is None and d.sizes["compile_s"].isna().all()
    assert "sizes 10, 20, 40" in str(d)


@pytest.mark.parametrize("sizes, needle", [
    ((10,), "at least two"),
    ((10, 10), "at least two"),
    ((0, 10), "between 1 and"),
    ((10, 2.5), "between 1 and"),
    ("10,30", "between 1 and"),
    ((), "at least one"),
])
def test_bad_sizes_are_one_line_errors(sizes, needle):
    with pytest.raises(ValueError, match=needle) as err:
        explorer.diagnose(step, make_args=make_step_args, sizes=sizes, compile=False)
    assert "\n" not in str(err.value)


def test_a_factory_that_raises_is_named_in_one_line():
    def broken_factory(n):
        raise KeyError(f"no data\nfor size {n}")

    with pytest.raises(ValueError) as err:
        explorer.diagnose(step, make_args=broken_factory, sizes=(5, 10), compile=False)
    message = str(err.value)
    assert "\n" not in message and "broken_factory" in message and "(5)" in message
    assert "KeyError" in message
    with pytest.raises(ValueError, match="must return the tuple of arguments, got dict"):
        explorer.diagnose(step, make_args=lambda n: names(n), sizes=(5, 10), compile=False)


def test_make_args_and_sizes_misuse():
    with pytest.raises(ValueError, match="not both"):
        explorer.diagnose(step, names(3), make_args=make_step_args)
    with pytest.raises(ValueError, match="sizes needs make_args"):
        explorer.diagnose(step, names(3), names(3), sizes=(5, 10))
    with pytest.raises(ValueError, match="make_args must be a function"):
        explorer.diagnose(step, make_args=[1, 2])


# -- bad input -----------------------------------------------------------------------------------


def test_bad_input_is_one_line_errors():
    cases = [
        (lambda: explorer.diagnose("step"), "needs a function"),
        (lambda: explorer.diagnose(step, names(2), names(2), static_argnums=2), "static_argnums"),
        (lambda: explorer.diagnose(step, names(2), names(2), compile="yes"), "compile must be"),
        (lambda: explorer.diagnose(step, names(2), names(2), max_leaves=0), "max_leaves"),
        (lambda: explorer.diagnose(step, names(2), names(2), min_chain=1.5), "min_chain"),
        (lambda: explorer.diagnose(step, names(2), names(2), backend="nope"), "backend"),
    ]
    for call, needle in cases:
        with pytest.raises(ValueError, match=needle) as err:
            call()
        assert "\n" not in str(err.value)


def test_a_function_that_fails_to_trace_is_named_in_one_line():
    def shape_bug(a, b):
        return a @ b

    with pytest.raises(ValueError) as err:
        explorer.diagnose(shape_bug, jnp.ones(3), jnp.ones(4), compile=False)
    message = str(err.value)
    assert message.startswith("diagnosing shape_bug failed: TypeError") and "\n" not in message
    assert isinstance(err.value.__cause__, TypeError)  # the full story stays in the chain


# -- how it reads ----------------------------------------------------------------------------------


def test_text_and_notebook_html_show_findings_first():
    d = explorer.diagnose(per_name_rollout, names(60), names(60), compile=False)
    text = str(d)
    assert repr(d) == text and text.startswith("diagnose(per_name_rollout): 120 array leaves")
    assert "[per-leaf-repetition]" in text and "top lines" in text and "not compiled" in text
    page = d._repr_html_()
    assert page.index("per-leaf-repetition") < page.index("Source lines") < page.index("Figures")
    assert "<script" not in page


def script_line(x):
    return x * 2  # </td><script>alert("owned")</script>


def test_report_is_offline_escaped_and_never_replaces_a_foreign_file(tmp_path):
    d = explorer.diagnose(script_line, jnp.ones(3), compile=False)
    path = d.to_html(tmp_path / "report.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert html.escape('</td><script>alert("owned")</script>') in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", page, re.IGNORECASE)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    d.to_html(path)  # our own report: replaced
    foreign = tmp_path / "notes.html"
    foreign.write_text("<html>mine</html>")
    with pytest.raises(ValueError, match="not a diagnose report"):
        d.to_html(foreign)
    assert foreign.read_text() == "<html>mine</html>"
    with pytest.raises(ValueError, match="does not exist"):
        d.to_html(tmp_path / "missing" / "r.html")
    with pytest.raises(ValueError, match="is a directory"):
        d.to_html(tmp_path)


@pytest.mark.slow
def test_report_of_a_1000_leaf_program_with_sizes_stays_small(tmp_path):
    d = explorer.diagnose(step, make_args=make_step_args, sizes=(250, 500, 1000), compile=False)
    assert d.n_leaves == 2000 and d.kinds[:2] == ("many-arguments", "per-leaf-repetition")
    path = d.to_html(tmp_path / "big.html")
    page = path.read_text(encoding="utf-8")
    assert path.stat().st_size <= 2_000_000
    assert page.count("<svg") == 2  # equations and StableHLO; no compile times to chart
    assert "args[1]['s999']" in html.unescape(page)


# -- the command line: your code named at the terminal ----------------------------------------
_USER_MODULE = '''
import jax
import jax.numpy as jnp

def loss(state, p):
    def body(s, _):
        return {k: 0.999 * v + 1e-3 * p[k] for k, v in s.items()}, None
    s, _ = jax.lax.scan(body, state, None, length=5)
    return sum(jnp.sum(v) for v in jax.tree_util.tree_leaves(s))

def make(n=40):
    return ({f"s{i}": jnp.float32(1.0) for i in range(n)},
            {f"s{i}": jnp.float32(0.5) for i in range(n)})

def step(state, p):
    return {k: 0.999 * v + 1e-3 * p[k] for k, v in state.items()}

def broken(n=3):
    raise RuntimeError("no data file here")
'''


def _diagnose_cli(tmp_path, *args):
    import os
    import subprocess
    import sys

    (tmp_path / "usercode.py").write_text(_USER_MODULE)
    return subprocess.run([sys.executable, "-m", "explorer", "diagnose", *args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})


@pytest.mark.slow
def test_cli_diagnose_prints_findings_and_writes_a_report(tmp_path):
    report = tmp_path / "report.html"
    done = _diagnose_cli(tmp_path, "usercode:loss", "--args", "usercode:make", "--no-compile",
                         "--html", str(report))
    assert done.returncode == 0, done.stderr
    assert "80 array leaves" in done.stdout and "[per-leaf-repetition]" in done.stdout
    assert "usercode.py:" in done.stdout and report.is_file()
    html = report.read_text()
    assert "per-leaf-repetition" in html and "<script src=\"http" not in html


@pytest.mark.slow
def test_cli_diagnose_sizes_fits_growth(tmp_path):
    done = _diagnose_cli(tmp_path, "usercode:loss", "--args", "usercode:make", "--sizes", "5,10",
                         "--no-compile")
    assert done.returncode == 0, done.stderr
    assert "sizes 5, 10: n_leaves k=1.00" in done.stdout and "jaxpr_eqns k=" in done.stdout


@pytest.mark.slow
def test_cli_diagnose_tries_pack_unless_no_pack(tmp_path):
    done = _diagnose_cli(tmp_path, "usercode:step", "--args", "usercode:make", "--no-compile")
    assert done.returncode == 0, done.stderr
    assert "saving: measured: explorer.jit" in done.stdout and "equations (" in done.stdout
    skipped = _diagnose_cli(tmp_path, "usercode:step", "--args", "usercode:make", "--no-compile",
                            "--no-pack")
    assert skipped.returncode == 0, skipped.stderr
    assert "[per-leaf-repetition]" in skipped.stdout
    assert "saving: estimate" in skipped.stdout and "measured: explorer." not in skipped.stdout


@pytest.mark.parametrize("args, words", [
    (("usercode:nope", "--args", "usercode:make"), "has no attribute 'nope'"),
    (("nomodule_xyz:loss", "--args", "usercode:make"), "cannot import 'nomodule_xyz'"),
    (("usercode:loss", "--args", "usercode:broken"), "RuntimeError: no data file here"),
    (("usercode:loss", "--args", "usercode:broken", "--sizes", "3,4"), "no data file here"),
    (("usercode:loss", "--args", "usercode:make", "--sizes", "5"), "at least two"),
    (("usercode:loss", "--args", "usercode:make", "--html", "/no/dir/r.html"), "does not exist"),
])
@pytest.mark.slow
def test_cli_diagnose_bad_input_is_one_line_status_2(tmp_path, args, words):
    done = _diagnose_cli(tmp_path, *args)
    assert done.returncode == 2
    assert words in one_line(done.stderr)
