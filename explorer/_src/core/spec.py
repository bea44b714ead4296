"""What to measure: a :class:`Spec`, checked by the one validator every entry point uses.

The library (``build_case``, ``sweep``), the CLI and the dashboard all check a case through
:meth:`Spec.validated` (whose case part is ``check_case``, the check ``build_case`` runs), so a
bad value gets the same one-line message wherever it was typed.
"""

from __future__ import annotations

import dataclasses
from ..util import validate as v
from .representations import check_case


@dataclasses.dataclass(frozen=True)
class Spec:
    """One measurement to take: a case (problem, representation, sizes) and a target."""

    problem: str
    representation: str
    n_states: int
    horizon: int
    target: str
    unroll: int = 1
    backend_requested: str | None = None
    repeats: int = 1
    runs: int = 5
    rollout: bool = False
    memory: bool = False

    @property
    def label(self) -> str:
        return (f"{self.problem}/{self.representation} N={self.n_states} H={self.horizon} "
                f"{self.target}")

    @property
    def key(self) -> tuple:
        """What makes two specs the same case (a stored ``ok`` row of it can be reused)."""
        return (self.problem, self.representation, self.n_states, self.horizon, self.target,
                self.unroll)

    def validated(self) -> Spec:
        """This spec, checked; a one-line ``ValueError`` names the first bad field."""
        check_case(self.problem, self.representation, self.n_states, self.horizon, self.unroll)
        v.check_target(self.target)
        v.check_int("repeats", self.repeats, 1, v.MAX_REPEATS)
        v.check_int("runs", self.runs, 1, v.MAX_RUNS)
        if self.backend_requested is not None and not isinstance(self.backend_requested, str):
            raise ValueError(f"backend must be a name such as 'cpu' or 'gpu', "
                             f"got {self.backend_requested!r}")
        for flag in ("rollout", "memory"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        return self
