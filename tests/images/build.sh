#!/usr/bin/env bash
# Build the operator and trainer images from the repository's Dockerfile with buildah (no Docker, no
# registry), plus the pause image containerd uses as its sandbox image; all three for the node tier.
#
# The Dockerfile's bases (python:3.11-slim, pytorch/pytorch with the pinned torch) cannot be pulled
# here, so local stand-ins are built first and passed as build args (the Dockerfile's defaults stay):
#   localhost/scaletrain-standin/python:3.11-slim  Debian bookworm minbase (debootstrap, from the host's
#       Debian mirror) with python3 and pip, `python` and `pip` on PATH, pip allowed system-wide and
#       the host's custom CAs trusted (pip reaches PyPI through the same egress proxy as the host).
#   localhost/scaletrain-standin/pytorch:2.13.0    the above plus `pip install torch==2.13.0` (the CUDA
#       build PyPI serves; it runs on CPU), as pytorch/pytorch ships torch.
#   localhost/scaletrain/pause:<upstream's version> pause.c of k8s.io/kubernetes v1.37.2 (from the
#       module cache `make control-plane` fills), static, alone in a scratch image.
# Then `buildah bud --target operator|trainer` tags localhost/scaletrain/{operator,trainer}:<hash>,
# <hash> being a content hash of what goes in (Dockerfile, .dockerignore, pyproject.toml, README.md,
# operator/ and trainer/ as git sees them, this script, the stand-ins' stamps). The references are
# written to ${SCALETRAIN_CACHE:-~/.cache/scaletrain}/images/images.env for the tests to read.
#
# A second call does nothing: each stand-in and the pause image carry a stamp of their recipe (a label,
# hashed from the functions below, so comments can change freely), the built images a tag of their
# inputs, and nothing is rebuilt while those are in buildah's storage. torch is downloaded once per
# build of its stand-in, into a wheelhouse beside images.env that is removed once the stand-in is built
# (the disk is the scarce thing here); the Dockerfile's pip steps use a build cache mount.
# Cost of the first build on 2 CPUs: about 6 minutes (debootstrap ~1, torch ~3), ~5.5 GB of buildah
# storage (~11 GB for a while when the torch stand-in is rebuilt, plus the 2.6 GB wheelhouse).
#
# Needs root, buildah, debootstrap (tests/node/packages.sh installs them) and gcc with a static libc.
# Under `make test` (NODE_OPTIONAL=1) outside CI, a machine that cannot build prints one reason line
# and exits 0, and the node tests skip; anywhere else that is an error.
set -euo pipefail
cd "$(dirname "$0")/../.."
SCRIPT=tests/images/build.sh

KUBE_VERSION=v1.37.2
DEBIAN_SUITE=bookworm # ships Python 3.11, the Dockerfile's PYTHON_VERSION
PYTHON_VERSION=3.11
TORCH_VERSION=2.13.0
# debootstrap --include: python-is-python3 is Debian's `python` symlink, passwd has groupadd/useradd.
PYTHON_PACKAGES=python3,python3-pip,python-is-python3,ca-certificates,passwd
PYTHON_STANDIN=localhost/scaletrain-standin/python:$PYTHON_VERSION-slim
TORCH_STANDIN=localhost/scaletrain-standin/pytorch:$TORCH_VERSION
OPERATOR_REPO=localhost/scaletrain/operator
TRAINER_REPO=localhost/scaletrain/trainer
PAUSE_REPO=localhost/scaletrain/pause
STAMP_LABEL=org.scaletrain.build.stamp
CACHE_ROOT="${SCALETRAIN_CACHE:-$HOME/.cache/scaletrain}"
IMAGES_DIR="$CACHE_ROOT/images"
ENV_FILE="$IMAGES_DIR/images.env"
LOG_DIR="$IMAGES_DIR/logs"
PAUSE_DIR="$CACHE_ROOT/control-plane/gomodcache/k8s.io/kubernetes@$KUBE_VERSION/build/pause"
# torch and its CUDA wheels (~3 GB), downloaded once per stand-in build. A wheelhouse rather than pip's cache:
# pip's HTTP cache keeps only responses with caching headers, which an egress proxy may strip (this
# one does), and then every build would download them again.
WHEELHOUSE="$IMAGES_DIR/wheelhouse"
HOST_CA_DIR=/usr/local/share/ca-certificates # the host's own CAs (the egress proxy's among them)
# RUN steps use runc (tests/node/packages.sh installs it; containerd runs pods with it): buildah's default
# here, crun, refuses hybrid cgroup hierarchies ("cgroups in hybrid mode not supported").
OCI_RUNTIME=runc

