"""The time-based mode: jobs arrive, run for their duration and leave, and a scheduler runs a cycle every
simulated minute (simulation.py); tenants.py is the three-tenant workload and its fairness measures."""
