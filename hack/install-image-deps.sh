#!/usr/bin/env bash
# The container image's install step: gangsolve and its locked runtime dependencies (uv.lock, no dev group)
# into a virtual environment. The Dockerfile runs it, and tests/test_image.py runs the Dockerfile's same
# RUN lines outside Docker into a fresh environment, so what the test proves is what the image gets.
#
#   hack/install-image-deps.sh --deps-only VENV   # third-party dependencies only (a cacheable image layer)
#   hack/install-image-deps.sh VENV               # ... and gangsolve and gangsolve-solver, as regular wheels
#
# Run from the project root. Needs pyproject.toml, uv.lock and the workspace members' pyproject.toml files
# (solver/, bench/); the full install also README.md, src/ and solver/ (bench/ stays out of the image).
# Environment: UV (default: uv on PATH), PYTHON (default: python3), the interpreter the environment is
# made from. Bytecode is compiled at install time, so nothing is written at run time and
# the environment works on a read-only root filesystem.
set -euo pipefail

deps_only=0
if [[ ${1:-} == --deps-only ]]; then
  deps_only=1
  shift
fi
if (($# != 1)); then
  echo "usage: $0 [--deps-only] VENV" >&2
  exit 2
fi
venv=$1
uv=${UV:-uv}
python=${PYTHON:-python3}

export UV_PROJECT_ENVIRONMENT=${venv}
export UV_PYTHON_DOWNLOADS=never
# Files are copied out of uv's cache, not hard-linked: the environment is later copied into another image stage.
export UV_LINK_MODE=copy

args=(sync --frozen --no-dev --no-editable --compile-bytecode --python "${python}")
if ((deps_only)); then
  args+=(--no-install-workspace)
fi
"${uv}" "${args[@]}"
