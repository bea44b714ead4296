"""Checks of user input shared by the library, the CLI and the dashboard.

Every check raises ``ValueError`` with one line that names the valid choices or range, so the
CLI can print it as it is and the dashboard can show it in an alert.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any

MAX_N_STATES = 10_000
MAX_HORIZON = 100_000
MAX_UNROLL = 1_000
MAX_REPEATS = 100
MAX_RUNS = 10_000
MAX_TIMEOUT_S = 86_400.0
TARGETS = ("loss", "grad")


def check_int(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high]``; bools, floats and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer between {low} and {high}, got {value!r}")
    return int(value)


def check_choice(kind: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; choose one of: {', '.join(choices)}")
    return value


def check_many(kind: str, values: Any, choices: Sequence[str]) -> tuple[str, ...]:
    """One name or a non-empty list of names, each one of ``choices``; order kept, no repeats."""
    if isinstance(values, str):
        values = [values]
    if values is not None and not isinstance(values, Iterable):
        raise ValueError(f"{kind} must be one name or a list of names ({', '.join(choices)}), "
                         f"got {values!r}")
    values = list(dict.fromkeys(values or []))
    if not values:
        raise ValueError(f"choose at least one {kind}: {', '.join(choices)}")
    return tuple(check_choice(kind, v, choices) for v in values)


def check_ints(name: str, values: Any, low: int, high: int) -> tuple[int, ...]:
    """One int or a non-empty list of ints in range; sorted, no repeats."""
    if isinstance(values, (numbers.Integral, str, bool)) or not isinstance(values, Iterable):
        values = [values]
    values = list(values)
    if not values:
        raise ValueError(f"{name} needs at least one value between {low} and {high}")
    return tuple(sorted({check_int(name, v, low, high) for v in values}))


def check_n_states(n: Any) -> int:
    return check_int("n_states", n, 1, MAX_N_STATES)


def check_horizon(h: Any) -> int:
    return check_int("horizon", h, 1, MAX_HORIZON)


def check_unroll(u: Any) -> int:
    return check_int("unroll", u, 1, MAX_UNROLL)


def check_target(t: Any) -> str:
    return check_choice("target", t, TARGETS)


def check_timeout(value: Any) -> float | None:
    """Seconds a job may run: ``None`` for no limit, else a number in ``(0, MAX_TIMEOUT_S]``.

    One meaning everywhere (library, CLI, dashboard): zero, negative and non-numbers are
    refused before anything runs.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout must be a number of seconds above 0 and at most "
                         f"{MAX_TIMEOUT_S:g}, or None for no limit; got {value!r}")
    return float(value)


def describe_error(err: BaseException) -> str:
    """``"TypeName: first line of its message"`` (or the type alone): how a failure in the
    user's own code is named in a one-line error."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__
