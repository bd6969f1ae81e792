#!/usr/bin/env bash
# Build the test suite's real Kubernetes cluster from Go modules, as static CGO_ENABLED=0 binaries:
# the control plane (kube-apiserver, kube-controller-manager, kube-scheduler) and the node binaries
# (kubelet, kube-proxy) from k8s.io/kubernetes v1.37.2, etcd 3.7.0 (the version Kubernetes 1.37 is
# tested with), and the cluster DNS, CoreDNS 1.15.0 with only the plugins it needs (coredns/, a
# module of its own so that CoreDNS's dependency versions do not move Kubernetes's), and the Kueue
# v0.17.0 manager (kueue/, a module of its own for the same reason: Kueue pins k8s.io/* v0.35), and
# Prometheus v0.316.0's promtool (promtool/, the same), which the monitoring tests run, and SeaweedFS's weed
# (seaweedfs/, the same), the S3-compatible server of the object-storage tests.
# Upstream links the kubelet dynamically, but only for the standard library's cgo resolver and user
# lookup (net, os/user): no Kubernetes package changes with CGO_ENABLED=0.
#
# Output: ${SCALETRAIN_CACHE:-~/.cache/scaletrain}/control-plane/v1.37.2/bin/, outside the work tree,
# and beside it kueue/: Kueue's CRDs and webhook manifests (config/components/{crd,webhook} of the
# module), which the tests install with its manager (tests/scaletrain_testing/kueue.py).
# The Go module and build caches live beside it, so the user's own Go caches are left alone.
# A second call does nothing: the binaries carry a stamp of the inputs (the modules' go.mod and
# go.sum, this script, etcd's and CoreDNS's main.go) and are rebuilt only when it no longer matches.
# Cost of the first build on 2 CPUs: about 10 minutes, ~700 MB of modules, ~4.4 GB of build cache; Kueue
# adds ~0.7 GB of modules, ~1.6 GB of build cache and an 84 MB binary, and took 23 minutes (about 10 CPU
# minutes) when measured on 2 CPUs shared with a test run (2026-12-02); promtool adds ~0.5 GB of modules
# and an 88 MB binary, 4.5 minutes on 2 CPUs shared with a test run (2026-12-04); weed a 164 MB binary, 4m52s
# cold on 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")"

KUBE_VERSION=v1.37.2
CACHE_ROOT="${SCALETRAIN_CACHE:-$HOME/.cache/scaletrain}/control-plane"
BIN_DIR="$CACHE_ROOT/$KUBE_VERSION/bin"
STAMP="$BIN_DIR/.inputs.sha256"
COREDNS_VERSION=v1.15.0
KUEUE_VERSION=v0.17.0
KUEUE_MANIFESTS="$CACHE_ROOT/$KUBE_VERSION/kueue"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd coredns kueue promtool weed)
declare -A PACKAGE=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [etcd]=./cmd/etcd
  [coredns]=.
  [kueue]=sigs.k8s.io/kueue/cmd/kueue
  [promtool]=github.com/prometheus/prometheus/cmd/promtool
  [weed]=github.com/seaweedfs/seaweedfs/weed
)
# The module each binary is built in (go -C), when not this directory's.
declare -A MODULE_DIR=([coredns]=coredns [kueue]=kueue [promtool]=promtool [weed]=seaweedfs)

inputs_hash() {
  cat go.mod go.sum build.sh cmd/etcd/main.go coredns/go.mod coredns/go.sum coredns/main.go kueue/go.mod kueue/go.sum \
    promtool/go.mod promtool/go.sum seaweedfs/go.mod seaweedfs/go.sum |
    sha256sum | cut -d' ' -f1
}

all_built() {
  local name
  for name in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$name" ]] || return 1; done
  [[ -d "$KUEUE_MANIFESTS/crd" && -d "$KUEUE_MANIFESTS/webhook" ]] || return 1
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
required_go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod ./*/go.mod | sort -V | tail -1)" # the newest any module asks
command -v go >/dev/null 2>&1 ||
  cannot_build "Go >= $required_go is needed to build the test control plane (its go.mod files), but 'go' is not on PATH"
have_go="$(cd / && go env GOVERSION | sed 's/^go//')"
[[ "$(printf '%s\n%s\n' "$required_go" "$have_go" | sort -V | head -1)" == "$required_go" ]] ||
  cannot_build "Go >= $required_go is needed to build the test control plane (its go.mod files), found go$have_go"

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
nice -n 19 go -C kueue mod download
nice -n 19 go -C promtool mod download
nice -n 19 go -C seaweedfs mod download
echo "$(seconds_since "$step_start")s"

# Version stamping as upstream's hack/lib/version.sh, so `--version` and /version say v1.37.2.
# buildDate is the module's publish time rather than now, so a rebuild is a build-cache hit.
build_date="$(go list -mod=readonly -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
version_ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  version_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  version_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
# Kueue's as its Makefile's LD_FLAGS; GitCommit is the module version, as for CoreDNS.
kueue_build_date="$(go -C kueue list -mod=readonly -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' sigs.k8s.io/kueue)"
kueue_ldflags=""
for var in GitVersion GitCommit; do kueue_ldflags+=" -X sigs.k8s.io/kueue/pkg/version.$var=$KUEUE_VERSION"; done
kueue_ldflags+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=$kueue_build_date"

# The flags of upstream's release build for server binaries (hack/lib/golang.sh, non-debug), and
# for CoreDNS those of its Makefile (tag grpcnotrace; GitCommit is the module version, no checkout),
# for Kueue those of its Makefile (no tags).
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
    kueue)
      tags=""
      ldflags="-s -w$kueue_ldflags"
      ;;
    promtool | weed)
      tags=""
      ;;
  esac
  printf 'control-plane: [%d/%d] building %-24s ... ' "$index" "${#BINARIES[@]}" "$name"
  step_start=$(now)
  nice -n 19 go -C "${MODULE_DIR[$name]:-.}" build -mod=readonly -trimpath -tags "$tags" \
    -ldflags "$ldflags" -o "$BIN_DIR/$name.partial" "${PACKAGE[$name]}"
  mv "$BIN_DIR/$name.partial" "$BIN_DIR/$name"
  echo "$(seconds_since "$step_start")s, $(du -h "$BIN_DIR/$name" | cut -f1)"
done

# Kueue's manifests as its kustomize sources hold them (crd/bases and the conversion patches named in
# crd/kustomization.yaml; webhook/manifests.yaml and the namespaceSelector patches in its kustomization).
kueue_module="$(go -C kueue list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
rm -rf "$KUEUE_MANIFESTS"
mkdir -p "$KUEUE_MANIFESTS"
cp -R "$kueue_module/config/components/crd" "$kueue_module/config/components/webhook" "$KUEUE_MANIFESTS/"
chmod -R u+w "$KUEUE_MANIFESTS"
echo "control-plane: Kueue $KUEUE_VERSION manifests in $KUEUE_MANIFESTS"
inputs_hash >"$STAMP"

size() { du -sh "$1" | cut -f1; }
echo "control-plane: built in $(seconds_since "$build_start")s into $BIN_DIR"
echo "control-plane: disk use: binaries $(size "$BIN_DIR"), module cache $(size "$GOMODCACHE"), build cache $(size "$GOCACHE")"
