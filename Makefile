# Set-up is part of every target: a fresh machine needs only python3 (and go for the control plane).
UV_VERSION := 0.13.9
UV := .tools/bin/uv
export UV_PYTHON_DOWNLOADS := never

.PHONY: demo test lint sync binaries browser peers

demo: .venv/.synced
	.venv/bin/gangsolve solve examples/tfjob-8.yaml --scheduler-name kube-batchd

# The end-to-end tests run a real control plane: its binaries are built (once, into a cache outside the
# repository; see docs/dev-cluster.md) before the tests; the page of the plan's tests drive a headless browser.
# Two workers, each given whole files (a module's control plane and runs stay in one process): the e2e tests
# mostly wait on their control planes, so two overlap well even on 2 cores.
TEST_WORKERS ?= 2
test: .venv/.synced binaries browser
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# ruff (lint and format) and mypy (strict on solver/); .ci/run runs it before the tests.
lint: .venv/.synced
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	hack/typecheck.sh

sync: .venv/.synced

# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok and helm at the versions
# pinned in hack/versions.env; a no-op when the cache already has them.
binaries:
	bash hack/build-binaries.sh

# Chromium from the distribution's packages, when missing (root and apt-get; else its tests skip, except in CI).
browser:
	bash hack/install-browser.sh

# The real peer schedulers of the live bench (Volcano's vc-scheduler), built from source at the tags pinned in
# hack/versions.env into the same cache; not part of `make test`: their e2e tests skip when they are absent.
peers:
	nice -n 10 bash hack/build-peers.sh

$(UV):
	python3 -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

# Bytecode is compiled here, as pip and the image do: where nothing writes it at run time
# (PYTHONDONTWRITEBYTECODE), every command would compile its imports again: seconds of start-up.
.venv/.synced: $(UV) pyproject.toml uv.lock Makefile
	$(UV) sync --frozen --all-extras --all-packages --compile-bytecode
	.venv/bin/python -m compileall -q src solver bench > /dev/null
	touch $@
