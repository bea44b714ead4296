"""Bad input to the library is refused in one line before any work: the caps a sweep puts on
``repeats`` and ``runs`` hold for :func:`explorer.measure` too, and the records and stores a
user builds by hand name what is wrong instead of raising from deep inside JAX or SQLite."""

from __future__ import annotations

import pytest
from _support import one_line

import explorer
from explorer._src.util import validate as v


def _never_called(x):
    raise AssertionError("measure traced the function before checking its arguments")


@pytest.mark.parametrize("option, value, cap", [("repeats", 10**6, v.MAX_REPEATS),
                                                ("runs", 10**9, v.MAX_RUNS),
                                                ("repeats", 0, v.MAX_REPEATS),
                                                ("runs", 2.5, v.MAX_RUNS)])
def test_measure_caps_repeats_and_runs_as_a_sweep_does(option, value, cap):
    with pytest.raises(ValueError) as err:
        explorer.measure(_never_called, 1.0, **{option: value})
    text = one_line(str(err.value))
    assert text.startswith(f"{option} must be an integer between 1 and {cap}")
    assert repr(value) in text
    with pytest.raises(ValueError, match=f"{option} must be an integer between 1 and {cap}"):
        explorer.Spec("decay", "dict", 3, 5, "loss", **{option: value}).validated()
