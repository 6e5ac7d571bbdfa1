# syntax=docker/dockerfile:1
# The gangsolve scheduler image: `gangsolve run` as a non-root user, on a read-only root filesystem.
#
#   docker build -t gangsolve:0.1.0 .
#
# The build stage installs from uv.lock with hack/install-image-deps.sh; tests/test_image.py runs this
# stage's COPY and RUN steps outside Docker (keep them to COPY, WORKDIR, ENV, ARG and RUN).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The uv release the Makefile bootstraps (UV_VERSION there); tests/test_image.py checks they agree.
ARG UV_VERSION=0.13.9
RUN pip install --no-cache-dir uv==${UV_VERSION}
ENV GANGSOLVE_VENV=/opt/gangsolve PYTHON=/usr/local/bin/python3
WORKDIR /src
# Dependencies first: this layer is rebuilt only when the lock file changes. solver/ and bench/ are members
# of the project's workspace: their pyproject.toml files are all the lock file needs here. The image
# installs gangsolve and gangsolve-solver; nothing of gangsolve-bench (harness, dev cluster, plots).
COPY pyproject.toml uv.lock ./
COPY solver/pyproject.toml solver/
COPY bench/pyproject.toml bench/
COPY hack/install-image-deps.sh hack/
RUN --mount=type=cache,target=/root/.cache/uv hack/install-image-deps.sh --deps-only "$GANGSOLVE_VENV"
COPY README.md ./
COPY src src
COPY solver solver
RUN --mount=type=cache,target=/root/.cache/uv hack/install-image-deps.sh "$GANGSOLVE_VENV"

FROM ${PYTHON_IMAGE}
# The environment is copied to the same path over the same base image, so its interpreter links still hold.
COPY --from=build /opt/gangsolve /opt/gangsolve
RUN groupadd --system --gid 65532 gangsolve \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gangsolve
ENV PATH=/opt/gangsolve/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["gangsolve", "run"]
