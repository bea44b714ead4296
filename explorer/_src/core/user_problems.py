"""The user's own problems: :func:`define_problem` and the :class:`UserProblem` it makes.

A user states one step per name (and, optionally, per group and on the stacked vector); the
names, initial state and true parameters come from their ``state(n)`` / ``params(n)`` factories,
checked at every size before anything is built. The problems are registered by name in
:mod:`.problems`, beside the built-in ones.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from ..util.validate import describe_error
from .problems import _PROBLEMS, _USER, _USER_LOCK, Problem, _check_units

__all__ = ["GUESS_OFFSET", "UserProblem", "define_problem", "register"]

# Representations that call the per-name step, the group-wise step and the vectorised step.
_PER_NAME = ("dict", "unflatten", "ravel", "packed", "jit")
_GROUPED = ("module", "struct", "named")
_VECTOR = ("array",)
_NAME_INDEX = re.compile(r"^(.+)_(\d+)$")
# The guess the loss is differentiated at: each true parameter raised by this fraction of
# (1 + |value|), so it always differs from the truth and the gradient is not zero.
GUESS_OFFSET = 0.05


class _Layout(NamedTuple):
    names: tuple[str, ...]          # canonical state names
    param_names: tuple[str, ...]    # canonical parameter names
    groups: tuple[str, ...]         # state groups (empty when the names have none)
    param_groups: tuple[str, ...]
    state: np.ndarray               # (len(names),) float32, canonical order
    params: np.ndarray              # (len(param_names),) float32: the truth


def _short(keys) -> str:
    keys = sorted(map(str, keys))
    return ", ".join(repr(k) for k in keys[:3]) + (f" and {len(keys) - 3} more"
                                                    if len(keys) > 3 else "")


@dataclasses.dataclass(frozen=True, eq=False)
class UserProblem(Problem):
    """A problem written by the user (made by :func:`define_problem`).

    Its names come from the ``state(n)`` and ``params(n)`` factories, its truth is
    ``params(n)``, and its observations are the per-name ``step`` rolled out from ``state(n)``
    under that truth. Two problems are equal when they come from the same call of
    :func:`define_problem` (``definition`` is that call's token; a copy sent to a worker keeps
    it): every cache keyed on a problem then holds one definition, never an earlier one of the
    same name.
    """

    step: Callable = dataclasses.field(default=None, repr=False)
    state: Callable = dataclasses.field(default=None, repr=False)
    params: Callable = dataclasses.field(default=None, repr=False)
    grouped: Callable | None = dataclasses.field(default=None, repr=False)
    vector: Callable | None = dataclasses.field(default=None, repr=False)
    origin: str = ""
    definition: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex, repr=False)

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and other.name == self.name
                and other.definition == self.definition)

    def __hash__(self) -> int:
        return hash((self.name, self.definition))

    @property
    def source(self) -> str:
        return self.origin

    # -- layout, from the user's factories ---------------------------------------------
    def layout(self, n: int) -> _Layout:
        """Names, groups, initial state and true parameters at ``n`` units (checked, cached).

        Raises:
            ValueError: one line naming the factory and what is wrong with what it gave.
        """
        return _layout(self, _check_units(n))

    def _entries(self, which: str, n: int) -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
        factory = self.state if which == "state" else self.params
        try:
            made = factory(n)
        except Exception as err:  # noqa: BLE001 - the user's factory failed: one line
            raise ValueError(f"problem {self.name!r}: {which}({n}) raised "
                             f"{describe_error(err)}") from None
        if not isinstance(made, Mapping) or not made:
            raise ValueError(f"problem {self.name!r}: {which}({n}) must return a non-empty dict "
                             f"of names to numbers, got {type(made).__name__}")
        values, kinds = {}, set()
        for key, value in made.items():
            if not isinstance(key, str):
                raise ValueError(  # noqa: TRY004 - bad input is a ValueError here
                    f"problem {self.name!r}: {which}({n}) has a key {key!r} that "
                                 "is not a string")
            try:
                array = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"problem {self.name!r}: {which}({n})[{key!r}] is a "
                                 f"{type(value).__name__}, not a number") from None
            if array.ndim == 0:
                kinds.add("scalar")
            elif array.shape == (n,):
                kinds.add("group")
            else:
                raise ValueError(f"problem {self.name!r}: {which}({n})[{key!r}] has shape "
                                 f"{array.shape}; give a number per name or an array of "
                                 f"length {n} per group")
            values[key] = array
        if len(kinds) > 1:
            raise ValueError(f"problem {self.name!r}: {which}({n}) mixes numbers and arrays; "
                             "give one number per name or one array per group")
        if kinds == {"group"}:
            groups = tuple(values)
            names = tuple(f"{g}_{i}" for g in groups for i in range(n))
            return names, groups, np.concatenate([values[g] for g in groups]).astype(np.float32)
        groups = _groups_of(tuple(values), n)
        names = tuple(f"{g}_{i}" for g in groups for i in range(n)) if groups else tuple(values)
        return names, groups, np.array([values[k] for k in names], dtype=np.float32)

    # -- the forms of one step -----------------------------------------------------------
    def step_scalar(self, s, p, n):
        out = self.step(s, p)
        if not isinstance(out, Mapping) or out.keys() != s.keys():
            raise ValueError(self._keys_error("step", out, s.keys()))
        return dict(out)

    def step_grouped(self, s, p):
        out = self.grouped(s, p)
        if not isinstance(out, Mapping) or set(out) != set(self.groups):
            raise ValueError(self._keys_error("step_grouped", out, self.groups))
        return dict(out)

    def step_vector(self, x, theta, n):
        return self.vector(x, theta)

    def _keys_error(self, form: str, out: Any, want) -> str:
        if not isinstance(out, Mapping):
            return (f"problem {self.name!r}: {form} must return a dict with the keys it "
                    f"received, got {type(out).__name__}")
        extra, missing = set(out) - set(want), set(want) - set(out)
        parts = ([f"keys it did not receive: {_short(extra)}"] if extra else []) + (
            [f"not the keys {_short(missing)}"] if missing else [])
        return f"problem {self.name!r}: {form} returned {'; '.join(parts)}"

    # -- checks --------------------------------------------------------------------------
    def unsupported(self, representation: str) -> str | None:
        if representation in _GROUPED and self.grouped is None:
            return (f"representation {representation!r} needs step_grouped= in "
                    f"define_problem({self.name!r}); this problem has: "
                    f"{', '.join(self.representation_names)}")
        if representation in _GROUPED and not self.groups:
            return (f"representation {representation!r} needs state names of the form "
                    f"GROUP_I (or one array per group) in problem {self.name!r}")
        if representation in _VECTOR and self.vector is None:
            return (f"representation {representation!r} needs step_vector= in "
                    f"define_problem({self.name!r}); this problem has: "
                    f"{', '.join(self.representation_names)}")
        return None

    @property
    def representation_names(self) -> tuple[str, ...]:
        """The representations this problem can be measured in, in menu order."""
        names = ["dict"]
        if self.vector is not None:
            names.append("array")
        names += ["unflatten", "ravel"]
        if self.grouped is not None and self.groups:
            names += ["module", "struct", "named"]
        return (*names, "packed", "jit")

    def check_size(self, n: int, representation: str) -> None:
        """Run the user's factories at ``n`` and trace the step ``representation`` uses
        (abstractly, nothing compiled): one-line ``ValueError`` naming what is wrong."""
        why = self.unsupported(representation)
        if why:
            raise ValueError(why)
        form = ("grouped" if representation in _GROUPED
                else "vector" if representation in _VECTOR else "scalar")
        _check_form(self, _check_units(n), "scalar")   # the observations use it
        if form != "scalar":
            _check_form(self, n, form)

    # -- names, sizes and data ---------------------------------------------------------
    def state_names(self, n):
        return self.layout(n).names

    def param_names(self, n):
        return self.layout(n).param_names

    def state_size(self, n):
        return len(self.layout(n).names)

    def param_size(self, n):
        return len(self.layout(n).param_names)

    def initial_state(self, n):
        return self.layout(n).state.copy()

    def true_params(self, n):
        """``params(n)``, the user's parameters: the truth the observations are made with."""
        return self.layout(n).params.copy()

    def initial_params(self, n):
        """The truth moved by ``GUESS_OFFSET * (1 + |value|)``: deterministic, never equal."""
        truth = self.layout(n).params.astype(np.float64)
        return (truth + GUESS_OFFSET * (1.0 + np.abs(truth))).astype(np.float32)

    def observed(self, n, horizon):
        """The per-name ``step`` rolled out from ``state(n)`` under ``params(n)`` (row 0 is the
        initial state), vectorised by :func:`explorer.pack` so large ``n`` compiles quickly."""
        n = _check_units(n)
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
        self.check_size(n, "dict")
        return _user_observed(self, n, int(horizon))


