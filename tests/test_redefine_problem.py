"""Defining a problem again under the same name (a notebook cell run again after an edit, a
script edited between two runs): the new definition is what is measured, nothing cached of
the earlier one is used, a factory of the new one that raises is refused, and a sweep's
resume never returns rows measured of the earlier code."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import cloudpickle
import numpy as np
import pytest
from _support import CPU_ENV, ROOT, one_line

import explorer


def step(s, p):
    return {k: 0.9 * s[k] + 0.1 * p["k_" + k.split("_")[1]] for k in s}


def _params(n):
    return {f"k_{i}": 0.5 for i in range(n)}


def test_a_redefinition_takes_effect_at_sizes_already_used():
    first = explorer.define_problem("edited", step, lambda n: {f"x_{i}": 1.0 for i in range(n)},
                                    _params)
    assert first.state_names(3) == ("x_0", "x_1", "x_2")
    before = first.observed(3, 4)
    second = explorer.define_problem("edited", step,
                                     lambda n: {f"y_{i}": 2.0 for i in range(n)}, _params)
    assert explorer.get_problem("edited") is second and second != first
    assert second.state_names(3) == ("y_0", "y_1", "y_2")  # not the cached x_0..x_2
    assert second.initial_state(3).tolist() == [2.0, 2.0, 2.0]
    np.testing.assert_allclose(second.observed(3, 4)[1], 0.9 * 2.0 + 0.05)
    np.testing.assert_allclose(before[1], 0.9 * 1.0 + 0.05)
    assert first.state_names(3) == ("x_0", "x_1", "x_2")  # the old object keeps its own


def test_a_redefinition_whose_factory_raises_is_refused():
    explorer.define_problem("edited", step, lambda n: {f"x_{i}": 1.0 for i in range(n)},
                            _params).check_size(3, "dict")

    def broken(n):
        raise RuntimeError("typo in the edited factory")

    with pytest.raises(ValueError) as err:
        explorer.define_problem("edited", step, broken, _params)
    assert one_line(str(err.value)) == ("problem 'edited': state(2) raised RuntimeError: typo "
                                        "in the edited factory")

    def broken_above_two(n):
        return {f"x_{i}": 1.0 for i in range(n)} if n == 2 else broken(n)

    third = explorer.define_problem("edited", step, broken_above_two, _params)
    for check in (lambda: third.check_size(3, "dict"), lambda: third.state_names(3),
                  lambda: third.observed(3, 4)):
        with pytest.raises(ValueError, match=r"state\(3\) raised RuntimeError: typo"):
            check()


def _state(n):
    return {f"x_{i}": 1.0 for i in range(n)}


def test_a_copy_sent_to_a_worker_is_the_same_definition():
    prob = explorer.define_problem("edited", step, _state, _params)
    copy = cloudpickle.loads(cloudpickle.dumps(prob))
    assert copy == prob and hash(copy) == hash(prob) and copy is not prob
    again = explorer.define_problem("edited", step, _state, _params)
    assert again != prob  # the same code defined again is another definition (caches renewed)
    assert again.source == prob.source  # ... but the same source: its stored rows are reused


SCRIPT = textwrap.dedent('''
    import numpy as np
    import explorer

    def step(state, params):
        return {k: DECAY * state[k] + 0.1 * params["p_" + k.split("_")[1]] for k in state}

    prob = explorer.define_problem("script_edit", step, state=lambda n: {"s": np.ones(n)},
                                   params=lambda n: {"p": np.linspace(0, 1, n)})
    if __name__ == "__main__":
        rows = explorer.sweep(prob, ["dict"], n_states=[2], horizons=[5], targets=["loss"],
                              store="{db}")
        print("IDS", ",".join(map(str, rows.id)), "SOURCE", prob.source)
''')


@pytest.mark.slow
def test_a_script_edited_between_two_runs_is_measured_again(tmp_path):
    """Run, run again unedited (resumed: the same row), edit the step, run (measured again)."""
    db = tmp_path / "r.sqlite"
    script = tmp_path / "mine.py"
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT)}
    out = []
    for decay in ("0.9", "0.9", "0.8"):
        script.write_text(SCRIPT.replace("{db}", str(db)).replace("DECAY", decay))
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        ids, source = done.stdout.split("IDS ")[1].split(" SOURCE ")
        out.append((ids, source.strip()))
    assert out[0] == out[1]  # unedited: resumed from the stored row
    assert out[2][0] != out[0][0] and out[2][1] != out[0][1]  # edited: measured again
    assert all(s.startswith(f"{script}:step@") for _, s in out)
    with sqlite3.connect(db) as con:
        sources = [r[0] for r in con.execute("SELECT problem_source FROM measurements")]
    assert sources == [out[0][1], out[2][1]]
