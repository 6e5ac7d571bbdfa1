"""Constraint families, one module each: a pod/node predicate that says why it fails, or None when it holds."""
