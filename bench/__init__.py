"""Benchmark harness: gangsolve against per-pod and greedy-gang baselines, in three modes (static/,
timeline/, live/). Shared by the modes: the scenarios as Kubernetes objects (manifests.py, scenarios.py,
openb.py), the peers' algorithms (baselines.py), what is measured (placement_metrics.py) and the report
(report/); bench_cli.py is `gangsolve bench`, devcluster/ the local control plane."""
