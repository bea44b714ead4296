"""PyTree Compile Explorer: what does the shape of your JAX state cost, and what to write instead.

The measuring core (everything imported here) uses no Panel; the dashboard is loaded on first
use of :func:`dashboard`, the plotting functions (HoloViews) on first use of
:mod:`explorer.plots`.
"""

from ._blame import blame as blame
from ._compare import Comparison as Comparison
from ._compare import compare as compare
from ._diagnose import Diagnosis as Diagnosis
from ._diagnose import Projection as Projection
from ._diagnose import diagnose as diagnose
from ._findings import Finding as Finding
from ._fits import fit_power_law as fit_power_law
from ._fits import format_exponent as format_exponent
from ._fits import scaling_exponents as scaling_exponents
from ._measure import Measurement as Measurement
from ._measure import count_eqns as count_eqns
from ._measure import measure as measure
from ._measure import measure_case as measure_case
from ._measure import program_texts as program_texts
from ._named import NamedArray as NamedArray
from ._pack import PackReport as PackReport
from ._pack import Packed as Packed
from ._pack import pack as pack
from ._problems import Problem as Problem
from ._problems import UserProblem as UserProblem
from ._problems import define_problem as define_problem
from ._problems import get_problem as get_problem
from ._problems import problems as problems
from ._representations import Case as Case
from ._representations import build_case as build_case
from ._representations import representations as representations
from ._runs import compare_runs as compare_runs
from ._spec import Spec as Spec
from ._store import COLUMNS as COLUMNS
from ._store import Store as Store
from ._store import RowPending as RowPending
from ._store import StoreError as StoreError
from ._store import StoreWarning as StoreWarning
from ._store import default_path as default_path
from ._sweep import SweepEvent as SweepEvent
from ._sweep import sweep as sweep
from ._worker import MeasurementTimeout as MeasurementTimeout
from ._worker import WorkerCancelled as WorkerCancelled
from ._worker import WorkerCrashed as WorkerCrashed
from ._worker import WorkerExecutor as WorkerExecutor
from ._worker import WorkerOutOfMemory as WorkerOutOfMemory

__version__ = "0.1.0"


def __getattr__(name: str):
    # The dashboard needs Panel and the plots HoloViews: import them only when asked, so the
    # core stays light and Panel-free.
    if name in ("dashboard", "Dashboard", "ExplorerModel"):
        from . import _dashboard  # noqa: PLC0415

        return getattr(_dashboard, name)
    if name == "plots":
        import importlib  # noqa: PLC0415

        return importlib.import_module(".plots", __name__)
    raise AttributeError(f"module 'explorer' has no attribute {name!r}")
