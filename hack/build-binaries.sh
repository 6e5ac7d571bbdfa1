#!/usr/bin/env bash
# Builds the binaries of the local control plane (see docs/dev-cluster.md) from their Go modules into a
# cache outside the repository, keyed by version, and reuses whatever is already there.
#
#   hack/build-binaries.sh                 # everything that is missing
#   hack/build-binaries.sh kubernetes etcd # only some components (kubernetes, etcd, kwok, helm)
#   hack/build-binaries.sh --print-dir     # print the cache's bin directory and exit
#
# Cache: ${GANGSOLVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsolve}/bin/<component>-<version>/
# Versions: hack/versions.env (the only place they are pinned).
# Go modules and the build cache are Go's usual ones (GOMODCACHE, GOCACHE), also outside the repository.
set -euo pipefail

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "${HACK_DIR}/versions.env"

CACHE_DIR=${GANGSOLVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsolve}
BIN_DIR=${CACHE_DIR}/bin

if [[ ${1:-} == --print-dir ]]; then
  echo "${BIN_DIR}"
  exit 0
fi

ALL_COMPONENTS=(kubernetes etcd kwok helm)
if (($# == 0)); then
  COMPONENTS=("${ALL_COMPONENTS[@]}")
else
  COMPONENTS=("$@")
fi

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Component -> version directory and the executables it must contain.
component_version() {
  case $1 in
    kubernetes) echo "${KUBERNETES_VERSION}" ;;
    etcd) echo "${ETCD_VERSION}" ;;
    kwok) echo "${KWOK_VERSION}" ;;
    helm) echo "${HELM_VERSION}" ;;
    *) die "unknown component '$1' (known: ${ALL_COMPONENTS[*]})" ;;
  esac
}
component_binaries() {
  case $1 in
    kubernetes) echo "kube-apiserver kube-controller-manager kube-scheduler kubectl" ;;
    etcd) echo "etcd" ;;
    kwok) echo "kwok" ;;
    helm) echo "helm" ;;
  esac
}
component_dir() { echo "${BIN_DIR}/$1-$(component_version "$1")"; }
is_built() {
  local dir b
  dir=$(component_dir "$1")
  for b in $(component_binaries "$1"); do
    [[ -x ${dir}/${b} ]] || return 1
  done
}

missing=()
for c in "${COMPONENTS[@]}"; do
  component_version "$c" >/dev/null
  if is_built "$c"; then
    log "${c} $(component_version "$c"): cached in $(component_dir "$c")"
  else
    missing+=("$c")
  fi
