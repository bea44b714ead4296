"""Test hooks: what tests of the explorer need beyond its public API, each under one stable name.

The explorer's own tests import ``explorer`` (the public API), this module, and nothing from
``explorer._src`` but the compat module (whose tests fail when an upstream project changes what
it leans on); ``tests/test_layers.py`` checks that. A hook is here because a test must reach
past what users call, and says why: a constant a test compares against, a piece of the store or
the worker that a test drives directly, a module whose setting a test replaces with pytest's
``monkeypatch``. Hooks are documented and kept stable across a release like the public API, but
they are not for programs: they may expose state that only a test should touch.

Every hook is imported on first use (PEP 562), so ``import explorer.testing`` imports neither
JAX nor Panel; the dashboard's hooks load Panel when first asked for.

==========================  =====================================================================
hook                        why a test needs it
==========================  =====================================================================
``rows_frame``              a results frame from row dicts, as ``Store.rows()`` makes one (plots
                            and fits tested on chosen rows without measuring them)
``REPRESENTATIONS``         the representation names in menu order (``explorer.representations()``
                            gives them with their descriptions)
``MAX_N_STATES``            the largest state count a case is built for (a larger one is refused)
``MAX_HORIZON``             the longest horizon a case is built for
``STORE_ENV_VAR``           the environment variable naming the default store (the CLI's tests
                            point it at a temporary file)
``MEASUREMENT_COLUMNS``     the store columns a ``Measurement`` fills
``SCHEMA_VERSION``          the store's schema version (an old store is migrated, a newer refused)
``append_line``             writes one line to a store's side file the way the store does (the
                            lock tests race it)
``load_example``            the shipped example sweep's rows
``load_watched``            the ``explorer.watch`` runs saved in a store
``save_watched``            saves a finished ``explorer.watch`` run into a store, as ``--store``
``isolated_problems``       a context in which user-defined problems start empty and are restored
                            after (conftest isolates every test with it)
``observed_cache_info``     hits and size of the cache of simulated observations (in the worker)
``hold_static``             splits a function's arguments into arrays and held non-array leaves,
                            as ``measure`` and ``diagnose`` do for ``eqx.filter_jit`` functions
``GUESS_OFFSET``            how far a user problem's default initial guess is from the truth
``run_one``                 measures one ``Spec`` in this process, as the worker does
``prepare``                 asks an idle worker to build a case ahead (``None`` when it will not)
``PREPARING``               the word the worker's status uses while it builds a case ahead
``backend_jobs``            the per-executor cache of "which backends does the worker have"
                            answers (a test answers for a worker that never started)
``JobExecutor``             the protocol every executor (local worker, Dask) follows
``JobPlace``                where a job is: queued, running, its position
``DaskExecutor``            the executor that measures on a Dask cluster
``dask_running``            the measurements running on this Dask worker process, by key (call it
                            on a worker, through ``client.run``)
``memory_limit_bytes``      parses a worker-memory setting in GiB
``limit_shared_worker``     sets the memory limit of the worker that served pages share
``shared_executor``         that shared worker (started on first use)
``out_of_memory``           whether an error is the worker running out of memory
``started_shared_worker``   that shared worker if it was started, else ``None``
``fresh_shared_worker``     a context in which the shared worker is not yet started and has no
                            limit, as in a new server process; a worker it started is shut down
``MAX_RUNS``                how many runs of neighbouring lanes ``explorer.jit`` reads as slices
                            before it gathers
``FINDING_KINDS``           every kind of finding ``diagnose`` can give, with its wording
``describe``                ``diagnose``'s name for a function (``jax.grad(loss)``)
``diagnose_trial``          the module of ``diagnose``'s rewrite trial: a test replaces its
                            ``rewrite`` or reads its ``BUDGET_S``
``sweep_plots``             the module of the sweep plots: a test replaces the fit they draw
``pack_module``             the module where ``explorer.pack`` is defined, and
``jit_module``              ``explorer.jit``'s: a test makes the one ``diagnose`` tries refuse
``validate``                the argument checks every entry point shares (one-line errors)
``load_user_reference``     loads a user's ``MODULE:ATTR`` as the CLI does
``WATCH_FIELDS``            the fields of an ``explorer.watch`` record, in order
``explain_cache_miss``      turns JAX's cache-miss explanation into ``explorer.watch``'s reason
``is_user_file``            whether a source file is the user's (not JAX's, ours or a library's)
``PageTemplate``            the page's template (the offline tests build one)
``PlotsSection``            the page's plots (a test builds one as a served page does)
``PLOT_LAYOUT``             how each plot's figure sits in the page (its sizing, height, margin)
``FIGURES_AHEAD``           the figures drawn ahead for the next served page (a test prepares
                            them, waits for them and sees which page takes them)
``PLOT_CACHE``              the plots shared by every page of a server (a test draws one in it)
``plotting``                the lock held while a plot is built or its figure drawn
``quiet_closed_pages``      silences the server's noise about pages closed mid-update
``settings_from_environment``  the served app's settings read from its environment
``program_html``            the Programs tab's HTML of one program text
``ProgramsSection``         the Programs tab
``side_by_side_html``       two programs' texts side by side
``ROLLOUT_MAX_N``           the largest N whose rollout the page draws
``LARGE_EQNS``              the equation count above which the page asks before inspecting
``before_inspecting``       what the page says before it inspects a large program
``program_cost``            the Programs tab's line on what a program costs
``progress_text``           the status line for a job at a place in the queue
``PROGRAM_LABEL``           how the Programs tab labels its choices
``projector_title``         the page's title in projector mode
``query_flag``              reads an on/off flag from the page's URL query
``WatchedPrograms``         the "Your program" tab's model
==========================  =====================================================================
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# Each hook and where it lives: imported on first use.
_HOOKS = {
    "rows_frame": ("._src.store.store", "to_frame"),
    "REPRESENTATIONS": ("._src.core.representations", "REPRESENTATIONS"),
    "MAX_N_STATES": ("._src.core.representations", "MAX_N_STATES"),
    "MAX_HORIZON": ("._src.core.representations", "MAX_HORIZON"),
    "STORE_ENV_VAR": ("._src.store.store", "ENV_VAR"),
    "MEASUREMENT_COLUMNS": ("._src.store.store", "MEASUREMENT_COLUMNS"),
    "SCHEMA_VERSION": ("._src.store.schema", "SCHEMA_VERSION"),
    "append_line": ("._src.store.store", "_append_line"),
    "load_example": ("._src.store.example", "load_example"),
    "load_watched": ("._src.store.watched", "load"),
    "save_watched": ("._src.watch.storage", "save"),
    "hold_static": ("._src.core.leaves", "hold_static"),
    "GUESS_OFFSET": ("._src.core.user_problems", "GUESS_OFFSET"),
    "run_one": ("._src.jobs.run", "run_one"),
    "prepare": ("._src.jobs.run", "prepare"),
    "PREPARING": ("._src.jobs.run", "PREPARING"),
    "backend_jobs": ("._src.jobs.run", "_backend_jobs"),
    "JobExecutor": ("._src.jobs.protocol", "JobExecutor"),
    "JobPlace": ("._src.jobs.protocol", "JobPlace"),
    "DaskExecutor": ("._src.jobs.cluster", "DaskExecutor"),
    "memory_limit_bytes": ("._src.jobs.worker", "memory_limit_bytes"),
    "limit_shared_worker": ("._src.jobs.worker", "limit_shared_worker"),
    "shared_executor": ("._src.jobs.worker", "shared_executor"),
    "out_of_memory": ("._src.jobs.worker", "out_of_memory"),
    "MAX_RUNS": ("._src.pack.emit", "_MAX_RUNS"),
    "FINDING_KINDS": ("._src.diagnose.findings", "KINDS"),
    "describe": ("._src.diagnose.diagnose", "describe"),
    "load_user_reference": ("._src.util.userref", "load"),
    "WATCH_FIELDS": ("._src.watch.record", "FIELDS"),
    "explain_cache_miss": ("._src.watch.record", "explain"),
    "is_user_file": ("._src.watch.record", "is_user_file"),
    "PageTemplate": ("._src.dashboard.page", "_PageTemplate"),
    "PlotsSection": ("._src.dashboard.sections", "PlotsSection"),
    "PLOT_LAYOUT": ("._src.dashboard.sections", "PLOT_LAYOUT"),
    "FIGURES_AHEAD": ("._src.dashboard.plotcache", "FIGURES_AHEAD"),
    "PLOT_CACHE": ("._src.dashboard.plotcache", "PLOT_CACHE"),
    "plotting": ("._src.dashboard.plotcache", "plotting"),
    "quiet_closed_pages": ("._src.dashboard.page", "_quiet_closed_pages"),
    "settings_from_environment": ("._src.dashboard.page", "settings_from_environment"),
    "program_html": ("._src.dashboard.page", "program_html"),
    "ProgramsSection": ("._src.dashboard.inspection", "ProgramsSection"),
    "side_by_side_html": ("._src.dashboard.inspection", "side_by_side_html"),
    "ROLLOUT_MAX_N": ("._src.dashboard.model.model", "ROLLOUT_MAX_N"),
    "LARGE_EQNS": ("._src.dashboard.model.programs", "LARGE_EQNS"),
    "before_inspecting": ("._src.dashboard.model.programs", "_before_inspecting"),
    "program_cost": ("._src.dashboard.model.programs", "program_cost"),
    "progress_text": ("._src.dashboard.model.status", "progress_text"),
    "PROGRAM_LABEL": ("._src.dashboard.model.submission", "PROGRAM_LABEL"),
    "projector_title": ("._src.dashboard.model.view", "projector_title"),
    "query_flag": ("._src.dashboard.model.view", "query_flag"),
    "WatchedPrograms": ("._src.dashboard.model.watched", "WatchedPrograms"),
}
# Hooks that are whole modules (a test replaces one of their settings with monkeypatch).
_MODULES = {
    "diagnose_trial": "._src.diagnose.trial",
    "sweep_plots": "._src.plots.sweep",
    "pack_module": "._src.pack.pack",
    "jit_module": "._src.pack.jit",
    "validate": "._src.util.validate",
}


def _module(name: str) -> Any:
    import importlib  # noqa: PLC0415

    return importlib.import_module(name, "explorer")


@contextlib.contextmanager
def isolated_problems() -> Iterator[None]:
    """A context in which no user-defined problem is registered (the built-in ones are); those
    registered before are back when it ends, and those defined inside are gone."""
    registry = _module("._src.core.problems")._USER
    saved = dict(registry)
    registry.clear()
    try:
        yield
    finally:
        registry.clear()
        registry.update(saved)


def observed_cache_info() -> tuple[int, int]:
    """Hits and size of this process's cache of simulated observations (a case built ahead
    fills it; the measurement that follows hits it)."""
    info = _module("._src.core.problems")._observed.cache_info()
    return info.hits, info.currsize


def dask_running() -> dict[str, Any]:
    """The measurements running on this Dask worker process: key -> (executor, future)."""
    return _module("._src.jobs.cluster")._running


def started_shared_worker() -> Any:
    """The worker that served pages share, if this process started it; else ``None``."""
    return _module("._src.jobs.worker")._shared


@contextlib.contextmanager
def fresh_shared_worker() -> Iterator[None]:
    """A context in which the shared worker is not started and has no memory limit, as in a new
    server process. A worker started inside is shut down at the end, and the one before (if
    any) is the shared worker again."""
    worker = _module("._src.jobs.worker")
    saved = worker._shared, worker._shared_memory_limit
    worker._shared, worker._shared_memory_limit = None, None
    try:
        yield
    finally:
        if worker._shared is not None:
            worker._shared.shutdown()
        worker._shared, worker._shared_memory_limit = saved


__all__ = sorted([*_HOOKS, *_MODULES, "dask_running", "fresh_shared_worker",
                  "isolated_problems", "observed_cache_info", "started_shared_worker"])


def __getattr__(name: str) -> Any:
    if name in _HOOKS:
        where, attr = _HOOKS[name]
        value = getattr(_module(where), attr)
    elif name in _MODULES:
        value = _module(_MODULES[name])
    else:
        raise AttributeError(f"module 'explorer.testing' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