def _groups_of(names: tuple[str, ...], n: int) -> tuple[str, ...]:
    """The groups of names ``GROUP_0 .. GROUP_{n-1}`` (first-seen order), or ``()``."""
    found: dict[str, set[int]] = {}
    for name in names:
        m = _NAME_INDEX.match(name)
        if m is None or (len(m.group(2)) > 1 and m.group(2).startswith("0")):
            return ()
        found.setdefault(m.group(1), set()).add(int(m.group(2)))
    if all(ix == set(range(n)) for ix in found.values()):
        return tuple(found)
    return ()


@functools.lru_cache(maxsize=64)
def _layout(problem: UserProblem, n: int) -> _Layout:
    names, groups, state = problem._entries("state", n)
    pnames, pgroups, params = problem._entries("params", n)
    if problem.groups and (groups != problem.groups
                                        or pgroups != problem.param_groups):
        raise ValueError(f"problem {problem.name!r}: the groups at n={n} "
                         f"({', '.join(groups + pgroups) or 'none'}) differ from those found "
                         f"when it was defined ({', '.join(problem.groups + problem.param_groups)})")
    return _Layout(names, pnames, groups, pgroups, state, params)


@functools.lru_cache(maxsize=64)
def _check_form(problem: UserProblem, n: int, form: str) -> None:
    lay = problem.layout(n)
    f32 = jax.ShapeDtypeStruct((), np.float32)
    try:
        if form == "scalar":
            out = jax.eval_shape(lambda s, p: problem.step_scalar(s, p, n),
                                 dict.fromkeys(lay.names, f32), dict.fromkeys(lay.param_names, f32))
            bad = {k: v.shape for k, v in out.items() if v.shape != ()}
            if bad:
                key = min(bad)
                raise ValueError(f"problem {problem.name!r}: step returned shape {bad[key]} for "
                                 f"{key!r}; each name holds one number")
        elif form == "grouped":
            vec = jax.ShapeDtypeStruct((n,), np.float32)
            out = jax.eval_shape(problem.step_grouped, dict.fromkeys(lay.groups, vec),
                                 dict.fromkeys(lay.param_groups, vec))
            bad = {k: v.shape for k, v in out.items() if v.shape != (n,)}
            if bad:
                key = min(bad)
                raise ValueError(f"problem {problem.name!r}: step_grouped returned shape "
                                 f"{bad[key]} for {key!r}, expected ({n},)")
        else:
            size = len(lay.names)
            out = jax.eval_shape(lambda x, t: problem.step_vector(x, t, n),
                                 jax.ShapeDtypeStruct((size,), np.float32),
                                 jax.ShapeDtypeStruct((len(lay.param_names),), np.float32))
            if getattr(out, "shape", None) != (size,):
                raise ValueError(f"problem {problem.name!r}: step_vector returned "
                                 f"{getattr(out, 'shape', type(out).__name__)}, expected "
                                 f"shape ({size},)")
    except ValueError as err:
        if str(err).startswith(f"problem {problem.name!r}"):
            raise
        raise ValueError(f"problem {problem.name!r}: {_FORM_NAMES[form]} raised "
                         f"{describe_error(err)}") from None
    except Exception as err:  # noqa: BLE001 - the user's step failed while being traced
        raise ValueError(f"problem {problem.name!r}: {_FORM_NAMES[form]} raised "
                         f"{describe_error(err)}") from None


