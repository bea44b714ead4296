"""Nine ways to hold the same state, and the loss each one compiles to.

Every representation builds the same function: roll a problem's dynamics out
with ``lax.scan`` for ``horizon`` steps from the first observed state, and sum
the squared errors against the observed trajectory. Only the shape of the
state, the observations and the parameters changes, which is what the explorer
measures.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.flatten_util import ravel_pytree

from .named import NamedArray
from ..pack.jit import jit
from ..pack.pack import pack
from ..pack.step_layout import natural_order
from .problems import Problem, get_problem

__all__ = [
    "MAX_HORIZON",
    "MAX_N_STATES",
    "REPRESENTATIONS",
    "Case",
    "Representation",
    "build_case",
    "get_representation",
    "representations",
]

from ..util.validate import (MAX_HORIZON, MAX_N_STATES, check_choice, check_horizon, check_n_states,
                        check_target, check_unroll)


class _Built(NamedTuple):
    obs: Any
    params: Any
    loss: Callable
    predict: Callable                       # (obs, params) -> ys, in this layout
    params_to_canonical: Callable           # host tree -> (P*N,) numpy
    states_to_canonical: Callable           # host ys -> (horizon, G*N) numpy


@dataclasses.dataclass(frozen=True)
class Representation:
    """How a state is held: a name, one line about it, and the builder of its loss."""

    name: str
    description: str
    build: Callable[..., _Built] = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True, eq=False)
class Case:
    """One problem in one representation at one size, ready to measure.

    Attributes:
        problem: Problem name.
        representation: Representation name.
        n_states: Units per group (``N``).
        horizon: Scan length.
        unroll: ``lax.scan`` unroll factor.
        state_names: Canonical state names, ``problem.state_names(n_states)``.
        param_names: Canonical parameter names.
        args: ``(obs, params)`` in this representation's layout, on device.
    """

    problem: str
    representation: str
    n_states: int
    horizon: int
    unroll: int
    state_names: tuple[str, ...]
    param_names: tuple[str, ...]
    args: tuple
    _loss: Callable = dataclasses.field(repr=False)
    _grad: Callable = dataclasses.field(repr=False)
    _value_and_grad: Callable = dataclasses.field(repr=False)
    _predict: Callable = dataclasses.field(repr=False)
    _params_to_canonical: Callable = dataclasses.field(repr=False)
    _states_to_canonical: Callable = dataclasses.field(repr=False)

    def function(self, target: str = "loss") -> Callable:
        """The function to measure, not jitted.

        Args:
            target: ``"loss"`` for ``loss(obs, params) -> scalar``, or ``"grad"``
                for its gradient with respect to ``params``.

        Raises:
            ValueError: for any other target.
        """
        return self._loss if check_target(target) == "loss" else self._grad

    def evaluate(self) -> tuple[float, np.ndarray]:
        """Loss value and gradient, the gradient flattened in canonical parameter order."""
        value, grad = self._value_and_grad(*self.args)
        return float(value), self._params_to_canonical(jax.device_get(grad))

    def rollout(self) -> np.ndarray:
        """Predicted trajectory, ``(horizon, G*N)`` in canonical state order."""
        return self._states_to_canonical(jax.device_get(self._predict(*self.args)))

    @property
    def n_leaves(self) -> int:
        """Number of array leaves in ``args``: what JAX sees as arguments."""
        return len(jax.tree_util.tree_leaves(self.args))


# ---------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------


def _scan_states(step, init, params, horizon, unroll):
    """The states before each of ``horizon`` updates (row 0 is ``init``)."""

    def body(state, _):
        return step(state, params), state

    return lax.scan(body, init, xs=None, length=horizon, unroll=unroll)[1]


def _sum_squares(obs, ys):
    """Per-leaf sums of squared errors, reduced over the tree (jax-ml/jax#4667's first program)."""
    errors = jax.tree_util.tree_map(lambda o, y: jnp.sum((o - y) ** 2), obs, ys)
    return jax.tree_util.tree_reduce(operator.add, errors)


def _named(fn, name):
    fn.__name__ = fn.__qualname__ = name
    return fn


def _split_groups(vec, groups, n):
    """Canonical group-major vector (or ``(T, G*N)`` rows) -> ``{group: [..., N]}``."""
    return {g: vec[..., k * n:(k + 1) * n] for k, g in enumerate(groups)}


def _scalars(vec, names):
    """Canonical vector (or ``(T, len(names))`` rows) -> ``{name: [...]}``."""
    return {name: vec[..., i] for i, name in enumerate(names)}


def _from_scalars(tree, names):
    return np.stack([np.asarray(tree[name]) for name in names], axis=-1).astype(np.float32)


def _from_groups(tree, groups):
    return np.concatenate([np.asarray(tree[g]) for g in groups], axis=-1).astype(np.float32)


# ---------------------------------------------------------------------------
# The representations
# ---------------------------------------------------------------------------


def _build_dict(problem, n, horizon, unroll, obs, theta):
    names, pnames = problem.state_names(n), problem.param_names(n)

    def step(state, params):
        return problem.step_scalar(state, params, n)

    def predict(obs, params):
        init = jax.tree_util.tree_map(lambda o: o[0], obs)
        return _scan_states(step, init, params, horizon, unroll)

    def loss_dict(obs, params):
        return _sum_squares(obs, predict(obs, params))

    return _Built(
        obs=_scalars(obs, names),
        params=_scalars(theta, pnames),
        loss=loss_dict,
        predict=predict,
        params_to_canonical=lambda g: _from_scalars(g, pnames),
        states_to_canonical=lambda ys: _from_scalars(ys, names),
    )


def _build_array(problem, n, horizon, unroll, obs, theta):
    def step(x, theta):
        return problem.step_vector(x, theta, n)

    def predict(obs, params):
        return _scan_states(step, obs[0], params, horizon, unroll)

    def loss_array(obs, params):
        return jnp.sum((obs - predict(obs, params)) ** 2)

    return _Built(obs, theta, loss_array, predict, np.asarray, np.asarray)


def _build_unflatten(problem, n, horizon, unroll, obs, theta):
    names, pnames = problem.state_names(n), problem.param_names(n)

    def step(x, theta):
        # jax-ml/jax#4667's third program: names only inside the innermost function.
        state = {name: x[i] for i, name in enumerate(names)}
        params = {name: theta[i] for i, name in enumerate(pnames)}
        new = problem.step_scalar(state, params, n)
        return jnp.stack([new[name] for name in names])

    def predict(obs, params):
        return _scan_states(step, obs[0], params, horizon, unroll)

    def loss_unflatten(obs, params):
        return jnp.sum((obs - predict(obs, params)) ** 2)

    return _Built(obs, theta, loss_unflatten, predict, np.asarray, np.asarray)


def _build_ravel(problem, n, horizon, unroll, obs, theta):
    names, pnames = problem.state_names(n), problem.param_names(n)

    def rollout_flat(obs, params):
        init = jax.tree_util.tree_map(lambda o: o[0], obs)
        flat, unravel = ravel_pytree(init)

        def step(x, params):
            return ravel_pytree(problem.step_scalar(unravel(x), params, n))[0]

        return _scan_states(step, flat, params, horizon, unroll), unravel

    def predict(obs, params):
        ys, unravel = rollout_flat(obs, params)
        return jax.vmap(unravel)(ys)

    def loss_ravel(obs, params):
        ys, _ = rollout_flat(obs, params)
        observed = jax.vmap(lambda o: ravel_pytree(o)[0])(obs)
        return jnp.sum((observed - ys) ** 2)

    return _Built(
        obs=_scalars(obs, names),
        params=_scalars(theta, pnames),
        loss=loss_ravel,
        predict=predict,
        params_to_canonical=lambda g: _from_scalars(g, pnames),
        states_to_canonical=lambda ys: _from_scalars(ys, names),
    )


_MODULE_CLASSES: dict[tuple[str, tuple[str, ...]], type] = {}


def _module_class(problem: Problem) -> type:
    """An ``eqx.Module`` subclass with one array field per state group, cached."""
    key = (problem.name, problem.groups)
    cls = _MODULE_CLASSES.get(key)
    if cls is None:
        name = "".join(part.capitalize() for part in problem.name.split("_")) + "State"
        cls = type(name, (eqx.Module,), {
            "__annotations__": {g: jax.Array for g in problem.groups},
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"State of the {problem.name!r} problem, one field per group.",
        })
        _MODULE_CLASSES[key] = cls
        # Reachable by name so that pickle can find it, unless the name is taken.
        globals().setdefault(name, cls)
    return cls


def _build_module(problem, n, horizon, unroll, obs, theta):
    groups, pgroups = problem.groups, problem.param_groups
    cls = _module_class(problem)

    def step(state, params):
        new = problem.step_grouped({g: getattr(state, g) for g in groups}, params)
        for g in groups:
            state = eqx.tree_at(lambda m, g=g: getattr(m, g), state, new[g])
        return state

    def predict(obs, params):
        init = jax.tree_util.tree_map(lambda o: o[0], obs)
        return _scan_states(step, init, params, horizon, unroll)

    def loss_module(obs, params):
        return _sum_squares(obs, predict(obs, params))

    return _Built(
        obs=cls(**_split_groups(obs, groups, n)),
        params=_split_groups(theta, pgroups, n),
        loss=loss_module,
        predict=predict,
        params_to_canonical=lambda g: _from_groups(g, pgroups),
        states_to_canonical=lambda ys: _from_groups({g: getattr(ys, g) for g in groups}, groups),
    )


def _build_struct(problem, n, horizon, unroll, obs, theta):
    groups, pgroups = problem.groups, problem.param_groups

    def predict(obs, params):
        init = {g: o[0] for g, o in obs.items()}
        return _scan_states(problem.step_grouped, init, params, horizon, unroll)

    def loss_struct(obs, params):
        return _sum_squares(obs, predict(obs, params))

    return _Built(
        obs=_split_groups(obs, groups, n),
        params=_split_groups(theta, pgroups, n),
        loss=loss_struct,
        predict=predict,
        params_to_canonical=lambda g: _from_groups(g, pgroups),
        states_to_canonical=lambda ys: _from_groups(ys, groups),
    )


def _build_named(problem, n, horizon, unroll, obs, theta):
    groups = problem.groups

    def step(state, params):
        new = problem.step_grouped(state, params)   # reads state["position"], ...
        return NamedArray.from_groups({g: new[g] for g in groups})

    def predict(obs, params):
        return _scan_states(step, obs[0], params, horizon, unroll)

    def loss_named(obs, params):
        return jnp.sum((obs.data - predict(obs, params).data) ** 2)

    return _Built(
        obs=NamedArray(obs, [(g, n) for g in groups]),
        params=NamedArray(theta, [(g, n) for g in problem.param_groups]),
        loss=loss_named,
        predict=predict,
        params_to_canonical=lambda g: np.asarray(g.data),
        states_to_canonical=lambda ys: np.asarray(ys.data),
    )


def _build_packed(problem, n, horizon, unroll, obs, theta):
    names, pnames = problem.state_names(n), problem.param_names(n)

    def step_dict(state, params):
        return problem.step_scalar(state, params, n)

    # The dict program's own step, packed once here. Its arguments are the dicts' leaves in
    # tree_leaves (sorted-key) order, held in pack's lane layout; the data are put in that
    # layout here, with NumPy, so the scanned step never permutes.
    packed = pack(step_dict, dict.fromkeys(names, np.float32(0)),
                  dict.fromkeys(pnames, np.float32(0)))
    lanes_s, lanes_p = packed.layout
    perm_s = np.array([names.index(k) for k in sorted(names)])[lanes_s]
    perm_p = np.array([pnames.index(k) for k in sorted(pnames)])[lanes_p]
    inv_s, inv_p = np.argsort(perm_s), np.argsort(perm_p)

    def predict(obs, params):
        return _scan_states(packed.step_in_layout, obs[0], params, horizon, unroll)

    def loss_packed(obs, params):
        return jnp.sum((obs - predict(obs, params)) ** 2)

    return _Built(
        obs=np.ascontiguousarray(np.asarray(obs)[:, perm_s]),
        params=np.ascontiguousarray(np.asarray(theta)[perm_p]),
        loss=loss_packed,
        predict=predict,
        params_to_canonical=lambda g: np.asarray(g)[inv_p],
        states_to_canonical=lambda ys: np.asarray(ys)[:, inv_s],
    )


def _build_jit(problem, n, horizon, unroll, obs, theta):
    names, pnames = problem.state_names(n), problem.param_names(n)
    dict_built = _build_dict(problem, n, horizon, unroll, obs, theta)
    # The dict program's whole loss (scan inside), and its rollout, through explorer.jit: the
    # measured function is the packed program, on the arguments explorer.jit stacks (each
    # dict's leaves one array, in the natural order of their keys: state_2 before state_10).
    loss_program, (obs_j, params_j) = jit(dict_built.loss).packed_function(
        dict_built.obs, dict_built.params)
    predict_program, _ = jit(dict_built.predict).packed_function(dict_built.obs,
                                                                 dict_built.params)
    lane_s = np.argsort([names.index(k) for k in natural_order(names)])   # canonical -> lane
    lane_p = np.argsort([pnames.index(k) for k in natural_order(pnames)])

    def loss_jit(obs, params):
        return loss_program(obs, params)[0]

    def predict(obs, params):
        return predict_program(obs, params)[0]          # (N, horizon), lanes

    def lanes(x, k):  # an output group of one leaf is that leaf, without the lane axis
        x = np.asarray(x)
        return x if k > 1 else x[None]

    return _Built(
        obs=obs_j,
        params=params_j,
        loss=loss_jit,
        predict=predict,
        params_to_canonical=lambda g: np.asarray(g)[lane_p],  # stacked, as the input was
        states_to_canonical=lambda ys: lanes(ys, len(names))[lane_s].T,
    )


_REPRESENTATIONS: dict[str, Representation] = {
    r.name: r
    for r in (
        Representation("dict", "A dict of named scalars: one array per state and per "
                       "parameter, as in the original report.", _build_dict),
        Representation("array", "One stacked array for the state and one for the "
                       "parameters, indexed by position.", _build_array),
        Representation("unflatten", "Stacked arrays at the boundary, turned into a dict of "
                       "scalars and back inside every step.", _build_unflatten),
        Representation("ravel", "Dicts at the boundary, the scan carry raveled into one "
                       "vector with jax.flatten_util.ravel_pytree.", _build_ravel),
        Representation("module", "An equinox Module with one array field per state group, "
                       "updated with eqx.tree_at.", _build_module),
        Representation("struct", "A struct of arrays: a dict with one (N,) array per "
                       "state group.", _build_struct),
        Representation("named", "A NamedArray: one array leaf, read by group and element "
                       "name through static slices.", _build_named),
        Representation("packed", "The dict program's per-name step, vectorised by "
                       "explorer.pack: stacked arrays at the boundary.", _build_packed),
        Representation("jit", "The dict program's whole loss, scan inside, as written, "
                       "compiled by explorer.jit: stacked arrays at the boundary.", _build_jit),
    )
}

REPRESENTATIONS: tuple[str, ...] = tuple(_REPRESENTATIONS)


def representations() -> dict[str, str]:
    """Representation names and one-line descriptions, in menu order."""
    return {name: r.description for name, r in _REPRESENTATIONS.items()}


def get_representation(name: str) -> Representation:
    """The representation called ``name``.

    Raises:
        ValueError: if there is no such representation.
    """
    return _REPRESENTATIONS[check_choice("representation", name, REPRESENTATIONS)]


def check_case(problem: Any, representation: Any, n_states: Any, horizon: Any,
               unroll: Any = 1) -> tuple[Problem, Representation, int, int, int]:
    """The case's problem and representation objects and its checked sizes (what
    :func:`build_case` and ``Spec.validated`` check).

    Raises:
        ValueError: one line naming the valid choices or range.
    """
    if not isinstance(problem, Problem):
        problem = get_problem(problem)
    if not isinstance(representation, Representation):
        representation = get_representation(representation)
    why = problem.unsupported(representation.name)
    if why:
        raise ValueError(why)
    return (problem, representation, check_n_states(n_states), check_horizon(horizon),
            check_unroll(unroll))


def build_case(problem: str | Problem, representation: str | Representation,
               n_states: int, horizon: int, *, unroll: int = 1) -> Case:
    """Build the loss of ``problem`` in ``representation`` at one size.

    Args:
        problem: A problem name (see :func:`problems`) or a :class:`Problem`, including
            one made by :func:`define_problem`.
        representation: A name from :data:`REPRESENTATIONS` or a :class:`Representation`.
        n_states: Units per state group, ``1 <= n_states <= MAX_N_STATES``.
        horizon: Steps in the rollout, ``1 <= horizon <= MAX_HORIZON``.
        unroll: ``lax.scan`` unroll factor, ``>= 1``.

    Returns:
        A :class:`Case` whose ``function(target)`` is applied to ``args``.

    Raises:
        ValueError: for an unknown name or an out-of-range size, with a one-line message.
    """
    problem, representation, n, horizon, unroll = check_case(problem, representation, n_states,
                                                             horizon, unroll)
    problem.check_size(n, representation.name)  # a user's problem: its code, at this size
    built = representation.build(problem, n, horizon, unroll,
                                 problem.observed(n, horizon), problem.initial_params(n))
    rep = representation.name
    loss = built.loss
    return Case(
        problem=problem.name,
        representation=rep,
        n_states=n,
        horizon=horizon,
        unroll=unroll,
        state_names=problem.state_names(n),
        param_names=problem.param_names(n),
        args=jax.device_put((built.obs, built.params)),
        _loss=_named(loss, f"loss_{rep}"),
        _grad=_named(jax.grad(loss, argnums=1), f"grad_{rep}"),
        _value_and_grad=jax.jit(_named(jax.value_and_grad(loss, argnums=1),
                                       f"value_and_grad_{rep}")),
        _predict=jax.jit(_named(built.predict, f"rollout_{rep}")),
        _params_to_canonical=built.params_to_canonical,
        _states_to_canonical=built.states_to_canonical,
    )