done
if ((${#missing[@]} == 0)); then
  log "all binaries present in ${BIN_DIR}"
  exit 0
fi

command -v go >/dev/null || die "go is not installed; the control plane is built from source with Go >= 1.26"
# Never let go download a toolchain (only the module proxy is reachable); the installed Go must be new enough.
export GOTOOLCHAIN=local
export CGO_ENABLED=0
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[[ ${go_minor} =~ ^[0-9]+$ ]] && ((go_minor >= 26)) || die "need Go >= 1.26, found $(go env GOVERSION)"

mkdir -p "${BIN_DIR}"
# One builder at a time per cache: a second one waits, then finds the result.
exec 9>"${CACHE_DIR}/.build.lock"
if ! flock -n 9; then
  log "another build holds ${CACHE_DIR}/.build.lock; waiting for it"
  flock 9
fi

WORK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gangsolve-build.XXXXXX")
trap 'rm -rf "${WORK_DIR}"' EXIT

# Builds into a staging directory next to the final one and renames it into place only when complete, so an
# interrupted build never looks cached.
stage_dir() { echo "${BIN_DIR}/.staging-$1-$(component_version "$1")"; }
publish() {
  local final staging
  final=$(component_dir "$1")
  staging=$(stage_dir "$1")
  rm -rf "${final}"
  mv "${staging}" "${final}"
}

GO_BUILD=(go build -trimpath)

build_kubernetes() {
  local mod=${WORK_DIR}/kubernetes out
  out=$(stage_dir kubernetes)
  rm -rf "${out}" && mkdir -p "${mod}" "${out}"
  # k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and
  # replaces them with ./staging/...; those replaces do not apply to a dependency, so a wrapper module
  # replaces each of them with its published release instead. The list comes from the release's own go.mod.
  log "kubernetes: downloading k8s.io/kubernetes@${KUBERNETES_VERSION}"
  local gomod
  gomod=$(cd "${mod}" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" |
    sed -n -E 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p')
  [[ -f ${gomod} ]] || die "could not download k8s.io/kubernetes@${KUBERNETES_VERSION}"
  {
    echo "module gangsolve.invalid/build/kubernetes"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes ${KUBERNETES_VERSION}"
    echo
    echo "replace ("
    sed -n -E 's#^[[:space:]]*(k8s\.io/[a-z0-9-]+) => \./staging/src/.*$#\t\1 => \1 '"${KUBERNETES_STAGING_VERSION}"'#p' "${gomod}"
    echo ")"
  } >"${mod}/go.mod"
  grep -q 'k8s.io/client-go => k8s.io/client-go' "${mod}/go.mod" || die "no staging replaces found in ${gomod}"

  local major minor ldflags=() key val
  major=${KUBERNETES_VERSION#v}
  major=${major%%.*}
  minor=${KUBERNETES_VERSION#v*.}
  minor=${minor%%.*}
  for kv in "gitVersion=${KUBERNETES_VERSION}" "gitMajor=${major}" "gitMinor=${minor}" \
    "gitTreeState=clean" "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
    key=${kv%%=*}
    val=${kv#*=}
    ldflags+=("-X k8s.io/component-base/version.${key}=${val}" "-X k8s.io/client-go/pkg/version.${key}=${val}")
  done
  # All four commands in one invocation, so the packages they share compile once.
  log "kubernetes: compiling kube-apiserver kube-controller-manager kube-scheduler kubectl ${KUBERNETES_VERSION} (the long one: tens of minutes on 2 cores when cold)"
  (cd "${mod}" && "${GO_BUILD[@]}" -mod=mod -ldflags "-s -w ${ldflags[*]}" -o "${out}/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)
  publish kubernetes
}

build_etcd() {
  local mod=${WORK_DIR}/etcd out
  out=$(stage_dir etcd)
  rm -rf "${out}" && mkdir -p "${mod}" "${out}"
  # etcd's own cmd lives in a module that is not meant to be depended on; its server module exports the
  # same entry point (etcdmain.Main), so a three-line main is the whole wrapper.
  cat >"${mod}/go.mod" <<EOF
module gangsolve.invalid/build/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
EOF
  cat >"${mod}/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  log "etcd: compiling ${ETCD_VERSION}"
  (cd "${mod}" && go mod tidy >/dev/null 2>&1 || go mod tidy) # second run shows the error
  (cd "${mod}" && "${GO_BUILD[@]}" -ldflags "-s -w" -o "${out}/etcd" .)
  publish etcd
}

# A binary whose module can be `go install`ed as is: NAME VERSION PACKAGE LDFLAGS.
go_install() {
  local out
  out=$(stage_dir "$1")
  rm -rf "${out}" && mkdir -p "${out}"
  log "$1: compiling $2"
  (cd "${WORK_DIR}" && GOBIN="${out}" go install -trimpath -ldflags "-s -w $4" "$3@$2")
  publish "$1"
}

build_kwok() {
  go_install kwok "${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}"
}

build_helm() {
  go_install helm "${HELM_VERSION}" helm.sh/helm/v3/cmd/helm \
    "-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
}

total_start=${SECONDS}
log "building into ${BIN_DIR}: ${missing[*]} (go $(go env GOVERSION), $(nproc) cores)"
for c in "${missing[@]}"; do
  start=${SECONDS}
  "build_${c}"
  log "${c} $(component_version "$c"): built in $((SECONDS - start))s -> $(component_dir "$c")"
done
log "cold build time: $((SECONDS - total_start))s for ${missing[*]}"
