"""``pytree-explorer``: headless sweeps, and the results stored from them.

Bad input ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .util import validate as v
from .util.interrupts import interrupt, interrupts_never_dropped

if TYPE_CHECKING:  # imported where used: --help and a bad argument import neither it nor JAX
    import pandas as pd

# The table's columns that fit a terminal: the wide text columns are left to `export`.
_WIDE = ("source", "device_kind", "jax_version", "host", "error")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        self.exit(2, f"pytree-explorer: error: {message}\n")

    def format_help(self) -> str:
        """The help, with the representations named from their registry (imported only when
        this help is shown: it needs JAX)."""
        for action in self._actions:
            if action.help and _REPRESENTATIONS in action.help:
                from .core.representations import REPRESENTATIONS  # noqa: PLC0415

                action.help = action.help.replace(_REPRESENTATIONS, ", ".join(REPRESENTATIONS))
        return super().format_help()


_REPRESENTATIONS = "{representations}"  # filled in by _Parser.format_help


def _int_list(name: str, low: int, high: int):
    def parse(text: str) -> list[int]:
        values = []
        for part in text.replace(",", " ").split():
            try:
                values.append(int(part))
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{name} must be integers between {low} and {high}, got {part!r}") from None
        try:
            return list(v.check_ints(name, values, low, high))
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def _one_int(name: str, low: int, high: int):
    """One integer: a list such as ``1,2`` is refused rather than cut to its first value."""
    many = _int_list(name, low, high)

    def parse(text: str) -> int:
        values = many(text)
        if len(values) != 1:
            raise argparse.ArgumentTypeError(
                f"{name} takes one value per sweep, got {text!r} (run one sweep per value)")
        return values[0]
    return parse


def _status(text: str) -> str:
    from .store.store import STATUSES  # noqa: PLC0415

    if text not in STATUSES:
        raise argparse.ArgumentTypeError(
            f"unknown status {text!r}; choose one of: {', '.join(STATUSES)}")
    return text


def _name_list(text: str) -> list[str]:
    return [p for p in text.replace(",", " ").split() if p]


def _timeout(text: str) -> float | None:
    """Seconds, or ``none`` for no limit: the library's one meaning (``check_timeout``)."""
    if text.strip().lower() == "none":
        return None
    try:
        return v.check_timeout(float(text))
    except ValueError as err:
        if "timeout" in str(err):
            raise argparse.ArgumentTypeError(str(err)) from None
        raise argparse.ArgumentTypeError(
            f"timeout must be a number of seconds or 'none', got {text!r}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"lock-wait must be a number of seconds >= 0, got {text!r}")
    return value


def _gib(text: str) -> float:
    """A memory limit in GiB (at least what a worker needs to start)."""
    from .jobs.worker import memory_limit_bytes  # noqa: PLC0415

    try:
        return memory_limit_bytes(text, what="worker-memory") / 2**30
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pytree-explorer",
                     description="Measure what the shape of your JAX state costs to compile.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    store_help = "SQLite results file (default: $PYTREE_EXPLORER_DB or ~/.local/share/pytree-explorer/results.sqlite)"

    def add(name: str, text: str, description: str = "") -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}. "
                              f"{description}".strip())

    s = add("sweep", "measure a problem over state counts and store every row",
            "Each case is compiled cold in a worker process and stored the moment it finishes; "
            "a second run measures only the cases not yet stored (unless --redo).")
    s.add_argument("--problem", default="decay",
                   help="decay, oscillator, lotka_volterra, or your own as MODULE:ATTR (a "
                        "problem made by explorer.define_problem; MODULE may be a .py path)")
    s.add_argument("--representations", "-r", type=_name_list, default=None,
                   help="comma-separated, of: " + _REPRESENTATIONS + " (default: every one "
                        "the problem can be measured in)")
    s.add_argument("--n-states", "-n", type=_int_list("n_states", 1, v.MAX_N_STATES),
                   default=[10, 30, 100], help="comma-separated state counts (default 10,30,100)")
    s.add_argument("--horizons", type=_int_list("horizon", 1, v.MAX_HORIZON), default=[200],
                   help="comma-separated scan lengths (default 200)")
    s.add_argument("--targets", type=_name_list, default=["loss", "grad"],
                   help="comma-separated: loss, grad (default loss,grad)")
    s.add_argument("--unroll", type=_one_int("unroll", 1, v.MAX_UNROLL), default=1,
                   help="scan unroll (default 1)")
    s.add_argument("--repeats", type=_one_int("repeats", 1, v.MAX_REPEATS), default=1,
                   help="cold repeats per measurement; medians are stored (default 1)")
    s.add_argument("--backend", default=None, help="cpu, gpu, ... (default: JAX's default)")
    s.add_argument("--timeout", type=_timeout, default=600.0,
                   help="seconds one measurement may take before its worker is killed "
                        "(default 600; 'none' for no limit)")
    s.add_argument("--store", default=None, help=store_help)
    s.add_argument("--lock-wait", type=_seconds, default=60.0, metavar="SECONDS",
                   help="how long a finished row waits for a store locked by another process; "
                        "then it is kept in STORE.pending.jsonl and added by the next sweep "
                        "(default 60)")
    s.add_argument("--no-store", action="store_true", help="do not write to the store")
    s.add_argument("--redo", action="store_true", help="measure again cases already stored")
    s.add_argument("--rollouts", action="store_true", help="also store rollout trajectories")
    s.add_argument("--memory", action="store_true",
                   help="also store XLA's memory analysis (temp, argument, output, code bytes)")
    s.add_argument("--out", default=None, help="also write this sweep's rows to a .csv or .parquet file")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    s.add_argument("--python", default=None,
                   help="interpreter that measures (another environment's JAX; default: this one)")

    s.add_argument("--scheduler", default=None,
                   help="Dask scheduler address (tcp://HOST:PORT): measure on that cluster")
    s.add_argument("--per-host", type=_int_list("per-host", 1, 1024), default=[1],
                   help="on a cluster, measurements at once per host (default 1)")
    s.add_argument("--worker-memory", type=_gib, default=None, metavar="GIB",
                   help="cap the memory of the worker that measures (CPU only; at least 2): "
                        "a case that needs more is stored as out of memory and the sweep goes "
                        "on (default: no cap)")

    cr = sub.add_parser("compare-runs", help="two groups of stored rows side by side, as ratios")
    cr.add_argument("--by", default="jax_version",
                    help="jax_version, backend, device_kind, host or python (default jax_version)")
    cr.add_argument("--a", default=None, help="the baseline group (default: the first of two)")
    cr.add_argument("--b", default=None, help="the other group (default: the second of two)")
    cr.add_argument("--store", default=None, help=store_help)

    ls = add("list", "print stored rows", "Reads the store read-only; it is never modified.")
    ls.add_argument("--store", default=None, help=store_help)
    ls.add_argument("--run", default=None, help="only this run id")
    ls.add_argument("--status", type=_status, default=None,
                    help="only rows with this status (ok, timeout, ...)")
    ls.add_argument("--last", type=_int_list("last", 1, 10**9), default=[50], help="at most this many rows (default 50)")

    ex = add("export", "write stored rows to a .csv or .parquet file",
             "Reads the store read-only; the output may not be the store itself.")
    ex.add_argument("out", help="output file (.csv or .parquet)")
    ex.add_argument("--store", default=None, help=store_help)
    ex.add_argument("--run", default=None, help="only this run id")

    ru = add("runs", "one line per stored run", "Rows, ok rows, first and last finish time.")
    ru.add_argument("--store", default=None, help=store_help)

    fit = add("fit", "fit metric ≈ c·N^k to stored rows",
              "One exponent k per problem, representation, target and horizon (ok rows only).")
    fit.add_argument("--store", default=None, help=store_help)
    fit.add_argument("--run", default=None, help="only this run id")
    fit.add_argument("--metrics", type=_name_list, default=["compile_s", "hlo_pre_bytes"],
                     help="comma-separated (default compile_s,hlo_pre_bytes)")

    dg = sub.add_parser(
        "diagnose", help="trace and compile YOUR function cold; say why it is slow and what to "
        "write instead",
        description="Diagnose your own function: MODULE:FUNCTION is imported from the current "
        "folder (or a .py path), its arguments come from --args MODULE:FACTORY. Prints the "
        "findings (with remedies), the source lines that make the most equations and the "
        "figures; --html writes a standalone report.")
    dg.add_argument("function", metavar="MODULE:FUNCTION", help="the function to diagnose")
    dg.add_argument("--args", required=True, metavar="MODULE:FACTORY",
                    help="returns the argument tuple; with --sizes it takes the size n")
    dg.add_argument("--sizes", type=_int_list("sizes", 1, 10**6), default=None,
                    help="diagnose at these sizes (at least two, e.g. 10,30,100) and fit growth")
    dg.add_argument("--static-argnums", type=_int_list("static-argnums", 0, 255), default=[],
                    help="as for jax.jit, e.g. 1 or 1,2")
    dg.add_argument("--no-compile", action="store_true",
                    help="trace and lower only (fast; no compile time)")
    dg.add_argument("--no-pack", action="store_true",
                    help="do not try explorer.jit on a per-leaf-repetition finding (by default "
                    "it is tried within a 60 s budget, checked equal, and its measured figures "
                    "shown in the finding)")
    dg.add_argument("--backend", default=None, help="cpu, gpu... (default: JAX's default)")
    dg.add_argument("--html", default=None, metavar="PATH",
                    help="also write a standalone HTML report (opens offline)")

    add("watch", "run a script and rank every compilation it made, with why",
        "pytree-explorer watch [--html PATH] [--top K] [--store PATH] [--no-findings] "
        "script.py [args...]: runs the script as python would (its argv, its exit status), "
        "then prints its functions ranked by compile time, why each compiled again, and "
        "explorer.diagnose's findings for the top ones (see pytree-explorer watch --help).")
    sv = add("serve", "serve the dashboard page on this machine",
             "Open http://localhost:PORT/explorer_app. Each --problem MODULE:ATTR (a problem "
             "made by explorer.define_problem) is imported now and listed in the problem menu "
             "beside the built-in ones; nothing typed into the page is run as code.")
    sv.add_argument("--problem", action="append", default=[], metavar="MODULE:ATTR",
                    help="your own problem (repeat for several)")
    sv.add_argument("--port", type=_one_int("port", 1, 65535), default=5006,
                    help="default 5006")
    sv.add_argument("--address", default="127.0.0.1",
                    help="default 127.0.0.1 (this machine only)")
    sv.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                    help="Dask scheduler: every page measures on that cluster (reached now)")
    sv.add_argument("--per-host", type=_one_int("per-host", 1, 1024), default=1,
                    help="on a cluster, measurements at once per host (default 1)")
    sv.add_argument("--worker-memory", type=_gib, default=None, metavar="GIB",
                    help="cap the memory of the worker every page shares (CPU only; at least "
                         "2): a case that needs more is stored as out of memory, the machine "
                         "keeps its memory (default: no cap)")

    add("problems", "list the problems")
    add("representations", "list the representations")
    return parser


