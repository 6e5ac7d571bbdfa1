"""The live mode: each scheduler on its own real control plane with kwok nodes. live_scenarios.py says what
runs, populate.py creates it, measurements.py watches and measures, runs.py runs one scheduler at a time;
live_preemption.py and live_topology.py are the preemption and topology scenarios."""
