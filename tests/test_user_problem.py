"""Your own problem (``explorer.define_problem``): every derived representation computes what
the per-name ``dict`` program computes, a script's problem sweeps through the worker and
resumes, and bad input is one line with nothing stored."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
from _support import CPU_ENV, ROOT, cli_in_process, one_line

import explorer
from explorer.testing import GUESS_OFFSET

N, HORIZON = 4, 15


def step(s, p):
    """Leaky tanks in a chain, one name at a time."""
    n = len(s) // 2
    out = {}
    for i in range(n):
        inflow = s[f"level_{i - 1}"] if i > 0 else 1.0
        out[f"level_{i}"] = s[f"level_{i}"] + 0.1 * (inflow - p[f"leak_{i}"] * s[f"level_{i}"])
        out[f"heat_{i}"] = 0.9 * s[f"heat_{i}"] + 0.1 * jnp.tanh(p[f"gain_{i}"] * s[f"level_{i}"])
    return out


def _prev(x):
    return jnp.concatenate([jnp.ones_like(x[..., :1]), x[..., :-1]], axis=-1)


def step_grouped(s, p):
    level, heat = s["level"], s["heat"]
    return {"level": level + 0.1 * (_prev(level) - p["leak"] * level),
            "heat": 0.9 * heat + 0.1 * jnp.tanh(p["gain"] * level)}


def step_vector(x, theta):
    n = x.shape[0] // 2
    out = step_grouped({"level": x[:n], "heat": x[n:]}, {"leak": theta[:n], "gain": theta[n:]})
    return jnp.concatenate([out["level"], out["heat"]])


def state(n):
    return {"level": 0.5 * np.cos(np.arange(n)), "heat": np.zeros(n)}


def params(n):
    return {"leak": 1.0 + 0.1 * np.arange(n), "gain": np.full(n, 0.5)}


def tanks(**forms):
    return explorer.define_problem("tanks_test", step, state, params, **forms)


@pytest.mark.slow
def test_every_derived_representation_matches_dict():
    prob = tanks(step_grouped=step_grouped, step_vector=step_vector)
    assert prob.representation_names == explorer.testing.REPRESENTATIONS
    ref = explorer.build_case(prob, "dict", N, HORIZON)
    loss, grad = ref.evaluate()
    assert loss > 0 and np.abs(grad).max() > 0          # the guess differs from the truth
    for rep in prob.representation_names:
        case = explorer.build_case(prob, rep, N, HORIZON)
        assert case.problem == "tanks_test" and case.state_names == ref.state_names
        value, g = case.evaluate()
        np.testing.assert_allclose(value, loss, rtol=1e-5)
        np.testing.assert_allclose(g, grad, rtol=1e-4, atol=1e-6 * np.abs(grad).max())
        np.testing.assert_allclose(case.rollout(), ref.rollout(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_per_name_only_problem_derives_five_representations_and_refuses_the_rest():
    prob = explorer.define_problem(
        "tanks_names", step,
        state=lambda n: {f"{g}_{i}": 0.1 * i for g in ("level", "heat") for i in range(n)},
        params=lambda n: {f"{g}_{i}": 1.0 for g in ("leak", "gain") for i in range(n)})
    assert prob.representation_names == ("dict", "unflatten", "ravel", "packed", "jit")
    assert prob.groups == ("level", "heat")
    with pytest.raises(ValueError, match="needs step_vector"):
        explorer.build_case(prob, "array", N, HORIZON)
    with pytest.raises(ValueError, match="needs step_grouped"):
        explorer.build_case(prob, "struct", N, HORIZON)
    ref = explorer.build_case(prob, "dict", N, HORIZON).evaluate()
    for rep in ("unflatten", "ravel", "packed", "jit"):
        value, g = explorer.build_case(prob, rep, N, HORIZON).evaluate()
        np.testing.assert_allclose(value, ref[0], rtol=1e-5)
        np.testing.assert_allclose(g, ref[1], rtol=1e-4, atol=1e-7)


def _own_rates(s, p):
    """Each name decays at its own rate."""
    return {k: s[k] - p[f"rate_{k}"] * s[k] for k in s}


def _twelve_and_two(n):
    return [f"x_{i}" for i in range(n)] + ["x1", "x01"]


@pytest.mark.slow
def test_names_whose_text_and_number_orders_differ_come_back_under_their_own_names():
    """Keys that sort one way as text and another by their numbers (x_2, x_10), and two that
    tie by number (x1, x01): every representation's rollout and gradient put each value under
    its own name. Beyond ten names the jit representation once put x_10's rollout under x_2
    (it mapped its lanes back in text order; explorer.jit stacks them in number order)."""
    prob = explorer.define_problem(
        "own_rates", _own_rates,
        state=lambda n: {k: 1.0 + 0.01 * i for i, k in enumerate(_twelve_and_two(n))},
        params=lambda n: {f"rate_{k}": 0.001 * (i + 1) for i, k in enumerate(_twelve_and_two(n))})
    n = 12
    ref = explorer.build_case(prob, "dict", n, HORIZON)
    rollout, (loss, grad) = ref.rollout(), ref.evaluate()
    # The values are the names' own: state x_i starts at 1 + 0.01 i and decays at its rate.
    names = list(ref.state_names)
    np.testing.assert_allclose(rollout[0, names.index("x_10")], 1.10, rtol=1e-6)
    for rep in prob.representation_names:
        case = explorer.build_case(prob, rep, n, HORIZON)
        assert list(case.state_names) == names
        np.testing.assert_allclose(case.rollout(), rollout, rtol=1e-5, atol=1e-7, err_msg=rep)
        value, g = case.evaluate()
        np.testing.assert_allclose(value, loss, rtol=1e-5, err_msg=rep)
        np.testing.assert_allclose(g, grad, rtol=1e-4, atol=1e-6 * np.abs(grad).max(),
                                   err_msg=rep)


def test_observations_are_the_step_under_the_users_params():
    prob = tanks()
    truth = prob.true_params(N)
    np.testing.assert_array_equal(truth, np.concatenate([params(N)["leak"], params(N)["gain"]])
                                  .astype(np.float32))
    np.testing.assert_allclose(prob.initial_params(N), truth + GUESS_OFFSET * (1 + abs(truth)),
                               rtol=1e-6)
    obs = prob.observed(N, HORIZON)
    np.testing.assert_array_equal(obs[0], prob.initial_state(N))
    # row t+1 is the per-name step of row t under the truth, in canonical name order
    names, pnames = prob.state_names(N), prob.param_names(N)
    s = dict(zip(names, obs[3]))
    nxt = step(s, dict(zip(pnames, truth)))
    np.testing.assert_allclose([float(nxt[k]) for k in names], obs[4], rtol=1e-5, atol=1e-7)
    # at the truth the loss is zero: the observations are exactly the dict program's rollout
    case = explorer.build_case(prob, "dict", N, HORIZON)
    assert float(case.function("loss")(case.args[0], dict(zip(pnames, truth)))) < 1e-8


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(state=lambda n: 1 / 0), "problem 'bad': state(2) raised ZeroDivisionError"),
    (dict(params=lambda n: [1.0] * n), "params(2) must return a non-empty dict"),
    (dict(state=lambda n: {"level": np.zeros(n + 1)}), "has shape (3,)"),
    (dict(name="decay"), "'decay' is a built-in problem"),
    (dict(name="a b"), "problem name must be"),
    (dict(step="step"), "step must be a function"),
    (dict(step_grouped=step_grouped, state=lambda n: {"x": 1.0}), "step_grouped needs groups"),
])
def test_bad_definitions_are_one_line(kwargs, message):
    args = dict(name="bad", step=step, state=state, params=params) | kwargs
    with pytest.raises(ValueError, match=None) as err:
        explorer.define_problem(args.pop("name"), args.pop("step"), args.pop("state"),
                                args.pop("params"), **args)
    assert message in one_line(str(err.value))


def test_step_with_other_keys_is_one_line():
    prob = explorer.define_problem("bad_keys", lambda s, p: {**s, "extra": 1.0}, state, params)
    with pytest.raises(ValueError) as err:
        explorer.build_case(prob, "dict", N, HORIZON)
    assert "step returned keys it did not receive: 'extra'" in one_line(str(err.value))
    prob = explorer.define_problem("bad_raises", lambda s, p: {k: s[k] * p["nope"] for k in s},
                                   state, params)
    with pytest.raises(ValueError) as err:
        explorer.build_case(prob, "packed", N, HORIZON)
    assert "step raised KeyError: 'nope'" in one_line(str(err.value))


@pytest.mark.slow
def test_factory_failing_at_one_size_stops_the_sweep_before_anything_is_stored(tmp_path,
                                                                               executor):
    def state_small_only(n):
        if n > 5:
            raise RuntimeError("too many tanks")
        return state(n)

    prob = explorer.define_problem("tanks_small", step, state_small_only, params)
    db = tmp_path / "r.sqlite"
    with pytest.raises(ValueError) as err:
        explorer.sweep(prob, ["dict"], n_states=[2, 8], horizons=[5], targets=["loss"],
                       store=str(db), executor=executor)
    assert "state(8) raised RuntimeError: too many tanks" in one_line(str(err.value))
    assert len(explorer.Store(db)) == 0


SCRIPT = textwrap.dedent('''
    import numpy as np
    import explorer

    def step(state, params):
        return {k: 0.9 * state[k] + 0.1 * params["p_" + k.split("_")[1]] for k in state}

    prob = explorer.define_problem("script_decay", step, state=lambda n: {"s": np.ones(n)},
                                   params=lambda n: {"p": np.linspace(0, 1, n)})
    if __name__ == "__main__":
        rows = explorer.sweep(prob, ["dict", "packed"], n_states=[2, 3], horizons=[5],
                              targets=["loss"], store="{db}")
        print("STATUS", ",".join(rows.status), "IDS", ",".join(map(str, rows.id)))
''')


@pytest.mark.slow
def test_problem_defined_in_a_script_sweeps_and_resumes(tmp_path):
    db = tmp_path / "r.sqlite"
    script = tmp_path / "my_problem.py"
    script.write_text(SCRIPT.replace("{db}", str(db)))
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path, env=env) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    first, second = (r.stdout.split("STATUS ")[1].split() for r in runs)
    assert first[0] == "ok,ok,ok,ok" and second[0] == first[0]
    assert second[2] == first[2]                     # resumed: the same stored rows
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT problem, problem_source FROM measurements").fetchall()
    assert len(set(rows)) == 1 and len(rows) == 4
    assert rows[0][0] == "script_decay" and rows[0][1].startswith(f"{script}:step@")
    # the CLI finds the same problem as MODULE:ATTR and resumes from the script's rows
    done = subprocess.run([sys.executable, "-m", "explorer", "sweep", "--problem",
                           "my_problem:prob", "-r", "dict,packed", "-n", "2,3", "--horizons",
                           "5", "--targets", "loss", "--store", str(db), "-q"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM measurements").fetchone() == (4,)


@pytest.mark.slow
def test_the_readmes_tanks_example_runs_twice_as_written(tmp_path):
    """The README's "Your own problem" example saved as ``tanks.py`` and run with ``python``
    twice: the first run measures as many cases as the README says, the second none (each row
    is already stored). The README had said 10 after the jit representation made it 12."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("Save this as `tanks.py`"):]
    (tmp_path / "tanks.py").write_text(re.search(r"```python\n(.*?)```", section, re.S)[1])
    said = int(re.search(r"python tanks\.py +# measures (\d+) cases", section)[1])
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT)}
    for _ in range(2):
        done = subprocess.run([sys.executable, "tanks.py"], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        with sqlite3.connect(tmp_path / "tanks.sqlite") as con:
            assert con.execute("SELECT COUNT(*), SUM(status = 'ok') FROM measurements"
                               ).fetchone() == (said, said)


@pytest.mark.parametrize(("problem", "extra", "message"), [
    ("test_user_problem:nope", [], "has no attribute 'nope'"),
    ("no_such_module_xyz:prob", [], "cannot import 'no_such_module_xyz'"),
    ("test_user_problem:step", [], "is a function, not a problem made by"),
    ("test_user_problem:TANKS", ["-r", "array"], "needs step_vector"),
    ("test_user_problem:BAD_KEYS", [], "step returned keys it did not receive"),
    ("test_user_problem:TANKS", ["-n", "0"], "n_states must be an integer between 1 and"),
])
def test_cli_bad_problem_is_one_line_status_2_nothing_stored(tmp_path, capsys, problem, extra,
                                                             message, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    db = tmp_path / "r.sqlite"
    code, err = cli_in_process(["sweep", "--problem", problem, "-n", "2", "--horizons",
                                "3", "--store", str(db), "-q", *extra], capsys)
    assert code == 2
    assert message in one_line(err)
    assert not db.exists() or len(explorer.Store(db)) == 0


# Referred to by the CLI tests as test_user_problem:ATTR.
TANKS = explorer.define_problem("tanks_cli", step, state, params)
BAD_KEYS = explorer.define_problem("tanks_bad_keys", lambda s, p: {"only": 1.0}, state, params)


def test_dashboard_menu_lists_a_defined_problem_and_measures_it(tmp_path, executor):
    from explorer import ExplorerModel  # noqa: PLC0415 - Panel only for this test

    prob = explorer.define_problem("tanks_page", step, state, params)
    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor, problem="tanks_page",
                      n_states=2, horizon=4, target="loss", representations=["dict", "packed"])
    try:
        menu = m.controls.param.problem.objects
        assert menu == list(explorer.problems())
        assert menu[:3] == ["decay", "oscillator", "lotka_volterra"] and "tanks_page" in menu
        assert m.run() and m.wait(180)
        rows = m.store.rows()
        assert sorted(rows["representation"]) == ["dict", "packed"]
        assert set(rows["status"]) == {"ok"}, rows[["status", "error"]]
        assert set(rows["problem_source"]) == {prob.source} and ":step@" in prob.source
    finally:
        m.close()
        m.wait(180)


@pytest.mark.browser
def test_served_page_lists_a_problem_named_at_the_terminal(tmp_path, page, free_port):
    """``pytree-explorer serve --problem MODULE:ATTR``: the server imports it at start and the
    page's problem menu lists it beside the built-in ones."""
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    from playwright.sync_api import expect  # noqa: PLC0415

    url = f"http://127.0.0.1:{free_port}/explorer_app"
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           "PYTREE_EXPLORER_DB": str(tmp_path / "r.sqlite")}
    proc = subprocess.Popen([sys.executable, "-m", "explorer", "serve", "--problem",
                             "test_user_problem:TANKS", "--port", str(free_port)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"serve exited with {proc.returncode}"
            try:
                with urllib.request.urlopen(url, timeout=30):  # noqa: S310 - local
                    break
            except OSError:
                assert time.monotonic() < deadline, "serve did not answer in time"
                time.sleep(0.3)
        page.goto(url)
        expect(page.get_by_text("Status:")).to_be_visible(timeout=60_000)
        menus = page.evaluate("""() => { const out = [];
            for (const doc of Bokeh.documents) for (const m of doc.all_models)
                if (m.options && m.title === "Problem")
                    out.push(Array.from(m.options, o => Array.isArray(o) ? o[0] : o));
            return out; }""")
        # Importing the module defines both of its problems: both are listed, after the
        # built-in ones, in the order they were defined.
        assert menus == [["decay", "oscillator", "lotka_volterra", "tanks_cli", "tanks_bad_keys"]]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and any measuring worker it started
        proc.wait(timeout=30)


@pytest.mark.parametrize(("ref", "message"), [
    ("no_such_module_xyz:prob", "cannot import 'no_such_module_xyz'"),
    ("test_user_problem:nope", "has no attribute 'nope'"),
    ("decay", "give your own problem as MODULE:ATTR"),
])
def test_cli_serve_bad_problem_is_one_line_status_2(capsys, ref, message):
    code, err = cli_in_process(["serve", "--problem", ref, "--port", "1"], capsys)
    assert code == 2 and message in one_line(err)


@pytest.mark.slow
def test_a_hanging_factory_is_one_line_after_the_timeout_and_nothing_stored(tmp_path):
    import time  # noqa: PLC0415

    def slow_state(n):
        if n > 2:  # only in the worker's check: the definition (n = 2) is quick
            time.sleep(600)
        return state(n)

    prob = explorer.define_problem("tanks_hang", step, slow_state, params)
    db = tmp_path / "r.sqlite"
    with pytest.raises(ValueError) as err:
        explorer.sweep(prob, ["dict"], n_states=[3], horizons=[3], targets=["loss"],
                       store=str(db), timeout=3)
    assert "problem 'tanks_hang' could not be checked" in one_line(str(err.value))
    assert "no result after 3 s" in str(err.value)
    assert len(explorer.Store(db)) == 0
