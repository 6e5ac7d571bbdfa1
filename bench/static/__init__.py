"""The static mode: one scheduling cycle per scheduler on each scenario's snapshot (runner.py), the preemption
scenarios round by round (preemption_rounds.py), and GPUs as DRA devices against extended resources
(dra_comparison.py)."""