_FORM_NAMES = {"scalar": "step", "grouped": "step_grouped", "vector": "step_vector"}


@functools.lru_cache(maxsize=16)
def _user_observed(problem: UserProblem, n: int, horizon: int) -> np.ndarray:
    from ..pack.pack import pack  # the vectoriser, only for user problems

    lay = problem.layout(n)
    packed = pack(lambda s, p: problem.step_scalar(s, p, n),
                  dict.fromkeys(lay.names, np.float32(0)),
                  dict.fromkeys(lay.param_names, np.float32(0)))
    # pack_args order is the dicts' leaves in sorted-key order; rollout keeps pack's own lane
    # layout inside the loop.
    perm_s = np.array(sorted(range(len(lay.names)), key=lay.names.__getitem__))
    perm_p = np.array(sorted(range(len(lay.param_names)), key=lay.param_names.__getitem__))
    simulate = jax.jit(functools.partial(packed.rollout, length=horizon))
    ys = np.asarray(simulate(lay.state[perm_s], lay.params[perm_p]), dtype=np.float32)
    out = np.ascontiguousarray(ys[:, np.argsort(perm_s)])
    out.flags.writeable = False
    return out


def forget_cached() -> None:
    """Drop what is cached of every user problem (layouts, checks, observations): called when
    a definition replaces another of the same name, so nothing of the earlier one is used."""
    for cached in (_layout, _check_form, _user_observed):
        cached.cache_clear()


