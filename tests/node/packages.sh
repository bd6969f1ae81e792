#!/usr/bin/env bash
# The Debian packages that `make images` and a real node use, installed when missing (as root, with
# apt-get): buildah builds the images (its RUN steps with runc; debootstrap makes the stand-in base
# images); containerd, runc and the CNI plugins run pods; iptables and conntrack serve kube-proxy.
#
# Usage: packages.sh [PACKAGE...]   (default: all of them). A package counts as present when what it
# provides is (a command, or the CNI plugins' directory), whoever installed it: on a machine with
# Docker's own containerd and runc, Debian's would conflict with them.
# Exits 3 with one reason line when something is missing and cannot be installed here; under
# NODE_OPTIONAL=1 outside CI it says so and exits 0 (the node tests then skip with their own reason).
set -euo pipefail

declare -A PROVIDES=(
  [buildah]=buildah
  [debootstrap]=debootstrap
  [runc]=runc
  [containerd]=containerd
  [containernetworking-plugins]=/usr/lib/cni/bridge
  [iptables]=iptables
  [conntrack]=conntrack
)
wanted=("$@")
((${#wanted[@]})) || wanted=(buildah debootstrap runc containerd containernetworking-plugins iptables conntrack)

missing=()
for package in "${wanted[@]}"; do
  what="${PROVIDES[$package]:?no such package here: $package}"
  if [[ "$what" == /* ]]; then [[ -e "$what" ]]; else command -v "$what" >/dev/null; fi || missing+=("$package")
done
((${#missing[@]} == 0)) && exit 0

if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
  reason="node packages missing (${missing[*]}): install them as root with apt-get"
  if [[ "${NODE_OPTIONAL:-}" == 1 && "${CI:-}" != true ]]; then
    echo "$reason; the node tests will be skipped" >&2
    exit 0
  fi
  echo "$reason" >&2
  exit 3
fi
echo "node: installing ${missing[*]} ..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
