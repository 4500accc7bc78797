#!/bin/sh
# crius-kind-preload: imports every image archive in $KIND_IMAGES (default /kind/images/*.tar) into criusd's store,
# streamed through `crius images import -`, then writes $PRELOADED_STAMP so the next boot skips it. Waits up to
# 30 s for criusd's socket. Run by crius-preload.service; the kind tests run it against a test criusd.
set -eu
images=${KIND_IMAGES:-/kind/images}
stamp=${PRELOADED_STAMP:-/var/lib/crius/kind-preloaded}
address=${CRIUS_ADDRESS:-/run/containerd/containerd.sock}
crius=${CRIUS:-/usr/local/bin/crius}

i=0
until [ -S "$address" ]; do
  i=$((i + 1))
  [ "$i" -le 300 ] || { echo "crius-kind-preload: criusd's socket $address did not appear in 30 s" >&2; exit 1; }
  sleep 0.1
done
n=0
for archive in "$images"/*.tar; do
  [ -e "$archive" ] || continue
  echo "crius-kind-preload: importing $archive"
  "$crius" --address "$address" images import - < "$archive" ||
    { echo "crius-kind-preload: importing $archive failed" >&2; exit 1; }
  n=$((n + 1))
done
mkdir -p "$(dirname "$stamp")"
echo "$n archives imported" > "$stamp"
