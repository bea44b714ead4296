"""State and logic of the dashboard: ``param.Parameterized`` parts that import no Panel.

Everything a page does (run, sweep, cancel, inspect, compare) is a method here, so it can be
driven from tests and notebooks without a browser; ``explorer/_src/dashboard/page.py`` only lays
widgets out. :class:`ExplorerModel` composes one page from its parts, each in its own module:

- :class:`Session` (``session``): the status line, the alert, and :attr:`Session.dispatch`, how
  background threads reach the page's event loop;
- :class:`CaseControls` (``controls``): what to measure, checked into specs;
- :class:`Results` (``results``): stored and measured rows, the example sweep, trajectories;
- :class:`PlotView` (``view``): view choices, the four plots and their redraws;
- :class:`JobQueue` (``jobs``): run, sweep, cancel, and the status of background jobs (its
  own parts: threads, submission, status line, measuring, preparing ahead; see its module);
- :class:`ProgramInspector` (``programs``): inspect a result's programs (asking first when
  that compiles a case never measured), compare two;
- :class:`RunComparison` (``runs``): two groups of rows (JAX version, backend, host...) as ratios;
- :class:`WatchedPrograms` (``watched``): programs ``pytree-explorer watch --store`` kept, ranked.

Per-session state lives in the instance. Measurements go through
:func:`explorer.shared_executor` (one queue for every session, one job at a time) and are stored
in the :class:`explorer.Store` the moment they finish.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any

import pandas as pd
import param

from ... import plots as _plots
from ...core.problems import problems
from ...store.store import Store
from ..plotcache import plotting
from .controls import MAX_N_STATES, N_CHOICES, ROLLOUT_MAX_N, CaseControls
from .jobs import JobQueue
from .programs import ProgramInspector
from .results import Results
from .runs import RunComparison
from .session import Session
from .view import PlotView
from .watched import WatchedPrograms

__all__ = ["MAX_N_STATES", "N_CHOICES", "ROLLOUT_MAX_N", "CaseControls", "ExplorerModel",
           "JobQueue", "PlotView", "ProgramInspector", "Results", "RunComparison", "Session",
           "WatchedPrograms"]

_PARTS = {"session": Session, "controls": CaseControls, "results": Results, "view": PlotView,
          "programs": ProgramInspector, "runs": RunComparison, "watched": WatchedPrograms}


class ExplorerModel(param.Parameterized):
    """One page of the explorer: the controls, the results, and what is running.

    Args:
      store: where results are stored and read (default: :func:`explorer.default_path`).
      executor: where measurements run (default: :func:`explorer.shared_executor`, the one
        queue every session shares).
      **params: parameters of the parts, by name (``problem``, ``n_states``, ``stage``...).
    """

    session = param.ClassSelector(class_=Session, precedence=-1)
    controls = param.ClassSelector(class_=CaseControls, precedence=-1)
    results = param.ClassSelector(class_=Results, precedence=-1)
    view = param.ClassSelector(class_=PlotView, precedence=-1)
    jobs = param.ClassSelector(class_=JobQueue, precedence=-1)
    programs = param.ClassSelector(class_=ProgramInspector, precedence=-1)
    runs = param.ClassSelector(class_=RunComparison, precedence=-1)
    watched = param.ClassSelector(class_=WatchedPrograms, precedence=-1)

    @classmethod
    def part_params(cls) -> dict[str, str]:
        """Which part holds each parameter a caller may set by name."""
        return {name: part for part, kind in _PARTS.items() for name in kind.param
                if name != "name" and not isinstance(kind.param[name], param.ClassSelector)}

    def __init__(self, *, store: Store | str | None = None, executor: cf.Executor | None = None,
                 **params: Any):
        owners = self.part_params()
        unknown = sorted(set(params) - set(owners))
        if unknown:
            raise ValueError(f"unknown parameter(s) {', '.join(unknown)}; choose from: "
                             f"{', '.join(sorted(owners))}")
        given = {part: {k: v for k, v in params.items() if owners[k] == part} for part in _PARTS}
        session = Session(**given["session"])
        CaseControls.param.problem.objects = list(problems())  # with define_problem's too
        controls = CaseControls(session=session, **given["controls"])
        results = Results(store=store if isinstance(store, Store) else Store(store),
                          session=session, **given["results"])
        view = PlotView(controls=controls, results=results, session=session, **given["view"])
        jobs = JobQueue(executor=executor, session=session, controls=controls, results=results,
                        view=view)
        programs = ProgramInspector(session=session, controls=controls, results=results,
                                    view=view, jobs=jobs, **given["programs"])
        runs = RunComparison(results=results, **given["runs"])
        watched = WatchedPrograms(store=results.store, **given["watched"])
        super().__init__(session=session, controls=controls, results=results, view=view,
                         jobs=jobs, programs=programs, runs=runs, watched=watched)
        self._follow_latest(explicit=set(params))
        controls.ask_backends(jobs.executor)

    def _follow_latest(self, explicit: set[str]) -> None:
        """Open on the slice of the most recent stored measurement, so the first view has
        something in its plots (controls given explicitly are left alone); with the example
        asked for (``show_example=True``), on the example's slice, whatever the store holds."""
        latest = self.results.latest_ok()
        if "show_example" in explicit and self.results.show_example:
            latest = self.results.example_case()
            if latest is not None:
                latest = {**latest, "n_states": None}  # the sweep's every N is there
        if latest is None:
            return
        values = {"problem": latest["problem"], "horizon": latest["horizon"],
                  "unroll": latest["unroll"], "n_states": latest["n_states"],
                  "show_target": latest["target"]}
        updates: dict[str, dict[str, Any]] = {"controls": {}, "view": {}}
        for name, value in values.items():
            if name in explicit or value is None or pd.isna(value):
                continue
            value = value if isinstance(value, str) else int(value)
            part = self.view if name == "show_target" else self.controls
            objects = getattr(part.param[name], "objects", None)
            if objects is None or value in objects:
                updates["view" if part is self.view else "controls"][name] = value
        if updates["controls"]:
            self.controls.param.update(**updates["controls"])
        if updates["view"]:
            self.view.param.update(**updates["view"])

    # -- what a page does --------------------------------------------------------------
    @property
    def store(self) -> Store:
        return self.results.store

    def run(self) -> bool:
        """Measure the chosen representations at the chosen N; ``False`` if it could not start."""
        return self.jobs.run()

    def sweep(self) -> bool:
        """Measure the chosen representations at every N of ``controls.sweep_n_states``."""
        return self.jobs.sweep()

    def cancel(self) -> None:
        """Stop this session's run, sweep, inspection or comparison."""
        self.jobs.cancel()

    def refresh(self) -> int:
        """Add rows other sessions (or the CLI) stored since the last look; return how many."""
        return self.results.refresh()

    def inspect(self, row_id: int | None = None, confirmed: bool = False) -> bool:
        """Fetch the programs of a result (the selected one by default); a row never measured
        waits for ``confirmed`` (see :meth:`ProgramInspector.inspect`)."""
        return self.programs.inspect(row_id, confirmed)

    def compare(self) -> bool:
        """Say whether ``programs.compare_a`` and ``compare_b`` are the same program to XLA."""
        return self.programs.compare()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this session's background jobs are done (for scripts and tests)."""
        return self.jobs.wait(timeout)

    def close(self) -> None:
        """Stop this session's work (its queued and running jobs are cancelled)."""
        self.jobs.close()

    def plots(self) -> list:
        """The four plots as they are now (for notebooks and export)."""
        return self.view.plots()

    def html_bytes(self) -> bytes:
        """The four plots as one standalone HTML page."""
        with plotting():
            return _plots.export_html(self.plots(), title="PyTree Compile Explorer plots")
