"""Where code runs: worker processes, the pool or Ray executor, the sandbox, caches and jobs."""
