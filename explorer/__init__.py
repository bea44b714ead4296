"""PyTree Compile Explorer: what does the shape of your JAX state cost, and what to write instead.

The measuring core (everything imported here) uses no Panel; the dashboard is loaded on first
use of :func:`dashboard`, the plotting functions (HoloViews) on first use of
:mod:`explorer.plots`.
"""

from ._src.core.blame import blame as blame
from ._src.core.compare import Comparison as Comparison
from ._src.core.compare import compare as compare
from ._src.core.fits import fit_power_law as fit_power_law
from ._src.core.fits import format_exponent as format_exponent
from ._src.core.fits import scaling_exponents as scaling_exponents
from ._src.core.measure import Measurement as Measurement
from ._src.core.measure import count_eqns as count_eqns
from ._src.core.measure import measure as measure
from ._src.core.measure import measure_case as measure_case
from ._src.core.measure import program_texts as program_texts
from ._src.core.named import NamedArray as NamedArray
from ._src.core.problems import Problem as Problem
from ._src.core.user_problems import UserProblem as UserProblem
from ._src.core.user_problems import define_problem as define_problem
from ._src.core.problems import get_problem as get_problem
from ._src.core.problems import problems as problems
from ._src.core.representations import Case as Case
from ._src.core.representations import build_case as build_case
from ._src.core.representations import representations as representations
from ._src.core.runs import compare_runs as compare_runs
from ._src.core.spec import Spec as Spec
from ._src.diagnose.diagnose import Diagnosis as Diagnosis
from ._src.diagnose.diagnose import Projection as Projection
from ._src.diagnose.diagnose import diagnose as diagnose
from ._src.diagnose.findings import Finding as Finding
from ._src.jobs.sweep import SweepEvent as SweepEvent
from ._src.jobs.sweep import sweep as sweep
from ._src.jobs.worker import MeasurementTimeout as MeasurementTimeout
from ._src.jobs.worker import WorkerCancelled as WorkerCancelled
from ._src.jobs.worker import WorkerCrashed as WorkerCrashed
from ._src.jobs.worker import WorkerExecutor as WorkerExecutor
from ._src.jobs.worker import WorkerOutOfMemory as WorkerOutOfMemory
from ._src.pack.jit import jit as jit
from ._src.pack.pack import PackReport as PackReport
from ._src.pack.pack import Packed as Packed
from ._src.pack.pack import pack as pack
from ._src.store.store import COLUMNS as COLUMNS
from ._src.store.store import RowPending as RowPending
from ._src.store.store import Store as Store
from ._src.store.store import StoreError as StoreError
from ._src.store.store import StoreWarning as StoreWarning
from ._src.store.store import default_path as default_path
from ._src.watch import watch as watch

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
    # The dashboard needs Panel and the plots HoloViews: import them only when asked, so the
    # core stays light and Panel-free.
    if name in ("dashboard", "Dashboard", "ExplorerModel"):
        from ._src.dashboard import page as _dashboard  # noqa: PLC0415

        return getattr(_dashboard, name)
    if name == "plots":
        import importlib  # noqa: PLC0415

        return importlib.import_module(".plots", __name__)
    raise AttributeError(f"module 'explorer' has no attribute {name!r}")
