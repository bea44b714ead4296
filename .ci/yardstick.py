"""How fast this machine is right now, so that a suite's time can be read against it.

The median of five rounds of a fixed pure-Python loop (the tests' time is mostly Python: the
served page, pytest, JAX's tracing), in seconds. ``.ci/run`` prints it before and after the
suite; docs/benchmarks.md gives the suite's time with it."""

import statistics
import time


def one_round() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i * i
    return time.perf_counter() - start


if __name__ == "__main__":
    print(f"{statistics.median(one_round() for _ in range(5)):.2f}")