# Whatever stops the build is an error, except under `make test` (NODE_OPTIONAL=1) outside CI: there
# the node tests skip with their own reason line, and the other tiers still run.
cannot_build() {
  if [[ "${NODE_OPTIONAL:-}" == 1 && "${CI:-}" != true ]]; then
    echo "images: $1; the node tests will be skipped" >&2
    exit 0
  fi
  echo "images: $1" >&2
  exit 1
}

# The Debian packages it uses: installed when missing, else one reason line.
exec 3>&1
if ! reason="$(NODE_OPTIONAL= bash tests/node/packages.sh buildah debootstrap runc 2>&1 >&3)"; then
  cannot_build "$(tail -n 1 <<<"${reason:-tests/node/packages.sh failed}")"
fi
exec 3>&-
[[ "$(id -u)" == 0 ]] ||
  cannot_build "building the images needs root (buildah's storage in /var/lib/containers, debootstrap)"
[[ -f "$PAUSE_DIR/linux/pause.c" && -f "$PAUSE_DIR/Makefile" ]] ||
  cannot_build "the pause image's source is missing ($PAUSE_DIR): run \`make control-plane\` first"
# Upstream's image version, e.g. `TAG ?= 3.10.2`: the pause image is tagged as upstream tags it.
PAUSE_VERSION="$(sed -n 's/^TAG ?= *\([0-9.]*\) *$/\1/p' "$PAUSE_DIR/Makefile")"
[[ -n "$PAUSE_VERSION" ]] || cannot_build "no \`TAG ?= ...\` line in $PAUSE_DIR/Makefile"
PAUSE_IMAGE="$PAUSE_REPO:$PAUSE_VERSION"

mkdir -p "$IMAGES_DIR" "$LOG_DIR" "$WHEELHOUSE"
exec 9>"$IMAGES_DIR/.lock" # one build at a time: they would share working containers and tags
flock -n 9 || {
  echo "images: another build holds $IMAGES_DIR/.lock, waiting ..."
  flock 9
}

now() { date +%s.%N; }
seconds_since() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.1f", end - start }'; }
sha() { sha256sum | cut -d' ' -f1; }
build_start=$(now)

# ---- recipes. Each runs in a subshell with its output in $LOG_DIR (see `step`); a stamp of each is
# its function's text (`declare -f`, comments dropped) plus the settings it reads.

# The host's Debian mirror for $DEBIAN_SUITE, as apt resolves the host's sources; deb.debian.org else.
debian_mirror() {
  local uri=""
  if command -v apt-get >/dev/null; then
    uri="$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' |
      awk -v suite="$DEBIAN_SUITE" '$2 == suite && $3 == "main" { print $1; exit }')"
  fi
  echo "${uri:-http://deb.debian.org/debian/}"
}

# Removes a working container and whatever is still mounted below its root (debootstrap's /proc).
drop_container() {
  local container="$1" root
  root="$(buildah mount "$container" 2>/dev/null)" || true
  if [[ -n "$root" ]]; then
    findmnt -rn -o TARGET | grep -F "$root/" | sort -r | xargs -r umount -l || true
  fi
  buildah rm "$container" >/dev/null 2>&1 || true
}