def _print_table(frame: pd.DataFrame) -> None:
    if frame.empty:
        print("(no rows)")
        return
    import pandas as pd  # noqa: PLC0415

    from .store.store import TABLE_COLUMNS  # noqa: PLC0415

    cols = [c for c in TABLE_COLUMNS if c in frame.columns and c not in _WIDE]
    with pd.option_context("display.max_rows", None, "display.width", 200,
                           "display.float_format", "{:.4g}".format):
        print(frame[cols].to_string(index=False))


def _sweep(args: argparse.Namespace) -> int:
    from tqdm import tqdm  # noqa: PLC0415

    from .store.store import Store, check_export_path, export_frame  # noqa: PLC0415
    from .jobs.sweep import SweepEvent, sweep  # noqa: PLC0415

    if args.worker_memory is not None and args.scheduler:
        raise ValueError("--worker-memory caps this machine's worker; on a cluster, start the "
                         "Dask workers with a memory limit (dask-worker --memory-limit)")
    problem = _load_problem(args.problem)
    store = False if args.no_store else Store(args.store, timeout=args.lock_wait)
    if args.out:  # before measuring, not after the whole sweep
        check_export_path(args.out, None if store is False else store.path)
    bar = None

    def progress(event: SweepEvent) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=event.total, unit="case", disable=args.quiet, file=sys.stderr)
        bar.set_description(event.spec.label)
        if event.row is not None:
            bar.update(1)
            if event.row.get("status") != "ok":
                bar.write(f"{event.spec.label}: {event.row['status']}: {event.row.get('error')}")

    try:
        frame = sweep(problem, args.representations, args.n_states, args.horizons,
                      args.targets, unroll=args.unroll, repeats=args.repeats,
                      backend=args.backend, rollouts=args.rollouts, memory=args.memory,
                      store=store,
                      timeout=args.timeout,
                      progress=progress, resume=not args.redo, python=args.python,
                      scheduler=args.scheduler, per_host=args.per_host[0],
                      worker_memory_gib=args.worker_memory)
    finally:
        if bar is not None:
            bar.close()
    _print_table(frame)
    if args.out:
        print(f"wrote {export_frame(frame, args.out)}")
    if store is not False:
        print(f"stored in {store.path}")
        _say_pending(store)
    return 0


