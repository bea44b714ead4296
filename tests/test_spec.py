"""One validator for every entry point: bad sizes and unknown names are one-line errors."""

from __future__ import annotations

import pytest
from _support import one_line

import explorer

# -- bad input: library ----------------------------------------------------------------------
BAD_SIZES = [0, -1, -(10**9), 10**9, 10**30, "10", "ten", 2.5, float("nan"), float("inf"), None, True]


@pytest.mark.parametrize("value", BAD_SIZES, ids=repr)
def test_library_refuses_bad_sizes_withone_line(value):
    for call in (
        lambda: explorer.build_case("decay", "array", value, 5),
        lambda: explorer.build_case("decay", "array", 3, value),
        lambda: explorer.Spec("decay", "array", value, 5, "loss").validated(),
        lambda: explorer.sweep("decay", "array", n_states=value, store=False),
        lambda: explorer.sweep("decay", "array", n_states=3, horizons=value, store=False),
    ):
        with pytest.raises(ValueError) as err:
            call()
        message = one_line(str(err.value))
        assert "between 1 and" in message, message


@pytest.mark.parametrize("kind, call, choices", [
    ("problem", lambda: explorer.build_case("nope", "array", 3, 5), "decay, oscillator, lotka_volterra"),
    ("representation", lambda: explorer.build_case("decay", "nope", 3, 5), "dict, array, unflatten"),
    ("problem", lambda: explorer.sweep("nope", store=False), "decay"),
    ("representation", lambda: explorer.sweep("decay", ["array", "nope"], store=False), "named"),
    ("target", lambda: explorer.sweep("decay", "array", targets="hess", store=False), "loss, grad"),
    ("representation", lambda: explorer.sweep("decay", [], store=False), "dict"),
])
def test_library_refuses_unknown_names_with_the_choices(kind, call, choices):
    with pytest.raises(ValueError) as err:
        call()
    message = one_line(str(err.value))
    assert kind in message and choices in message