build_python_standin() {
  local container root mirror
  container="$(buildah from --name scaletrain-standin-python scratch)"
  trap 'drop_container scaletrain-standin-python' EXIT
  root="$(buildah mount "$container")"
  mirror="$(debian_mirror)"
  echo "debootstrap from $mirror"
  # debootstrap fetches with wget: hand it the proxy apt is configured with, if any.
  eval "$(apt-config shell http_proxy Acquire::http::Proxy 2>/dev/null || true)"
  [[ -n "${http_proxy:-}" ]] && export http_proxy
  mkdir -p "$IMAGES_DIR/debootstrap-cache"
  debootstrap --variant=minbase --include="$PYTHON_PACKAGES" --cache-dir="$IMAGES_DIR/debootstrap-cache" \
    "$DEBIAN_SUITE" "$root" "$mirror"
  # Trust what the host trusts beyond Debian's bundle: its custom CAs (the egress proxy's), merged into
  # /etc/ssl/certs/ca-certificates.crt, which Debian's pip reads.
  if [[ -d "$HOST_CA_DIR" ]]; then
    cp -rL "$HOST_CA_DIR/." "$root/usr/local/share/ca-certificates/"
  fi
  # As in the official image: pip installs system-wide (no PEP 668 marker), into /usr/local.
  chroot "$root" /bin/sh -euxc '
    update-ca-certificates
    rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
    command -v python && command -v pip && python --version && pip --version
    apt-get clean
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log /var/log/bootstrap.log
    rm -f /etc/resolv.conf /etc/hostname'
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd '["python3"]' --os linux --arch "$(dpkg --print-architecture)" \
    --label "$STAMP_LABEL=$PYTHON_STAMP" --label "org.opencontainers.image.title=$PYTHON_STANDIN" \
    --label "org.opencontainers.image.description=scaletrain's local stand-in for python:$PYTHON_VERSION-slim" \
    "$container"
  buildah umount "$container"
  buildah commit --rm "$container" "$PYTHON_STANDIN"
}

build_torch_standin() {
  local container
  container="$(buildah from --pull=never --name scaletrain-standin-pytorch "$PYTHON_STANDIN")"
  trap 'drop_container scaletrain-standin-pytorch' EXIT
  # Host networking: no bridge or firewall rules on a machine that may be running a cluster.
  # `pip download` skips the files the wheelhouse has; the install then reads nothing else.
  buildah run --runtime "$OCI_RUNTIME" --network host -v "$WHEELHOUSE:/wheelhouse" "$container" -- \
    pip download --progress-bar off --dest /wheelhouse "torch==$TORCH_VERSION"
  buildah run --runtime "$OCI_RUNTIME" --network none -v "$WHEELHOUSE:/wheelhouse:ro" "$container" -- \
    pip install --root-user-action=ignore --no-cache-dir --no-index --find-links /wheelhouse "torch==$TORCH_VERSION"
  buildah run --runtime "$OCI_RUNTIME" --network none "$container" -- python -c 'import torch; print(torch.__version__)'
  buildah config --label "$STAMP_LABEL=$TORCH_STAMP" --label "org.opencontainers.image.title=$TORCH_STANDIN" \
    --label "org.opencontainers.image.description=scaletrain's local stand-in for pytorch/pytorch:$TORCH_VERSION" \
    "$container"
  buildah commit --rm "$container" "$TORCH_STANDIN"
}

# Upstream's build (build/pause/Makefile): CFLAGS = -Os -Wall -Werror -static -DVERSION=v$(TAG)-$(REV),
# then strip; REV (git describe in the kubernetes tree) is the release tag; the image as its Dockerfile.
build_pause() {
  local container work
  work="$(mktemp -d)"
  container="$(buildah from --name scaletrain-pause scratch)"
  trap "drop_container scaletrain-pause; rm -rf '$work'" EXIT # expanded now: \$work is gone at exit
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-$KUBE_VERSION" -o "$work/pause" "$PAUSE_DIR/linux/pause.c"
  strip "$work/pause"
  "$work/pause" -v
  buildah copy --chmod 0755 "$container" "$work/pause" /pause
  buildah config --user 65535:65535 --entrypoint '["/pause"]' --os linux \
    --arch "$(dpkg --print-architecture)" --label "$STAMP_LABEL=$PAUSE_STAMP" "$container"
  buildah commit --rm "$container" "$PAUSE_IMAGE"
}

# The Dockerfile's targets, only their bases swapped for the stand-ins. Docker's image format, as
# `docker build` writes it (the OCI format has no SHELL); host networking as above.
build_target() {
  local target="$1" image="$2"
  buildah bud --layers --pull=never --runtime "$OCI_RUNTIME" --network host --format docker --jobs 1 \
    --build-arg "PYTHON_BASE=$PYTHON_STANDIN" --build-arg "TRAINER_BASE=$TORCH_STANDIN" \
    --target "$target" --tag "$image" --file Dockerfile .
}

# ---- stamps and tags

