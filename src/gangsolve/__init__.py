"""gangsolve: an optimizing gang scheduler for Kubernetes."""

__version__ = "0.1.0"
