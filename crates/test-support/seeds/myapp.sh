#!/bin/sh
# Stand-in for the seeds' long-running app: serves until SIGTERM, then shuts down cleanly. It prints its
# cgroup's CPU and memory limits on SIGUSR1 (in-place resize shows there).
limits() { echo "myapp: cpu.max $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo ?) memory.max $(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo ?)"; }
trap 'echo "myapp: SIGTERM: shutting down"; exit 0' TERM
trap limits USR1
echo "myapp: serving"
limits
while :; do
  sleep 1 &
  wait $!
done
