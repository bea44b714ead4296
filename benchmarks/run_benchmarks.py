"""Benchmarks of the explorer itself: are its numbers honest, and what do they cost?

One command (run from the repository root)::

    python benchmarks/run_benchmarks.py [--quick] [--backend cpu|gpu] [--only a,b,c,d]
                                        [--out benchmarks/results.json] [--doc docs/benchmarks-run.md]

measures (``measure.py``: every raw figure to the JSON file) and then reports (``report.py``:
the goals and the markdown summary). The two halves also run on their own::

    python benchmarks/measure.py --quick --only b --out /tmp/results.json
    python benchmarks/report.py /tmp/results.json --doc /tmp/benchmarks.md

and ``--render JSON`` here is the second: the markdown again from an earlier run, measuring
nothing. What each benchmark measures is in ``measure.py``'s docstring.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import report  # noqa: E402  (no JAX: --render stays quick)
from common import log  # noqa: E402


def _parser(measure: Any = None) -> argparse.ArgumentParser:
    """``--doc`` and ``--render``; with ``measure`` (imports JAX) its options and ``--help`` too."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=measure is not None)
    p.add_argument("--doc", default=str(report.ROOT / "docs" / "benchmarks-run.md"), help="markdown output")
    p.add_argument("--render", default=None, metavar="JSON",
                   help="only write the markdown again from a results JSON of an earlier run")
    if measure is not None:
        measure.add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    first, rest = _parser().parse_known_args(argv)
    if first.render and not rest:
        return report.main([first.render, "--doc", first.doc])

    import measure  # noqa: PLC0415 - imports JAX

    parser = _parser(measure)
    args = parser.parse_args(argv)
    if args.render:
        parser.error("--render measures nothing: give it only --doc")
    results = measure.run(args, __file__, argv)
    if results is None:
        return 2
    markdown = report.report(results)
    # The goals go into the JSON too, as they always have (report.py evaluates them again).
    Path(args.out).write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    report.write_doc(Path(args.doc), markdown)
    for line in report.goal_lines(results["goals"]):
        log(line)
    log(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