def _origin(step: Callable) -> str:
    """``/path/file.py:qualname`` of the step (the same whether the file runs as a script or
    is imported as ``MODULE:ATTR``), or ``module:qualname`` when it has no file."""
    where = getattr(step, "__module__", None) or "?"
    qualname = getattr(step, "__qualname__", None) or type(step).__name__
    try:
        where = os.path.abspath(inspect.getsourcefile(step) or inspect.getfile(step))
    except TypeError:  # built in C, or made where there is no file
        pass
    return f"{where}:{qualname}"


def define_problem(name: str, step: Callable, state: Callable[[int], Mapping],
                   params: Callable[[int], Mapping], *, step_grouped: Callable | None = None,
                   step_vector: Callable | None = None, description: str | None = None,
                   source: str | None = None) -> UserProblem:
    """Your own system as a problem the explorer can measure (and registers it by name).

    Args:
        name: The problem's name in stored rows and menus (not a built-in one). Defining a
            name again in the same process replaces the earlier definition: nothing cached of
            it is used again (its factories and step are checked anew).
        step: ``step(state, params) -> dict``, one update written per name: ``state`` and
            ``params`` are dicts of scalars, and it returns the same keys as ``state``.
        state: ``state(n) -> dict``, the initial state for ``n`` units: one number per name,
            or one array of length ``n`` per group (names are then ``f"{group}_{i}"``).
        params: ``params(n) -> dict``, the same for the parameters. These are the truth: the
            observations are ``step`` rolled out from ``state(n)`` under them, and the loss is
            differentiated at a guess that differs from each, ``p + 0.05 (1 + |p|)``.
        step_grouped: Optional ``step_grouped(state, params) -> dict`` on one ``(n,)`` array
            per group (names ``GROUP_I``): enables ``struct``, ``module`` and ``named``.
        step_vector: Optional ``step_vector(x, theta) -> x'`` on the state and parameters
            stacked in name order: enables ``array``.
        description: One sentence for menus (default: the step's first docstring line).
        source: Where the code comes from, stored with every row (default: the step's
            ``/path/file.py:qualname@FINGERPRINT``, the fingerprint changing with the code of
            the functions given here and the numbers the factories give). A sweep reuses
            stored rows only of the same source, so an edited step is measured again.

    The factories are run once at ``n = 2`` now; every size is checked again (factories run,
    the step traced abstractly) before it is built or swept.

    Raises:
        ValueError: one line naming what is wrong.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", name):
        raise ValueError(f"problem name must be letters, digits and _ (starting with a letter, "
                         f"at most 64), got {name!r}")
    if name in _PROBLEMS:
        raise ValueError(f"problem name {name!r} is a built-in problem; choose another name")
    for what, fn, optional in (("step", step, False), ("state", state, False),
                               ("params", params, False), ("step_grouped", step_grouped, True),
                               ("step_vector", step_vector, True)):
        if not (callable(fn) or (optional and fn is None)):
            raise ValueError(f"define_problem({name!r}): {what} must be a function, got "
                             f"{type(fn).__name__}")
    doc = (inspect.getdoc(step) or "").strip().splitlines()
    problem = UserProblem(name=name, description=description or (doc[0] if doc else
                          f"Your problem {name!r}."), groups=(), param_groups=(), step=step,
                          state=state, params=params, grouped=step_grouped, vector=step_vector,
                          origin=source or "")
    probe = problem.layout(2)
    if step_grouped is not None and not (probe.groups and probe.param_groups):
        raise ValueError(f"define_problem({name!r}): step_grouped needs groups: give state and "
                         "params as one array per group, or names of the form GROUP_I")
    origin = source or (f"{_origin(step)}@"
                        f"{_fingerprint((step, state, params, step_grouped, step_vector), probe)}")
    problem = dataclasses.replace(problem, groups=probe.groups, param_groups=probe.param_groups,
                                  origin=origin)
    return register(problem)


def _fingerprint(functions: tuple[Callable | None, ...], probe: _Layout) -> str:
    """12 hex digits of what the definition says: its functions' source (their bytecode where
    there is none) and the names and values the factories give at ``n = 2``. An edited step,
    or a factory giving other numbers, makes another fingerprint, so a sweep's resume never
    takes rows measured of the earlier code (a helper the step calls is not read: name a
    version in ``source=`` for that)."""
    digest = hashlib.sha256()
    for fn in functions:
        digest.update(_code_text(fn).encode() + b"\0")
    digest.update("\n".join(probe.names + ("|",) + probe.param_names).encode())
    digest.update(probe.state.tobytes() + probe.params.tobytes())
    return digest.hexdigest()[:12]


def _code_text(fn: Callable | None) -> str:
    if fn is None:
        return "-"
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):  # made by exec, in C, or a callable object
        code = getattr(fn, "__code__", None)
        return _bytecode(code) if code is not None else type(fn).__qualname__


def _bytecode(code: Any) -> str:
    consts = (_bytecode(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts)
    return f"{code.co_code.hex()}|{','.join(consts)}|{','.join(code.co_names)}"


def register(problem: UserProblem) -> UserProblem:
    """Make ``problem`` known by its name in this process (the latest definition wins)."""
    if not isinstance(problem, UserProblem):
        raise ValueError(  # noqa: TRY004 - bad input is a ValueError here
            f"expected a problem made by explorer.define_problem, got {type(problem).__name__}")
    with _USER_LOCK:
        earlier = _USER.get(problem.name)
        _USER[problem.name] = problem
    if earlier is not None and earlier != problem:  # a new definition: none of the old is used
        forget_cached()
    return problem