def _load_problem(ref: str):
    """A built-in problem's name as it is, or the user's problem named as ``MODULE:ATTR``
    (imported here, registered in this process)."""
    if ":" not in ref:
        return ref
    from .util import userref as _userref  # noqa: PLC0415
    from .core.user_problems import register  # noqa: PLC0415
    from .core.user_problems import UserProblem  # noqa: PLC0415

    problem = _userref.load(ref, "--problem")
    if not isinstance(problem, UserProblem):
        raise ValueError(f"--problem {ref} is a {type(problem).__name__}, not a problem made "
                         "by explorer.define_problem")
    return register(problem)


def _say_pending(store) -> None:
    """Rows kept beside the store while it was locked: said, never hidden (reads only)."""
    waiting = store.pending_rows()
    if waiting:
        print(f"pytree-explorer: {waiting} finished row(s) wait in {store.pending_path} (the "
              "store was locked or unwritable when they finished); the next sweep adds them "
              "to the store", file=sys.stderr)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line on stderr (above the progress bar, which is redrawn)."""
    from tqdm import tqdm  # noqa: PLC0415

    tqdm.write(f"pytree-explorer: warning: {str(message).splitlines()[0]}", file=sys.stderr)


def _diagnose(args: argparse.Namespace) -> int:
    from .util import userref as _userref  # noqa: PLC0415

    fn = _userref.load(args.function, "function")
    if not callable(fn):
        raise ValueError(f"function {args.function} is a {type(fn).__name__}, not a function")
    factory = _userref.load(args.args, "--args")
    if not callable(factory):
        raise ValueError(f"--args {args.args} is a {type(factory).__name__}, not a function "
                         "that returns the arguments")
    if args.html:
        _check_html_path(args.html)  # before the work, not after it
    from .diagnose.diagnose import diagnose  # noqa: PLC0415

    options = dict(static_argnums=tuple(args.static_argnums), compile=not args.no_compile,
                   backend=args.backend, try_pack=not args.no_pack)
    if args.sizes is None:
        diagnosis = diagnose(fn, *_call_factory(factory, args.args), **options)
    else:
        def make_args(n: int) -> tuple:  # diagnose names it in its one-line error
            made = factory(n)
            return made if isinstance(made, tuple) else (made,)

        make_args.__name__ = make_args.__qualname__ = args.args
        diagnosis = diagnose(fn, make_args=make_args, sizes=args.sizes, **options)
    print(diagnosis)
    if args.html:
        print(f"wrote {diagnosis.to_html(args.html)}")
    return 0


def _call_factory(factory, ref: str) -> tuple:
    try:
        made = factory()
    except Exception as err:  # the user's factory failed: one line, not their traceback
        raise ValueError(f"--args {ref} raised {v.describe_error(err)}") from None
    return made if isinstance(made, tuple) else (made,)


def _check_html_path(path: str) -> None:
    from pathlib import Path  # noqa: PLC0415

    target = Path(path).expanduser()
    if target.is_dir():
        raise ValueError(f"--html {path} is a folder")
    if not target.parent.is_dir():
        raise ValueError(f"--html {path}: folder {str(target.parent)!r} does not exist")


def main(argv: Sequence[str] | None = None) -> int:
    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["watch"]:  # the script's own arguments are not ours to parse
        from .watch.cli import main as watch_main  # noqa: PLC0415

        return watch_main(argv[1:], as_program=as_program)
    parser = build_parser()
    args = parser.parse_args(argv)
    on_main = threading.current_thread() is threading.main_thread()
    # SIGTERM stops like Ctrl-C: the running job is killed, no row is stored for it.
    previous = signal.signal(signal.SIGTERM, interrupt) if on_main else None
    try:
        with warnings.catch_warnings(), interrupts_never_dropped():
            from .store.store import StoreWarning  # noqa: PLC0415

            warnings.simplefilter("always", StoreWarning)  # each lock episode, each merge
            warnings.showwarning = _show_warning
            return _main(args)
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "diagnose":
            return _diagnose(args)
        if args.command == "serve":
            for ref in args.problem:
                if ":" not in ref:
                    raise ValueError(f"--problem {ref}: give your own problem as MODULE:ATTR "
                                     "(the built-in ones are always in the menu)")
                _load_problem(ref)
            from .dashboard.page import serve  # noqa: PLC0415 - Panel only for this command

            serve(address=args.address, port=args.port, scheduler=args.scheduler,
                  per_host=args.per_host, worker_memory_gib=args.worker_memory)
            return 0
        if args.command == "problems":
            from .core.problems import problems  # noqa: PLC0415

            for name, problem in problems().items():
                print(f"{name:16s} {problem.description}")
            return 0
        if args.command == "representations":
            from .core.representations import representations  # noqa: PLC0415

            for name, text in representations().items():
                print(f"{name:10s} {text}")
            return 0
        from .store.store import Store, check_export_path  # noqa: PLC0415

        store = Store(args.store)
        if args.command == "export":
            check_export_path(args.out, store.path)
        if not store.path.exists():  # a read-only command creates nothing
            raise ValueError(f"no results store at {store.path} (run a sweep first, or pass "
                             "--store)")
        if getattr(args, "run", None) is not None and args.run not in set(store.runs().run_id):
            raise ValueError(f"no run {args.run!r} in {store.path} (pytree-explorer runs "
                             "lists the stored ones)")
        if args.command == "list":
            _print_table(store.rows(run_id=args.run, status=args.status, limit=args.last[0]))
        elif args.command == "export":
            print(f"wrote {store.export(args.out, run_id=args.run)}")
        elif args.command == "compare-runs":
            from .core.runs import compare_runs  # noqa: PLC0415

            table = compare_runs(store.rows(), by=args.by, a=args.a, b=args.b)
            print(f"{args.by}: b = {table.attrs['b']} against a = {table.attrs['a']}")
            print(table.to_string(index=False) if not table.empty else "(no case in both groups)")
        elif args.command == "runs":
            runs = store.runs()
            print(runs.to_string(index=False) if not runs.empty else "(no runs stored)")
        elif args.command == "fit":
            from .core.fits import scaling_exponents  # noqa: PLC0415

            fits = scaling_exponents(store.rows(run_id=args.run), metrics=args.metrics)
            print(fits.to_string(index=False) if not fits.empty else "(not enough rows to fit)")
        _say_pending(store)
        return 0
    except (ValueError, OSError) as err:  # bad input, a bad store file: one line, status 2
        print(f"pytree-explorer: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    except RuntimeError as err:  # the Dask scheduler lost mid-sweep: one line, status 1
        if type(err).__name__ != "SchedulerLost":
            raise
        print(f"pytree-explorer: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pytree-explorer: interrupted; finished rows are in the store (or, if it was "
              "locked, in its .pending.jsonl side file until the next write)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