ca_files_hash() {
  if [[ -d "$HOST_CA_DIR" ]]; then
    find -L "$HOST_CA_DIR" -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum
  fi | sha
}
PYTHON_STAMP="$({
  declare -f build_python_standin debian_mirror
  echo "$DEBIAN_SUITE $PYTHON_PACKAGES $(ca_files_hash)"
} | sha)"
TORCH_STAMP="$({
  declare -f build_torch_standin
  echo "$PYTHON_STAMP $TORCH_VERSION"
} | sha)"
PAUSE_STAMP="$({
  declare -f build_pause
  cat "$PAUSE_DIR/linux/pause.c"
  echo "$PAUSE_VERSION $KUBE_VERSION"
  gcc --version | head -n 1
} | sha)"

# What the images are built from, in a fixed order: operator/ and trainer/ as git sees them (tracked
# and untracked files, not the ignored ones), or every file there less Python's caches without git.
image_inputs() {
  printf '%s\n' Dockerfile .dockerignore pyproject.toml README.md "$SCRIPT"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -- operator trainer
  else
    find operator trainer -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -name '*.pyc'
  fi | LC_ALL=C sort -u
}
IMAGE_TAG="$({
  image_inputs | while read -r file; do
    [[ -f "$file" ]] && printf '%s  %s\n' "$(sha <"$file")" "$file"
  done
  echo "stand-ins $PYTHON_STAMP $TORCH_STAMP"
} | sha | cut -c1-12)"
OPERATOR_IMAGE="$OPERATOR_REPO:$IMAGE_TAG"
TRAINER_IMAGE="$TRAINER_REPO:$IMAGE_TAG"

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }
image_stamp() { buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$STAMP_LABEL\"}}" "$1" 2>/dev/null; }
stamped() { have_image "$1" && [[ "$(image_stamp "$1")" == "$2" ]]; }

# Whether buildah works here, checked before the first build (an up-to-date call needs neither): its
# storage (a scratch container), and running a container (the OCI runtime, cgroups, namespaces) with the
# pause image's `/pause -v`, the cheapest container there is.
storage_works=0 runtime_works=0
check_storage() {
  local out
  ((storage_works)) && return
  out="$(buildah from --name "scaletrain-probe-$$" scratch 2>&1 >/dev/null)" ||
    cannot_build "buildah cannot create a container here: $(head -n 1 <<<"$out")"
  buildah rm "scaletrain-probe-$$" >/dev/null
  storage_works=1
}
check_runtime() {
  local out
  ((runtime_works)) && return
  if ! out="$(buildah from --pull=never --name "scaletrain-probe-$$" "$PAUSE_IMAGE" 2>&1 >/dev/null &&
    buildah run --runtime "$OCI_RUNTIME" --network host "scaletrain-probe-$$" -- /pause -v 2>&1 >/dev/null)"; then
    buildah rm "scaletrain-probe-$$" >/dev/null 2>&1 || true
    cannot_build "buildah cannot run a container here ($OCI_RUNTIME): $(head -n 1 <<<"$out")"
  fi
  buildah rm "scaletrain-probe-$$" >/dev/null
  runtime_works=1
}

# Runs one recipe, timed, its output in $LOG_DIR/<name>.log (the log's tail is shown if it fails).
STEPS=5
index=0
built=0
step() {
  local label="$1" name="$2" log="$LOG_DIR/$2.log" start status
  shift 2
  index=$((index + 1))
  if [[ "$1" == up-to-date ]]; then
    printf 'images: [%d/%d] %-44s ... up to date\n' "$index" "$STEPS" "$label"
    return
  fi
  check_storage
  [[ "$name" == pause ]] || check_runtime
  printf 'images: [%d/%d] %-44s ... ' "$index" "$STEPS" "$label"
  start=$(now)
  built=1
  set +e
  (
    set -e
    "$@"
  ) >"$log" 2>&1
  status=$?
  set -e
  if ((status != 0)); then
    echo "failed after $(seconds_since "$start")s"
    tail -n 40 "$log" | sed 's/^/    /' >&2
    echo "images: building $label failed (exit $status), the whole log: $log" >&2
    exit 1
  fi
  echo "$(seconds_since "$start")s"
}

if stamped "$PAUSE_IMAGE" "$PAUSE_STAMP"; then
  step "$PAUSE_IMAGE" pause up-to-date
