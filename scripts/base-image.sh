#!/usr/bin/env bash
# Builds the local Debian base image forge-base:bookworm with debootstrap (no registry is reachable
# on these machines), idempotently: nothing happens when the image already exists.
#   scripts/base-image.sh [IMAGE]        (default forge-base:bookworm)
# The image carries python3 (forge's react harness and verifiers), ca-certificates, procps and tar.
set -euo pipefail
IMAGE=${1:-forge-base:bookworm}
SUITE=${FORGE_BASE_SUITE:-bookworm}
MIRROR=${FORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,ca-certificates,procps,tar

if docker image inspect "$IMAGE" >/dev/null 2>&1; then exit 0; fi
command -v debootstrap >/dev/null || { echo "base-image.sh: debootstrap is missing (scripts/setup.sh docker installs it)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/forge-base.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
printf '\033[1m[setup]\033[0m building %s with debootstrap (about a minute)\n' "$IMAGE"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$DIR" "$MIRROR" >"$DIR.log" 2>&1 || {
  echo "base-image.sh: debootstrap failed; last lines of $DIR.log:" >&2; tail -n 20 "$DIR.log" >&2; exit 1; }
rm -f "$DIR.log"
# apt caches and lists are not needed in the image
rm -rf "$DIR"/var/cache/apt/archives/*.deb "$DIR"/var/lib/apt/lists/*
tar -C "$DIR" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "built $IMAGE"
