"""The live scheduler, `gangsolve run`: watchers -> snapshot actor -> solver actor -> binder, plus feedback,
metrics, health and leader election. Each module is one role; run.py wires them into one task group."""
