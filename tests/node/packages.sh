#!/usr/bin/env bash
# The Debian packages the node tier and `make images`/`make cluster` use, installed when missing (as
# root, on Debian or Ubuntu): buildah builds the images; containerd, runc and the CNI plugins run
# pods; iptables and conntrack serve kube-proxy; debootstrap builds the stand-in base images.
# Prints one reason line and exits 3 when they are missing and cannot be installed here.
set -euo pipefail

PACKAGES=(buildah containerd runc containernetworking-plugins debootstrap iptables conntrack)

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
((${#missing[@]} == 0)) && exit 0

if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "node packages missing (${missing[*]}): install them as root with apt-get" >&2
  exit 3
fi
echo "node: installing ${missing[*]} ..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
