"""The dynamical systems whose compile cost the explorer measures.

Each problem is a discrete-time system of ``N`` identical "units" (``N`` is the
user-chosen ``n_states``). It states its one-step dynamics three times, once per
way a user might write it:

* :meth:`Problem.step_scalar` reads and writes one named scalar at a time, in a
  Python loop over the names. This is what a user writes when the state is a
  ``dict`` of scalars, and it is why such programs grow with ``N``.
* :meth:`Problem.step_grouped` reads one array per state group
  (``s["position"]``), vectorised over the ``N`` units.
* :meth:`Problem.step_vector` works on the plain stacked vector.

The three forms compute the same numbers; the representations in
``_representations.py`` choose between them.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..util.validate import check_choice


__all__ = ["Problem", "get_problem", "problems", "user_problem"]


def _check_units(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of units must be a positive integer, got {n!r}")
    return int(n)


@dataclasses.dataclass(frozen=True)
class Problem:
    """A discrete-time system of ``N`` units, stated three equivalent ways.

    Vectors in the canonical layout are group-major: for groups
    ``("position", "velocity")`` and ``N = 3`` the state vector holds
    ``position_0, position_1, position_2, velocity_0, velocity_1, velocity_2``.
    Parameters follow the same scheme over ``param_groups``.

    Subclasses implement the three ``step_*`` methods and the
    ``_*_groups`` closed forms that give the initial state and parameters.

    Attributes:
        name: Registry key, e.g. ``"oscillator"``.
        description: One sentence for menus and reports.
        groups: State groups; each holds ``N`` entries.
        param_groups: Parameter groups; each holds ``N`` entries.
        dt: Time step of the discretisation, or ``None`` where the map has none.
    """

    name: str
    description: str
    groups: tuple[str, ...]
    param_groups: tuple[str, ...]
    dt: float | None = None

    # -- names and sizes -------------------------------------------------
    def state_names(self, n: int) -> tuple[str, ...]:
        """Canonical state names, ``f"{group}_{i}"``, group-major."""
        n = _check_units(n)
        return tuple(f"{g}_{i}" for g in self.groups for i in range(n))

    def param_names(self, n: int) -> tuple[str, ...]:
        """Canonical parameter names, ``f"{group}_{i}"``, group-major."""
        n = _check_units(n)
        return tuple(f"{g}_{i}" for g in self.param_groups for i in range(n))

    def state_size(self, n: int) -> int:
        """Length ``G * N`` of the canonical state vector."""
        return len(self.groups) * _check_units(n)

    def param_size(self, n: int) -> int:
        """Length ``P * N`` of the canonical parameter vector."""
        return len(self.param_groups) * _check_units(n)

    # -- the three forms of one step ------------------------------------
    def step_scalar(self, s: Mapping, p: Mapping, n: int) -> dict:
        """One step on named scalars: ``{"position_0": x0, ...} -> same keys``."""
        raise NotImplementedError

    def step_grouped(self, s: Mapping, p: Mapping) -> dict:
        """One step on per-group arrays of shape ``(..., N)``."""
        raise NotImplementedError

    def step_vector(self, x: jax.Array, theta: jax.Array, n: int) -> jax.Array:
        """One step on the canonical vectors ``x`` ``(G*N,)`` and ``theta`` ``(P*N,)``."""
        raise NotImplementedError

    # -- what this problem can be measured as -----------------------------
    def unsupported(self, representation: str) -> str | None:
        """Why ``representation`` cannot hold this problem (one line), or ``None`` if it can."""
        return None

    def check_size(self, n: int, representation: str) -> None:
        """Check that the problem can be built at ``n`` units in ``representation``.

        The built-in problems always can; :class:`UserProblem` calls the user's code here.
        """

    @property
    def source(self) -> str:
        """Where the problem's code comes from, as stored with every row."""
        return "built-in"

    # -- data -------------------------------------------------------------
    def initial_state(self, n: int) -> np.ndarray:
        """Canonical initial state, ``(G*N,)`` float32."""
        return self._stack(self._initial_state_groups(np.arange(_check_units(n))), self.groups)

    def true_params(self, n: int) -> np.ndarray:
        """Parameters that generate :meth:`observed`, ``(P*N,)`` float32."""
        return self._stack(self._true_param_groups(np.arange(_check_units(n))), self.param_groups)

    def initial_params(self, n: int) -> np.ndarray:
        """The guess the loss is differentiated at, ``(P*N,)`` float32.

        It differs from :meth:`true_params`, so the gradient is not zero.
        """
        return self._stack(self._initial_param_groups(np.arange(_check_units(n))),
                           self.param_groups)

    def observed(self, n: int, horizon: int) -> np.ndarray:
        """Synthetic observations, ``(horizon, G*N)`` float32, read-only.

        Row ``t`` is the state before the ``t``-th update under
        :meth:`true_params`, so row 0 is :meth:`initial_state`. Results are
        cached per ``(n, horizon)``; copy before writing.
        """
        n = _check_units(n)
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
        return _observed(self, n, int(horizon))

    @staticmethod
    def _stack(groups: Mapping[str, np.ndarray], order: tuple[str, ...]) -> np.ndarray:
        return np.concatenate([np.asarray(groups[g], np.float64) for g in order]).astype(np.float32)

    def _initial_state_groups(self, i: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _true_param_groups(self, i: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _initial_param_groups(self, i: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _simulate(problem: Problem, n: int, horizon: int, x0, theta):
    def body(x, _):
        return problem.step_vector(x, theta, n), x

    return lax.scan(body, x0, xs=None, length=horizon)[1]


@functools.lru_cache(maxsize=16)
def _observed(problem: Problem, n: int, horizon: int) -> np.ndarray:
    ys = _simulate(problem, n, horizon, problem.initial_state(n), problem.true_params(n))
    out = np.array(ys, dtype=np.float32)
    out.flags.writeable = False
    return out


# ---------------------------------------------------------------------------
# The problems
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Decay(Problem):
    """Independent leaky integrators ``s' = 0.999 s + 0.001 p`` (jax-ml/jax#4667, "Slow
    compilation for functions acting on PyTrees")."""

    def step_scalar(self, s, p, n):
        return {f"state_{i}": 0.999 * s[f"state_{i}"] + 1e-3 * p[f"p_{i}"] for i in range(n)}

    def step_grouped(self, s, p):
        return {"state": 0.999 * s["state"] + 1e-3 * p["p"]}

    def step_vector(self, x, theta, n):
        return 0.999 * x + 1e-3 * theta

    def _initial_state_groups(self, i):
        return {"state": 1.0 + 0.1 * np.cos(i)}

    def _true_param_groups(self, i):
        return {"p": 1.0 + 0.5 * np.sin(1.3 * i + 0.5)}

    def _initial_param_groups(self, i):
        return {"p": np.ones(i.shape)}


def _shift_right(a):
    """``a[i-1]`` along the last axis, with 0 before the first entry."""
    return jnp.concatenate([jnp.zeros_like(a[..., :1]), a[..., :-1]], axis=-1)


def _shift_left(a):
    """``a[i+1]`` along the last axis, with 0 after the last entry."""
    return jnp.concatenate([a[..., 1:], jnp.zeros_like(a[..., :1])], axis=-1)


@dataclasses.dataclass(frozen=True)
class Oscillator(Problem):
    """A damped chain of unit masses; mass ``i`` hangs from mass ``i-1`` (mass 0 from a wall).

    Semi-implicit Euler::

        force_i = -k_i (x_i - x_{i-1}) + k_{i+1} (x_{i+1} - x_i) - c_i v_i
        v_i'    = v_i + dt force_i
        x_i'    = x_i + dt v_i'

    with ``x_{-1} = 0`` and no spring to the right of the last mass.
    """

    def step_scalar(self, s, p, n):
        dt = self.dt
        positions, velocities = {}, {}
        for i in range(n):
            x, v = s[f"position_{i}"], s[f"velocity_{i}"]
            left = s[f"position_{i - 1}"] if i > 0 else 0.0
            force = -(p[f"stiffness_{i}"] * (x - left))
            if i + 1 < n:
                force = force + p[f"stiffness_{i + 1}"] * (s[f"position_{i + 1}"] - x)
            force = force - p[f"damping_{i}"] * v
            v_new = v + dt * force
            positions[f"position_{i}"] = x + dt * v_new
            velocities[f"velocity_{i}"] = v_new
        return positions | velocities

    def step_grouped(self, s, p):
        x, v = s["position"], s["velocity"]
        position, velocity = self._step(x, v, p["stiffness"], p["damping"])
        return {"position": position, "velocity": velocity}

    def step_vector(self, x, theta, n):
        position, velocity = self._step(x[:n], x[n:], theta[:n], theta[n:])
        return jnp.concatenate([position, velocity])

    def _step(self, x, v, stiffness, damping):
        tension = stiffness * (x - _shift_right(x))
        force = -tension + _shift_left(tension) - damping * v
        v_new = v + self.dt * force
        return x + self.dt * v_new, v_new

    def _initial_state_groups(self, i):
        return {"position": 0.5 * np.cos(0.7 * i), "velocity": np.zeros(i.shape)}

    def _true_param_groups(self, i):
        return {"stiffness": 1.0 + 0.3 * np.sin(1.3 * i + 0.2),
                "damping": 0.1 + 0.05 * np.cos(0.9 * i)}

    def _initial_param_groups(self, i):
        return {"stiffness": np.ones(i.shape), "damping": np.full(i.shape, 0.1)}


@dataclasses.dataclass(frozen=True)
class LotkaVolterra(Problem):
    """Independent predator-prey patches, explicit Euler::

        prey'     = prey + dt (growth prey - prey predator)
        predator' = predator + dt (prey predator - death predator)
    """

    def step_scalar(self, s, p, n):
        dt = self.dt
        prey, predators = {}, {}
        for i in range(n):
            x, y = s[f"prey_{i}"], s[f"predator_{i}"]
            eaten = x * y
            prey[f"prey_{i}"] = x + dt * (p[f"growth_{i}"] * x - eaten)
            predators[f"predator_{i}"] = y + dt * (eaten - p[f"death_{i}"] * y)
        return prey | predators

    def step_grouped(self, s, p):
        x, y = s["prey"], s["predator"]
        eaten = x * y
        return {"prey": x + self.dt * (p["growth"] * x - eaten),
                "predator": y + self.dt * (eaten - p["death"] * y)}

    def step_vector(self, x, theta, n):
        prey, predator, growth, death = x[:n], x[n:], theta[:n], theta[n:]
        eaten = prey * predator
        return jnp.concatenate([prey + self.dt * (growth * prey - eaten),
                                predator + self.dt * (eaten - death * predator)])

    def _initial_state_groups(self, i):
        # Near the equilibrium (prey = death, predator = growth): closed orbits.
        return {"prey": 1.0 + 0.2 * np.cos(i), "predator": 0.8 + 0.2 * np.sin(1.7 * i)}

    def _true_param_groups(self, i):
        return {"growth": 1.0 + 0.2 * np.sin(1.1 * i), "death": 0.8 + 0.15 * np.cos(0.7 * i)}

    def _initial_param_groups(self, i):
        return {"growth": np.ones(i.shape), "death": np.full(i.shape, 0.8)}


_PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in (
        Decay(
            name="decay",
            description="Independent leaky integrators s' = 0.999 s + 0.001 p, "
                        "the system of the original slow-compilation report.",
            groups=("state",),
            param_groups=("p",),
        ),
        Oscillator(
            name="oscillator",
            description="A damped chain of masses and springs, each mass coupled to its "
                        "neighbours, integrated with semi-implicit Euler.",
            groups=("position", "velocity"),
            param_groups=("stiffness", "damping"),
            dt=0.05,
        ),
        LotkaVolterra(
            name="lotka_volterra",
            description="Independent nonlinear predator-prey patches integrated with "
                        "explicit Euler.",
            groups=("prey", "predator"),
            param_groups=("growth", "death"),
            dt=0.01,
        ),
    )
}


def problems() -> dict[str, Problem]:
    """All problems by name, in menu order: decay, oscillator, lotka_volterra, then the
    problems defined in this process (:func:`define_problem`), oldest first."""
    with _USER_LOCK:
        return {**_PROBLEMS, **_USER}


def get_problem(name: str) -> Problem:
    """The problem called ``name`` (built-in, or defined in this process).

    Raises:
        ValueError: if there is no such problem.
    """
    found = problems()
    return found[check_choice("problem", name, tuple(found))]


# ---------------------------------------------------------------------------
# The user's own problems (made in user_problems.py), registered by name
# ---------------------------------------------------------------------------

# Problems defined in this process, by name: what ``get_problem`` finds besides the built-in
# ones (the dashboard's problem menu, a sweep, a worker that was sent one). Each is a
# ``user_problems.UserProblem``; this module, which that one builds on, names only its base.
_USER: dict[str, Problem] = {}
_USER_LOCK = threading.Lock()


def user_problem(name: Any) -> Problem | None:
    """The problem defined in this process under ``name``, if any."""
    with _USER_LOCK:
        return _USER.get(name) if isinstance(name, str) else None
