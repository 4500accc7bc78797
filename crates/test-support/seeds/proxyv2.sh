#!/bin/sh
# Stand-in for Istio's proxy (the seeds' mesh sidecar, run as uid 1337): `proxy sidecar` runs until SIGTERM.
echo "istio-proxy: $* as uid $(id -u)"
trap 'echo "istio-proxy: SIGTERM: draining"; exit 0' TERM
while :; do
  sleep 1 &
  wait $!
done
