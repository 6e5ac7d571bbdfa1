"""Every mode's results for people and programs: tables.py (rich, markdown, JSON), plots.py (PNG) and
targets.py (the targets the benchmark is held to)."""
