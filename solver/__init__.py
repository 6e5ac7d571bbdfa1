"""The optimization core: plain data in, placement out. No Kubernetes, YAML or I/O imports."""
