#!/usr/bin/env bash
# Build the test suite's real Kubernetes cluster from Go modules, as static CGO_ENABLED=0 binaries:
# the control plane (kube-apiserver, kube-controller-manager, kube-scheduler) and the node binaries
# (kubelet, kube-proxy) from k8s.io/kubernetes v1.37.2, etcd 3.7.0 (the version Kubernetes 1.37 is
# tested with), and the cluster DNS, CoreDNS 1.15.0 with only the plugins it needs (coredns/, a
# module of its own so that CoreDNS's dependency versions do not move Kubernetes's).
# Upstream links the kubelet dynamically, but only for the standard library's cgo resolver and user
# lookup (net, os/user): no Kubernetes package changes with CGO_ENABLED=0.
#
# Output: ${SCALETRAIN_CACHE:-~/.cache/scaletrain}/control-plane/v1.37.2/bin/, outside the work tree.
# The Go module and build caches live beside it, so the user's own Go caches are left alone.
# A second call does nothing: the binaries carry a stamp of the inputs (both modules' go.mod and
# go.sum, this script, etcd's and CoreDNS's main.go) and are rebuilt only when it no longer matches.
# Cost of the first build on 2 CPUs: about 10 minutes, ~700 MB of modules, ~4.4 GB of build cache.
set -euo pipefail
cd "$(dirname "$0")"

KUBE_VERSION=v1.37.2
CACHE_ROOT="${SCALETRAIN_CACHE:-$HOME/.cache/scaletrain}/control-plane"
BIN_DIR="$CACHE_ROOT/$KUBE_VERSION/bin"
STAMP="$BIN_DIR/.inputs.sha256"
COREDNS_VERSION=v1.15.0
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd coredns)
declare -A PACKAGE=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [etcd]=./cmd/etcd
  [coredns]=.
)
# The module each binary is built in (go -C), when not this directory's.
declare -A MODULE_DIR=([coredns]=coredns)

inputs_hash() {
  cat go.mod go.sum build.sh cmd/etcd/main.go coredns/go.mod coredns/go.sum coredns/main.go |
    sha256sum | cut -d' ' -f1
}

all_built() {
  local name
  for name in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$name" ]] || return 1; done
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(inputs_hash)" ]]
}

if all_built; then
  echo "control plane up to date: $BIN_DIR"
  exit 0
fi

# No usable Go is an error, except under `make test` (CONTROL_PLANE_OPTIONAL=1) outside CI: there the
# control-plane tests skip with their own reason line, and the other tiers still run.
cannot_build() {
  if [[ "${CONTROL_PLANE_OPTIONAL:-}" == 1 && "${CI:-}" != true ]]; then
    echo "control-plane: $1; its tests will be skipped" >&2
    exit 0
  fi
  echo "control-plane: $1" >&2
  exit 1
}

# A pinned toolchain only: never let `go` download a newer one behind the user's back.
export GOTOOLCHAIN=local
required_go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)"
command -v go >/dev/null 2>&1 ||
  cannot_build "Go >= $required_go is needed to build the test control plane (go.mod), but 'go' is not on PATH"
have_go="$(cd / && go env GOVERSION | sed 's/^go//')"
[[ "$(printf '%s\n%s\n' "$required_go" "$have_go" | sort -V | head -1)" == "$required_go" ]] ||
  cannot_build "Go >= $required_go is needed to build the test control plane (go.mod), found go$have_go"

export GOMODCACHE="$CACHE_ROOT/gomodcache" GOCACHE="$CACHE_ROOT/gocache" GOTMPDIR="$CACHE_ROOT/tmp"
export GOFLAGS=-modcacherw # a writable module cache can be removed with rm -rf
export CGO_ENABLED=0
mkdir -p "$BIN_DIR" "$GOTMPDIR"
rm -f "$STAMP"

now() { date +%s.%N; }
seconds_since() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.1f", end - start }'; }
build_start=$(now)

printf 'control-plane: downloading Go modules into %s ... ' "$GOMODCACHE"
step_start=$(now)
nice -n 19 go mod download
nice -n 19 go -C coredns mod download
echo "$(seconds_since "$step_start")s"

# Version stamping as upstream's hack/lib/version.sh, so `--version` and /version say v1.37.2.
# buildDate is the module's publish time rather than now, so a rebuild is a build-cache hit.
build_date="$(go list -mod=readonly -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
version_ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  version_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  version_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

# The flags of upstream's release build for server binaries (hack/lib/golang.sh, non-debug), and
# for CoreDNS those of its Makefile (tag grpcnotrace; GitCommit is the module version, no checkout).
index=0
for name in "${BINARIES[@]}"; do
  index=$((index + 1))
  tags=selinux,notest,grpcnotrace
  ldflags="-s -w"
  case "$name" in
    kube*) ldflags="all=$version_ldflags -s -w" ;;
    coredns)
      tags=grpcnotrace
      ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION"
      ;;
  esac
  printf 'control-plane: [%d/%d] building %-24s ... ' "$index" "${#BINARIES[@]}" "$name"
  step_start=$(now)
  nice -n 19 go -C "${MODULE_DIR[$name]:-.}" build -mod=readonly -trimpath -tags "$tags" \
    -ldflags "$ldflags" -o "$BIN_DIR/$name.partial" "${PACKAGE[$name]}"
  mv "$BIN_DIR/$name.partial" "$BIN_DIR/$name"
  echo "$(seconds_since "$step_start")s, $(du -h "$BIN_DIR/$name" | cut -f1)"
done
inputs_hash >"$STAMP"

size() { du -sh "$1" | cut -f1; }
echo "control-plane: built in $(seconds_since "$build_start")s into $BIN_DIR"
echo "control-plane: disk use: binaries $(size "$BIN_DIR"), module cache $(size "$GOMODCACHE"), build cache $(size "$GOCACHE")"
