"""``pytree-explorer watch script.py [args...]`` (and ``python -m explorer.watch``): run a
script as ``python script.py args...`` would, then rank what it compiled.

The script runs in this process as ``__main__`` (``runpy.run_path``), with its own ``sys.argv``
and its folder first on ``sys.path``; its exit status is ours. Its own output is untouched; the
ranking goes to stderr. A script that raises: its traceback as Python prints it, the ranking of
what compiled before, exit status 1. Bad input (no such script, a bad option): one line, exit
status 2, before anything runs.
"""

from __future__ import annotations

import argparse
import atexit
import os
import runpy
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..util.interrupts import interrupts_never_dropped
from ..util.pages import is_ours
from . import report
from .session import watch

USAGE = "[--html PATH] [--top K] [--store PATH] [--no-findings] script.py [args...]"
_VALUED = ("--html", "--top", "--store")

# Ctrl-C while XLA compiles, with a ``jax.monitoring`` duration listener registered (every watch
# registers one), ends in a segmentation fault as the interpreter tears down after its atexit
# handlers (jax and jaxlib 0.10.2, measured: a no-op listener is enough; without one the same
# script exits as Python does on Ctrl-C). Run as a program, an interrupted script ends as
# ``python script.py`` does on Ctrl-C instead: killed by SIGINT, once the script's own atexit
# handlers have run (this one is registered before the script runs, so it runs after them),
# skipping only the teardown that crashes.
_interrupted = False


def _exit_as_interrupted() -> None:
    if _interrupted and os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser(prog: str) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, usage=f"{prog} {USAGE}", description=(
        "Run a Python script (or MODULE:FUNCTION, called with no arguments) as python would, "
        "record every JAX compilation it makes, then print the functions ranked by compile "
        "time, with why each compiled again and what to write instead."))
    p.add_argument("--html", metavar="PATH", help="also write one offline page of the report")
    p.add_argument("--top", metavar="K", type=_top, default=report.TOP_TEXT,
                   help=f"functions in the ranking (default {report.TOP_TEXT})")
    p.add_argument("--store", metavar="PATH",
                   help="also store the compilations in this SQLite file (the results store)")
    p.add_argument("--no-findings", action="store_true",
                   help="skip explorer.diagnose of the top functions after the run")
    return p


def _top(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--top must be a whole number, got {text!r}") from None
    if not 1 <= k <= 10_000:
        raise argparse.ArgumentTypeError(f"--top must be between 1 and 10000, got {k}")
    return k


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Our options, then the script and everything after it (the script's own arguments)."""
    ours: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return ours, list(argv[i + 1:])
        if not a.startswith("-") or a == "-":
            return ours, list(argv[i:])
        ours.append(a)
        if a in _VALUED:
            if i + 1 < len(argv):
                ours.append(argv[i + 1])
            i += 1
        i += 1
    return ours, []


def _check_html(path: str | None) -> None:
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--html {path}: is a directory; give a file name such as "
                         "compiles.html")
    if not target.parent.is_dir():
        raise ValueError(f"--html {path}: folder {target.parent} does not exist")
    if target.exists() and not is_ours(target, report.GENERATOR):
        raise ValueError(f"--html {path}: exists and is not an explorer.watch page; choose "
                         "another name")


def _program(script: str) -> tuple[str, Any]:
    """``("path", abs path)`` for a script, ``("call", fn)`` for MODULE:FUNCTION."""
    if os.path.isfile(script):
        return "path", os.path.abspath(script)
    if ":" in script and not script.endswith(".py"):
        from ..util.userref import load

        fn = load(script, "program")
        if not callable(fn):
            raise ValueError(f"program {script}: {type(fn).__name__} is not callable")
        return "call", fn
    if os.path.isdir(script):
        raise ValueError(f"{script}: is a directory, not a Python script")
    raise ValueError(f"no such script: {script!r}")


def _exit_status(code: Any) -> int:
    """What ``python script.py`` exits with for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def _print_traceback(err: BaseException, script: str | None) -> None:
    """As Python prints it: from the script's own first frame, not our runner's."""
    tb = err.__traceback__
    if script is not None:
        t = tb
        while t is not None and os.path.abspath(t.tb_frame.f_code.co_filename) != script:
            t = t.tb_next
        tb = t or tb
    traceback.print_exception(type(err), err, tb, file=sys.stderr)
    sys.stderr.flush()


def _run(kind: str, target: Any, script_args: list[str], restore: bool = True) -> int:
    """Run the script; ``restore`` puts ``sys.argv`` and ``sys.path`` back after it (not when
    this process is the command: the script's atexit handlers read its own, as under
    ``python script.py``)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    script = target if kind == "path" else None
    try:
        if kind == "path":
            # As python sets them: the script's folder first on the path, its arguments after
            # its name (runpy gives argv[0] and __file__ the absolute path, as __file__ is).
            sys.argv = [target, *script_args]
            sys.path[0:1] = [os.path.dirname(target)]
            runpy.run_path(target, run_name="__main__")
            return 0
        sys.argv = [str(target), *script_args]
        result = target()
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    except SystemExit as exit_:
        return _exit_status(exit_.code)
    except KeyboardInterrupt as err:
        _print_traceback(err, script)
        return 130
    except BaseException as err:  # noqa: BLE001 - the script's error, printed as Python would
        _print_traceback(err, script)
        return 1
    finally:
        if restore:
            sys.argv = saved_argv
            sys.path[:] = saved_path


def main(argv: Sequence[str] | None = None, prog: str = "pytree-explorer watch", *,
         as_program: bool | None = None) -> int:
    """Run the command; ``as_program`` (default: when ``argv`` is read from ``sys.argv``) when
    this process is the command: an interrupted script then ends the process as Python would
    (see ``_exit_as_interrupted``); called from other code, it returns 130."""
    global _interrupted
    if as_program is None:
        as_program = argv is None
    ours, rest = split_argv(list(sys.argv[1:] if argv is None else argv))
    parser = _parser(prog)
    try:
        opts = parser.parse_args(ours)
    except SystemExit as exit_:  # --help (0) or a bad option (2, one line already printed)
        return _exit_status(exit_.code)
    try:
        if not rest:
            raise ValueError(f"give the script to run: {prog} {USAGE}")
        _check_html(opts.html)
        if opts.store is not None:
            from .storage import check_store_path

            check_store_path(opts.store)
        kind, target = _program(rest[0])
    except ValueError as err:
        print(f"{prog}: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    if as_program:
        atexit.register(_exit_as_interrupted)
    w = watch(findings=not opts.no_findings)
    with w, interrupts_never_dropped():  # Ctrl-C in JAX's gc callback still stops the script
        status = _run(kind, target, rest[1:], restore=not as_program)
    sys.stdout.flush()
    err = sys.stderr
    print(report.headline(w), file=err)
    for line in report.ranking_lines(w, opts.top):
        print(line, file=err)
    for note in w.notes:
        print(f"note: {note}", file=err)
    err.flush()
    if status == 130:  # interrupted: the ranking, then out, no findings to wait for
        opts.no_findings = True
        _interrupted = as_program
    if not opts.no_findings and w.compiles:
        for line in report.findings_lines(w):
            print(line, file=err)
    if opts.html is not None:
        print(f"wrote {w.to_html(opts.html)}", file=err)
    if opts.store is not None:
        from .storage import save

        run_id = save(w, opts.store, program=rest[0], argv=rest[1:], status=status)
        print(f"stored {len(w.compiles)} compilation(s) in {opts.store} (run {run_id})",
              file=err)
    return status
