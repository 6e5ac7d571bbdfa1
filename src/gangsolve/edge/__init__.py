"""The Kubernetes edge: snapshots and their fields read once, objects turned into the solver's types (gang rules,
quantities, DRA devices and CEL selectors, runtime estimates), and the solver's answers turned back into the texts
Kubernetes objects carry (reservations)."""
