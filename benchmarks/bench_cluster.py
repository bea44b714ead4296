"""Goals of sweeps on a Dask cluster (issue 11), on a LocalCluster of process workers.

(a) Dask overhead per job: the same small job (one cold measurement of a tiny case) through the
    local :class:`explorer.WorkerExecutor` and through a one-worker LocalCluster's
    ``DaskExecutor`` (the dashboard's and the sweep's cluster path), interleaved (A B A B ...,
    order alternating by round), both measuring processes warm; the goal is a median wall-time
    difference of at most 50 ms per job.
(b) A 24-case sweep (``explorer.sweep(..., scheduler=...)``) on a LocalCluster of two workers
    with ``per_host=2`` against the same sweep on one worker; the goal is at most 0.6x the
    one-worker time. Each cluster's measuring processes are started before the clock runs, and
    every sweep writes a fresh store (nothing resumed).

    ``--pin`` simulates hosts of one core each on one machine: every Dask worker process (with
    the measuring process it starts) is held to a core of its own (``os.sched_setaffinity``),
    the one-worker cluster's too. Unpinned, two workers on a 2-core machine share both cores
    with each other and with the client, and one XLA compile alone already keeps about 1.5
    cores busy on the CPU backend, so that run measures contention, not two hosts.

Writes ``benchmarks/bench_cluster.json`` and prints a small table.

    python benchmarks/bench_cluster.py [--jobs 7] [--rounds 2] [--n-states 30,100,200]
                                       [--out FILE.json] [--note TEXT] [--pin]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
for _path in (str(HERE.parent), str(HERE)):  # run from a checkout without installing
    if _path not in sys.path:
        sys.path.insert(0, _path)

import dask  # noqa: E402
import distributed  # noqa: E402

import explorer  # noqa: E402
from common import host_info, log, summary  # noqa: E402
from explorer._src.jobs import run as _run  # noqa: E402
from explorer._src.jobs.cluster import DaskExecutor, run_in_worker  # noqa: E402
from explorer._src.jobs.jobs import jax_version  # noqa: E402
from explorer._src.core.spec import Spec  # noqa: E402

OVERHEAD_GOAL_S = 0.050
SPEEDUP_GOAL = 0.6
# 24 cases: 4 representations x 3 state counts x loss and grad.
SWEEP = dict(problem="decay", representations=["dict", "array", "struct", "unflatten"],
             n_states=[30, 100, 200], horizons=[100], targets=["loss", "grad"])


class _OwnCore(distributed.WorkerPlugin):
    """Holds a LocalCluster worker (named 0, 1, ...) and every thread it has to one core."""

    def setup(self, worker) -> None:
        cores = sorted(os.sched_getaffinity(0))
        core = cores[int(worker.name) % len(cores)]
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), {core})


PIN = [False]


def _cluster(n_workers: int) -> distributed.LocalCluster:
    return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                    host="127.0.0.1", dashboard_address=None,
                                    env={"JAX_PLATFORMS": "cpu"})


def _warm(client: distributed.Client) -> None:
    """Start every Dask worker's measuring process (JAX imported) before any clock runs
    (pinned first, with ``--pin``: the process it starts inherits its core)."""
    if PIN[0]:
        client.register_plugin(_OwnCore(), name="own-core")
    addrs = list(client.scheduler_info()["workers"])
    futures = [client.submit(run_in_worker, jax_version, (), None, workers=[a], pure=False)
               for a in addrs]
    client.gather(futures)


def overhead(jobs: int) -> dict:
    """Wall time of one small measuring job: local worker vs a one-worker Dask cluster."""
    spec = Spec(problem="decay", representation="array", n_states=3, horizon=20, target="loss")
    local = explorer.WorkerExecutor()
    walls: dict[str, list[float]] = {"local": [], "dask": []}
    try:
        with _cluster(1) as cluster, distributed.Client(cluster) as client:
            _warm(client)
            dask_ex = DaskExecutor(client, per_host=1)
            executors = {"local": local, "dask": dask_ex}
            for name, ex in executors.items():  # one job each first: start-up is not the job
                _run.run_one(spec, ex)
            for i in range(jobs):
                order = ["local", "dask"] if i % 2 == 0 else ["dask", "local"]
                for name in order:
                    began = time.perf_counter()
                    row, _ = _run.run_one(spec, executors[name])
                    walls[name].append(time.perf_counter() - began)
                    if row["status"] != "ok":
                        raise RuntimeError(f"{name} job failed: {row['error']}")
                log(f"overhead job {i + 1}/{jobs}: local {walls['local'][-1]:.3f} s, "
                    f"dask {walls['dask'][-1]:.3f} s")
    finally:
        local.shutdown(cancel_futures=True)
    diffs = [d - w for d, w in zip(walls["dask"], walls["local"])]
    return {"spec": spec.label, "jobs": jobs, "local_s": summary(walls["local"]),
            "dask_s": summary(walls["dask"]), "paired_diff_s": summary(diffs),
            "overhead_s": statistics.median(walls["dask"]) - statistics.median(walls["local"]),
            "raw": walls}


def sweep_time(n_workers: int, per_host: int, folder: pathlib.Path, tag: str) -> dict:
    """Wall time of the 24-case sweep on a LocalCluster of ``n_workers`` (warm workers)."""
    with _cluster(n_workers) as cluster, distributed.Client(cluster) as client:
        _warm(client)
        store = folder / f"{tag}.sqlite"
        began = time.perf_counter()
        frame = explorer.sweep(SWEEP["problem"], SWEEP["representations"], SWEEP["n_states"],
                               SWEEP["horizons"], targets=SWEEP["targets"], store=store,
                               scheduler=client, per_host=per_host)
        wall = time.perf_counter() - began
    statuses = frame["status"].value_counts().to_dict()
    return {"workers": n_workers, "per_host": per_host, "cases": len(frame), "wall_s": wall,
            "statuses": statuses, "compile_s_sum": float(frame["compile_s"].sum()),
            "workers_used": sorted(set(frame["worker"].dropna()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=7, help="small jobs per executor (overhead)")
    ap.add_argument("--rounds", type=int, default=2, help="sweep pairs (one, two workers)")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "bench_cluster.json")
    ap.add_argument("--n-states", default="30,100,200",
                    help="the sweep's state counts (x 4 representations x 2 targets)")
    ap.add_argument("--note", default="")
    ap.add_argument("--pin", action="store_true",
                    help="one core per Dask worker: hosts of one core each, simulated")
    a = ap.parse_args()
    PIN[0] = a.pin
    SWEEP["n_states"] = [int(x) for x in a.n_states.split(",")]
    started = time.time()
    load_start = os.getloadavg()
    log("overhead: local worker vs Dask")
    over = overhead(a.jobs)
    sweeps: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):  # interleaved: one worker, two workers, two, one, ...
            order = [(1, 1), (2, 2)] if r % 2 == 0 else [(2, 2), (1, 1)]
            for workers, per_host in order:
                log(f"sweep round {r + 1}: {workers} worker(s), per_host={per_host}")
                result = sweep_time(workers, per_host, pathlib.Path(tmp), f"r{r}-w{workers}")
                result["round"] = r
                sweeps.append(result)
                log(f"  {result['wall_s']:.1f} s, {result['statuses']}")
    one = [s["wall_s"] for s in sweeps if s["workers"] == 1]
    two = [s["wall_s"] for s in sweeps if s["workers"] == 2]
    ratios = [t / o for o, t in zip(one, two)]
    ratio = statistics.median(two) / statistics.median(one)
    out = {
        "machine": {**host_info(), "load_avg_start": list(load_start),
                    "load_avg_end": list(os.getloadavg()), "distributed": distributed.__version__,
                    "dask": dask.__version__, "note": a.note, "pinned": a.pin,
                    "command": " ".join(["python", *sys.argv]), "wall_s": time.time() - started},
        "overhead": over, "overhead_goal_s": OVERHEAD_GOAL_S,
        "overhead_met": over["overhead_s"] <= OVERHEAD_GOAL_S,
        "sweep": {"cases": SWEEP, "runs": sweeps, "one_worker_s": summary(one),
                  "two_workers_s": summary(two), "ratio_per_round": ratios, "ratio": ratio},
        "speedup_goal": SPEEDUP_GOAL, "speedup_met": ratio <= SPEEDUP_GOAL,
    }
    a.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {a.out}")
    print("| goal | measured | met |")
    print("|---|---|---|")
    print(f"| Dask overhead per job <= {OVERHEAD_GOAL_S * 1000:.0f} ms | "
          f"{over['overhead_s'] * 1000:.0f} ms (median dask {over['dask_s']['median']:.3f} s vs "
          f"local {over['local_s']['median']:.3f} s; paired median "
          f"{over['paired_diff_s']['median'] * 1000:.0f} ms) | "
          f"{'yes' if out['overhead_met'] else 'no'} |")
    print(f"| 24 cases, 2 workers per_host=2 <= {SPEEDUP_GOAL}x one worker | {ratio:.2f}x "
          f"({statistics.median(two):.1f} s vs {statistics.median(one):.1f} s; per round "
          f"{', '.join(f'{x:.2f}' for x in ratios)}) | {'yes' if out['speedup_met'] else 'no'} |")


if __name__ == "__main__":
    main()