else
  command -v gcc >/dev/null && [[ "$(gcc -print-file-name=libc.a)" == /* ]] ||
    cannot_build "gcc with a static libc is needed for the pause image (apt-get install gcc libc6-dev)"
  step "$PAUSE_IMAGE (gcc -static)" pause build_pause
fi
if stamped "$PYTHON_STANDIN" "$PYTHON_STAMP"; then
  step "stand-in $PYTHON_STANDIN" python-standin up-to-date
else
  step "stand-in $PYTHON_STANDIN (debootstrap)" python-standin build_python_standin
fi
if stamped "$TORCH_STANDIN" "$TORCH_STAMP"; then
  step "stand-in $TORCH_STANDIN" pytorch-standin up-to-date
else
  step "stand-in $TORCH_STANDIN (pip install torch)" pytorch-standin build_torch_standin
fi
rm -rf "$WHEELHOUSE" # the stand-in has torch now; a rebuild downloads it again
if have_image "$OPERATOR_IMAGE"; then
  step "$OPERATOR_IMAGE" operator up-to-date
else
  step "$OPERATOR_IMAGE" operator build_target operator "$OPERATOR_IMAGE"
fi
if have_image "$TRAINER_IMAGE"; then
  step "$TRAINER_IMAGE" trainer up-to-date
else
  step "$TRAINER_IMAGE" trainer build_target trainer "$TRAINER_IMAGE"
fi

# After a build, what it left behind goes: the older tags of the built images; anything built on an
# outdated stand-in (an outdated torch stand-in alone is 5 GB); and the --layers cache of earlier builds
# (each trainer step ~500 MB), but for the steps the current images are made of and what this run made.
# All of it carries a stand-in's stamp label (images inherit their base's labels); a step is "of" a
# current image when its layers are the first of that image's. Children go before parents: passes.
layers_of() { buildah inspect --type image --format '{{range .OCIv1.RootFS.DiffIDs}}{{.}} {{end}}' "$1"; }
drop_outdated() {
  local repo old id name pass removed keep chain current=() since="${build_start%.*}"
  for repo in "$OPERATOR_REPO" "$TRAINER_REPO"; do
    for old in $(buildah images --format '{{.Name}}:{{.Tag}}' --filter "reference=$repo"); do
      [[ "$old" == "$repo:$IMAGE_TAG" ]] || buildah rmi "$old" >/dev/null 2>&1 || true
    done
  done
  current=("$(layers_of "$OPERATOR_IMAGE")" "$(layers_of "$TRAINER_IMAGE")")
  for pass in 1 2 3 4 5; do
    removed=0
    while read -r id name; do
      case "$(image_stamp "$id")" in
      "$PYTHON_STAMP" | "$TORCH_STAMP" | "$PAUSE_STAMP")
        [[ "$name" == "<none>" ]] || continue # a current stand-in or image
        (("$(buildah inspect --type image --format '{{.OCIv1.Created.Unix}}' "$id")" >= since)) && continue
        chain="$(layers_of "$id")" keep=0
        for old in "${current[@]}"; do [[ "$old" == "$chain"* ]] && keep=1; done
        ((keep)) && continue
        ;;
      esac
      buildah rmi "$id" >/dev/null 2>&1 && removed=1
    done < <(buildah images -a --no-trunc --format '{{.ID}} {{.Name}}' --filter "label=$STAMP_LABEL")
    ((removed)) || break
  done
}
((built == 0)) || drop_outdated

env_text="OPERATOR_IMAGE=$OPERATOR_IMAGE
TRAINER_IMAGE=$TRAINER_IMAGE
PAUSE_IMAGE=$PAUSE_IMAGE"
if [[ ! -f "$ENV_FILE" || "$(cat "$ENV_FILE")" != "$env_text" ]]; then
  printf '%s\n' "$env_text" >"$ENV_FILE.partial"
  mv "$ENV_FILE.partial" "$ENV_FILE"
fi

size() { du -sh "$1" 2>/dev/null | cut -f1; }
echo "images: done in $(seconds_since "$build_start")s; $ENV_FILE:"
for image in "$OPERATOR_IMAGE" "$TRAINER_IMAGE" "$PAUSE_IMAGE" "$PYTHON_STANDIN" "$TORCH_STANDIN"; do
  printf '  %-58s %s\n' "$image" "$(buildah images --format '{{.Size}}' "$image" | head -n 1)"
done
graph_root="$(buildah info --format '{{.store.GraphRoot}}')"
echo "images: disk use: buildah storage $(size "$graph_root")," \
  "debootstrap cache $(size "$IMAGES_DIR/debootstrap-cache"), build cache mounts $(size /var/tmp/buildah-cache)"
