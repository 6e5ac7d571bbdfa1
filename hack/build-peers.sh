#!/usr/bin/env bash
# Builds the real peer schedulers the live bench compares gangsolve with, from their source at the release
# pinned in hack/versions.env, into the same cache as the control plane (hack/build-binaries.sh).
#
#   hack/build-peers.sh                          # every peer that is missing
#   hack/build-peers.sh volcano                  # only Volcano's vc-scheduler
#   hack/build-peers.sh kueue                    # only Kueue's manager
#   hack/build-peers.sh kai                      # only KAI's scheduler and binder
#   hack/build-peers.sh volcano --source DIR     # from DIR: a source tree at the pinned tag, or a git
#                                                # repository (bare or not) that holds the tag
#
# Volcano's and KAI's source: DIR if given, else <cache>/src/<peer>-<version>/ if present, else a shallow clone
# of the pinned tag (where the network allows it). The Go module proxy serves every dependency: Volcano's go.mod
# replaces its own volcano.sh/apis with ./staging, and KAI's replaces k8s.io/api and k8s.io/apimachinery, which
# is why both are built from their source trees and not with `go install`. Kueue's module has no replace
# directive: the proxy serves it whole, so it is built with `go install module@version` (or from DIR when
# given) and its Helm chart is copied from the module's source.
#
# Cache: ${GANGSOLVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsolve}/bin/<peer>-<version>/
# A cold build of vc-scheduler takes a few minutes on 2 cores (most of it Kubernetes' packages); Kueue's manager
# about 12 minutes with its modules downloaded; KAI's scheduler and binder longer still (docs/dev-cluster.md).
set -euo pipefail

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "${HACK_DIR}/versions.env"

CACHE_DIR=${GANGSOLVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsolve}
BIN_DIR=${CACHE_DIR}/bin
SRC_DIR=${CACHE_DIR}/src
ALL_PEERS=(volcano kueue kai)

log() { printf '[build-peers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
bad_input() { log "error: $*"; exit 2; }

peers=()
source_arg=
while (($#)); do
  case $1 in
    --source) (($# >= 2)) || bad_input "--source needs a directory"; source_arg=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) peers+=("$1"); shift ;;
  esac
done
((${#peers[@]})) || peers=("${ALL_PEERS[@]}")
[[ -z ${source_arg} || ${#peers[@]} -eq 1 ]] || bad_input "--source applies to one peer at a time"

peer_version() {
  case $1 in
    volcano) echo "${VOLCANO_VERSION}" ;;
    kueue) echo "${KUEUE_VERSION}" ;;
    kai) echo "${KAI_VERSION}" ;;
    *) bad_input "unknown peer '$1' (known: ${ALL_PEERS[*]})" ;;
  esac
}
peer_repository() {
  case $1 in
    volcano) echo "https://github.com/volcano-sh/volcano" ;;
    kueue) echo "https://github.com/kubernetes-sigs/kueue" ;;
    kai) echo "https://github.com/kai-scheduler/KAI-Scheduler" ;;
  esac
}
# Executable -> Go package inside the peer's module.
peer_targets() {
  case $1 in
    volcano) echo "vc-scheduler=./cmd/scheduler vc-controller-manager=./cmd/controller-manager" ;;
    kueue) echo "kueue=./cmd/kueue" ;;
    # The scheduler and the binder it hands every placement to (BindRequests): the rest of KAI (podgrouper,
    # admission webhooks, queue and PodGroup status controllers) is not on the path of pods that name their
    # PodGroup (docs/benchmarks.md, "Real peers: KAI").
    kai) echo "kai-scheduler=./cmd/scheduler kai-binder=./cmd/binder" ;;
  esac
}
# Directories of the source tree the bench needs beside the binary: DEST=SOURCE (symlinks resolved).
peer_assets() {
  case $1 in
    volcano) echo "chart=installer/helm/chart/volcano" ;; # its CRDs (crd/bases) and the scheduler's RBAC and config
    kueue) echo "chart=charts/kueue" ;; # its CRDs, RBAC, webhook configurations and manager configuration
    kai) echo "chart=deployments/kai-scheduler" ;; # its CRDs, RBAC, default queues and default SchedulingShard
  esac
}
# The Go module a peer is installed from with `go install` (none: built from its source tree).
peer_module() {
  case $1 in
    kueue) echo "sigs.k8s.io/kueue" ;;
  esac
}
peer_ldflags() {
  local version=$2
  case $1 in
    volcano) echo "-s -w -X volcano.sh/volcano/pkg/version.Version=${version} -X volcano.sh/volcano/pkg/version.GitSHA=${version}" ;;
    kueue) echo "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version} -X sigs.k8s.io/kueue/pkg/version.GitCommit=${version}" ;;
    kai) echo "-s -w -X github.com/kai-scheduler/KAI-scheduler/pkg/scheduler/version.gitVersion=${version} -X github.com/kai-scheduler/KAI-scheduler/pkg/scheduler/version.gitCommit=${version}" ;;
  esac
}
peer_dir() { echo "${BIN_DIR}/$1-$(peer_version "$1")"; }
is_built() {
  local target asset
  for target in $(peer_targets "$1"); do
    [[ -x $(peer_dir "$1")/${target%%=*} ]] || return 1
  done
  for asset in $(peer_assets "$1"); do
    [[ -d $(peer_dir "$1")/${asset%%=*} ]] || return 1
  done
}

