"""Benchmark harness: gangsolve against per-pod and greedy-gang baselines."""
