"""PyTree Compile Explorer: what does the shape of your JAX state cost, and what to write instead.

The measuring core (everything listed here) uses no Panel. Every public name is imported on
first use: ``import explorer`` itself imports no JAX (the command line's help and argument
errors answer at once); the dashboard loads Panel, and :mod:`explorer.plots` HoloViews, when
first used.
"""

# Each public name and the private module it lives in: imported on first use (PEP 562), so
# ``pytree-explorer --help``, a bad argument or a store listing do not wait for JAX.
_PUBLIC = {
    "blame": "._src.core.blame",
    "Comparison": "._src.core.compare",
    "compare": "._src.core.compare",
    "fit_power_law": "._src.core.fits",
    "format_exponent": "._src.core.fits",
    "scaling_exponents": "._src.core.fits",
    "Measurement": "._src.core.measure",
    "count_eqns": "._src.core.measure",
    "measure": "._src.core.measure",
    "measure_case": "._src.core.measure",
    "program_texts": "._src.core.measure",
    "NamedArray": "._src.core.named",
    "Problem": "._src.core.problems",
    "UserProblem": "._src.core.user_problems",
    "define_problem": "._src.core.user_problems",
    "get_problem": "._src.core.problems",
    "problems": "._src.core.problems",
    "Case": "._src.core.representations",
    "build_case": "._src.core.representations",
    "representations": "._src.core.representations",
    "compare_runs": "._src.core.runs",
    "Spec": "._src.core.spec",
    "Diagnosis": "._src.diagnose.diagnose",
    "Projection": "._src.diagnose.diagnose",
    "diagnose": "._src.diagnose.diagnose",
    "Finding": "._src.diagnose.findings",
    "SweepEvent": "._src.jobs.sweep",
    "sweep": "._src.jobs.sweep",
    "MeasurementTimeout": "._src.jobs.worker",
    "WorkerCancelled": "._src.jobs.worker",
    "WorkerCrashed": "._src.jobs.worker",
    "WorkerExecutor": "._src.jobs.worker",
    "WorkerOutOfMemory": "._src.jobs.worker",
    "jit": "._src.pack.jit",
    "PackReport": "._src.pack.pack",
    "Packed": "._src.pack.pack",
    "pack": "._src.pack.pack",
    "COLUMNS": "._src.store.store",
    "RowPending": "._src.store.store",
    "Store": "._src.store.store",
    "StoreError": "._src.store.store",
    "StoreWarning": "._src.store.store",
    "default_path": "._src.store.store",
    "watch": "._src.watch",
}

# The public API. ``dashboard``, ``Dashboard``, ``ExplorerModel`` and ``plots`` are public too, but
# loaded on first use (Panel, HoloViews): a star import must not pull them into the core.
__all__ = [
    "__version__",
    "blame",
    "build_case",
    "Case",
    "COLUMNS",
    "compare",
    "compare_runs",
    "Comparison",
    "count_eqns",
    "default_path",
    "define_problem",
    "diagnose",
    "Diagnosis",
    "Finding",
    "fit_power_law",
    "format_exponent",
    "get_problem",
    "measure",
    "measure_case",
    "Measurement",
    "MeasurementTimeout",
    "NamedArray",
    "jit",
    "pack",
    "Packed",
    "PackReport",
    "Problem",
    "problems",
    "program_texts",
    "Projection",
    "representations",
    "RowPending",
    "scaling_exponents",
    "Spec",
    "Store",
    "StoreError",
    "StoreWarning",
    "sweep",
    "SweepEvent",
    "UserProblem",
    "watch",
    "WorkerCancelled",
    "WorkerCrashed",
    "WorkerExecutor",
    "WorkerOutOfMemory",
]

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib  # noqa: PLC0415

        value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
        globals()[name] = value  # asked once
        return value
    # The dashboard needs Panel and the plots HoloViews: imported only when asked, so the
    # core stays light and Panel-free.
    if name in ("dashboard", "Dashboard", "ExplorerModel"):
        from ._src.dashboard import page as _dashboard  # noqa: PLC0415

        return getattr(_dashboard, name)
    if name == "plots":
        import importlib  # noqa: PLC0415

        return importlib.import_module(".plots", __name__)
    raise AttributeError(f"module 'explorer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, "dashboard", "Dashboard", "ExplorerModel", "plots"})