# Prints a source tree at the pinned tag, extracting or cloning it into the cache when needed.
prepare_source() {
  local peer=$1 version dest
  version=$(peer_version "${peer}")
  dest=${SRC_DIR}/${peer}-${version}
  if [[ -n ${source_arg} ]]; then
    if [[ -f ${source_arg}/go.mod ]]; then
      echo "${source_arg}"
      return
    fi
    # A git repository: take the pinned tag out of it, so the build never depends on a checkout's state.
    rm -rf "${dest}.partial" && mkdir -p "${dest}.partial"
    git -C "${source_arg}" archive "${version}" | tar -x -C "${dest}.partial"
    rm -rf "${dest}" && mv "${dest}.partial" "${dest}"
  elif [[ ! -f ${dest}/go.mod ]]; then
    log "${peer}: no source in ${dest}; cloning $(peer_repository "${peer}") at ${version}"
    rm -rf "${dest}.partial"
    git clone -q --depth 1 --branch "${version}" "$(peer_repository "${peer}")" "${dest}.partial" ||
      die "${peer}: cannot clone; pass --source DIR with a source tree or a git repository holding ${version}"
    rm -rf "${dest}" && mv "${dest}.partial" "${dest}"
  fi
  echo "${dest}"
}

# Prints the module's source in the Go module cache, downloading it through the proxy when needed.
module_source() {
  local module=$1 version=$2
  GOFLAGS=-mod=mod go mod download -json "${module}@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

install_module_peer() {
  local peer=$1 version=$2 out=$3 module target package asset src
  module=$(peer_module "${peer}")
  for target in $(peer_targets "${peer}"); do
    package=${module}/${target#*=./}
    log "${peer} ${version}: go install ${package}@${version}"
    # Outside any module, so the peer's own go.mod and go.sum decide its dependencies.
    (cd "${out}" && GOBIN=${out} go install -trimpath -ldflags "$(peer_ldflags "${peer}" "${version}")" \
      "${package}@${version}")
    [[ ${target%%=*} == "${package##*/}" ]] || mv "${out}/${package##*/}" "${out}/${target%%=*}"
  done
  src=$(module_source "${module}" "${version}")
  [[ -d ${src} ]] || die "${peer}: the module proxy gave no source for ${module}@${version}"
  for asset in $(peer_assets "${peer}"); do
    cp -RL "${src}/${asset#*=}" "${out}/${asset%%=*}"
    chmod -R u+w "${out}/${asset%%=*}" # the module cache is read-only
  done
}

build_peer() {
  local peer=$1 version src out target ldflags asset
  version=$(peer_version "${peer}")
  out=${BIN_DIR}/.staging-${peer}-${version}
  rm -rf "${out}" && mkdir -p "${out}"
  if [[ -n $(peer_module "${peer}") && -z ${source_arg} ]]; then
    install_module_peer "${peer}" "${version}" "${out}"
    rm -rf "$(peer_dir "${peer}")"
    mv "${out}" "$(peer_dir "${peer}")"
    return
  fi
  src=$(prepare_source "${peer}")
  ldflags=$(peer_ldflags "${peer}" "${version}")
  for target in $(peer_targets "${peer}"); do
    log "${peer} ${version}: compiling ${target#*=} from ${src}"
    # -mod=mod: the tree has no vendor directory and go.sum may lack entries for the build list's tests.
    (cd "${src}" && GOFLAGS=-mod=mod go build -trimpath -ldflags "${ldflags}" -o "${out}/${target%%=*}" "${target#*=}")
  done
  for asset in $(peer_assets "${peer}"); do
    cp -RL "${src}/${asset#*=}" "${out}/${asset%%=*}"
  done
  rm -rf "$(peer_dir "${peer}")"
  mv "${out}" "$(peer_dir "${peer}")"
}

for peer in "${peers[@]}"; do
  peer_version "${peer}" >/dev/null # an unknown peer stops here, before anything is built
done
if [[ -n ${source_arg} ]]; then
  [[ -d ${source_arg} ]] || bad_input "--source ${source_arg}: not a directory"
  tag=$(peer_version "${peers[0]}")
  [[ -f ${source_arg}/go.mod ]] || git -C "${source_arg}" rev-parse -q --verify "refs/tags/${tag}" >/dev/null 2>&1 ||
    bad_input "--source ${source_arg}: neither a source tree (go.mod) nor a git repository with tag ${tag}"
fi
command -v go >/dev/null || die "go is not installed; the peers are built from source with Go >= 1.25"
export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "${BIN_DIR}" "${SRC_DIR}"
exec 9>"${CACHE_DIR}/.build.lock"
if ! flock -n 9; then
  log "another build holds ${CACHE_DIR}/.build.lock; waiting for it"
  flock 9
fi

for peer in "${peers[@]}"; do
  if is_built "${peer}" && [[ -z ${source_arg} ]]; then
    log "${peer} $(peer_version "${peer}"): cached in $(peer_dir "${peer}")"
    continue
  fi
  start=${SECONDS}
  build_peer "${peer}"
  log "${peer} $(peer_version "${peer}"): built in $((SECONDS - start))s -> $(peer_dir "${peer}")"
done
