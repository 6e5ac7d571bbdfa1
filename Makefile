# Set-up is part of every target: a fresh machine needs only python3 (and go for the control plane).
UV_VERSION := 0.13.9
UV := .tools/bin/uv
export UV_PYTHON_DOWNLOADS := never

.PHONY: demo test sync

demo: .venv/.synced
	.venv/bin/gangsolve solve examples/tfjob-8.yaml --scheduler-name kube-batchd

test: .venv/.synced
	.venv/bin/python -m pytest

sync: .venv/.synced

$(UV):
	python3 -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

.venv/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen
	touch $@
