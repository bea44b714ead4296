"""What to measure: the controls of a dashboard page, checked into :class:`Spec` s.

Numbers allow ``None`` (an emptied input box) and carry no hard bounds: :meth:`CaseControls.specs`
checks them with the core's own validators and explains a bad value in one line.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import weakref
from collections.abc import Sequence

import param

from ...core.problems import get_problem
from ...core.problems import problems as _problems
from ...core.representations import REPRESENTATIONS
from ...core.spec import Spec
from ...jobs import run as _run
from ...util import validate as v
from .session import Session

__all__ = ["MAX_N_STATES", "MAX_TIMEOUT_S", "N_CHOICES", "ROLLOUT_MAX_N", "TARGET_CHOICES",
           "CaseControls", "representations_of"]

N_CHOICES: tuple[int, ...] = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
MAX_N_STATES = v.MAX_N_STATES
# Trajectories are captured (and stored) only up to this state count: enough to see the curves
# coincide, small enough to keep the store light.
ROLLOUT_MAX_N = 300
MAX_TIMEOUT_S = 3600.0
TARGET_CHOICES = ("loss", "grad", "both")


class CaseControls(param.Parameterized):
    """The case a page measures: problem, sizes, representations, target, backend, timeout."""

    problem = param.Selector(default="decay", objects=list(_problems()),
                             doc="The dynamical system.")
    n_states = param.Integer(default=100, softbounds=(1, MAX_N_STATES), label="State count N",
                             allow_None=True,
                             doc=f"Units per state group, 1 to {MAX_N_STATES}.")
    horizon = param.Integer(default=200, softbounds=(1, 1000), label="Horizon", allow_None=True,
                            doc="Steps of the scan.")
    representations = param.ListSelector(default=["dict", "array"], objects=list(REPRESENTATIONS),
                                         doc="How the state is held; several at once.")
    target = param.Selector(default="loss", objects=list(TARGET_CHOICES),
                            doc="Measure the loss, its gradient, or both.")
    unroll = param.Integer(default=1, softbounds=(1, 32), label="Scan unroll", allow_None=True)
    backend = param.Selector(default="cpu", objects=["cpu"],
                             doc="The devices JAX sees (asked from the worker).")
    backends_known = param.Boolean(default=False, precedence=-1,
                                   doc="The worker has said which devices JAX sees.")
    sweep_n_states = param.ListSelector(default=[1, 3, 10, 30, 100], objects=list(N_CHOICES),
                                        label="Sweep over N")
    timeout_s = param.Number(default=300.0, softbounds=(1.0, MAX_TIMEOUT_S), allow_None=True,
                             label="Timeout per case (s)")

    input_error = param.String(default="", precedence=-1, doc="""
        What is wrong with N, the horizon, the unroll or the timeout as typed, in one line
        (shown next to the controls), or empty.""")

    session = param.ClassSelector(class_=Session, precedence=-1)

    @param.depends("problem", watch=True, on_init=True)
    def _offer_representations(self) -> None:
        """Offer only the representations the problem can be measured in (one defined without
        ``step_grouped=`` has no ``module``, ``struct`` or ``named``: offered, they were refused
        in the worker seconds after Run)."""
        offered = representations_of(self.problem)
        self.param.representations.objects = offered
        ticked = [r for r in (self.representations or []) if r in offered]
        if ticked != list(self.representations or []):
            self.representations = ticked or offered[:2]

    @param.depends("n_states", "horizon", "unroll", "timeout_s", watch=True, on_init=True)
    def _check_inputs(self) -> None:
        try:
            v.check_ints("n_states", [self.n_states], 1, MAX_N_STATES)
            v.check_horizon(self.horizon)
            v.check_unroll(self.unroll)
            _check_timeout(self.timeout_s)
        except (ValueError, TypeError) as err:
            self.input_error = str(err).splitlines()[0]
        else:
            self.input_error = ""

    def specs(self, sizes: Sequence[int]) -> list[Spec]:
        """Checked specs for the current controls at each of ``sizes``; a one-line
        ``ValueError`` (or ``TypeError``) names the first bad value."""
        reps = v.check_many("representation", self.representations,
                            representations_of(self.problem))
        sizes = v.check_ints("n_states", sizes, 1, MAX_N_STATES)
        v.check_horizon(self.horizon)
        v.check_unroll(self.unroll)
        if self.target not in TARGET_CHOICES:
            raise ValueError(f"unknown target {self.target!r}; choose loss, grad or both")
        targets = ("loss", "grad") if self.target == "both" else (self.target,)
        _check_timeout(self.timeout_s)
        if self.backend not in self.param.backend.objects:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of: "
                             f"{', '.join(self.param.backend.objects)}")
        return [Spec(self.problem, rep, n, self.horizon, tgt, self.unroll, self.backend,
                     rollout=n <= ROLLOUT_MAX_N).validated()
                for n in sizes for tgt in targets for rep in reps]

    def bad_view(self) -> str | None:
        """What is wrong with the horizon or unroll the plots filter on, if anything."""
        try:
            v.check_horizon(self.horizon)
            v.check_unroll(self.unroll)
        except (ValueError, TypeError) as err:
            return str(err).splitlines()[0]
        return None

    # -- backends ----------------------------------------------------------------------
    def ask_backends(self, executor: cf.Executor) -> None:
        """Ask the worker which devices JAX sees; the answer sets :attr:`backend`."""
        try:
            future = _run.backends(executor)
        except RuntimeError as err:  # executor shut down
            self.session.show(f"Cannot list JAX backends: {err}", "warning")
            return
        # The future is shared by every page of the server and keeps its callbacks for good:
        # a callback holding this page would keep it in memory after its session ended.
        page = weakref.ref(self)

        def answered(f: cf.Future) -> None:
            controls = page()
            if controls is not None:
                controls.session.post(functools.partial(controls._set_backends, f))

        future.add_done_callback(answered)

    def _set_backends(self, future: cf.Future) -> None:
        try:
            found = list(future.result())
        except BaseException as err:  # noqa: BLE001 - shown, never raised into the page
            self.session.show(f"Could not ask the worker which devices JAX sees ({err}); "
                              "using cpu.", "warning")
            return
        found = found or ["cpu"]
        self.param.backend.objects = found
        # Until the answer came, cpu was the only choice; now default to the accelerator.
        accelerators = [b for b in found if b != "cpu"]
        self.param.update(backend=accelerators[0] if accelerators else found[0],
                          backends_known=True)


def representations_of(problem: str) -> list[str]:
    """The representations ``problem`` can be measured in, in menu order (all of them for a
    name that is not a problem: the check of the problem says what is wrong)."""
    try:
        found = get_problem(problem)
    except ValueError:
        return list(REPRESENTATIONS)
    return [r for r in REPRESENTATIONS if found.unsupported(r) is None]


def _check_timeout(value: float | None) -> None:
    if value is None or not 0 < value <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout must be between 0 and {MAX_TIMEOUT_S:g} s, got {value!r}")
