"""Floor 4: where measurements run: the cold worker process, Dask clusters, sweeps, jobs."""
