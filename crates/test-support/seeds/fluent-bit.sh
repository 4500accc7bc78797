#!/bin/sh
# Stand-in for Fluent Bit (the seeds' log agent): every FLUSH_INTERVAL seconds it ships the new lines of
# /var/log/app/*.log to its stdout; on SIGTERM it ships what is left, says so and exits 0.
dir=/var/log/app
sent=0
mkdir -p /tmp/fluent-bit
ship() {
  for f in "$dir"/*.log; do
    [ -f "$f" ] || continue
    pos=/tmp/fluent-bit/$(basename "$f")
    n=$(wc -l < "$f")
    k=$(cat "$pos" 2>/dev/null || echo 0)
    if [ "$n" -gt "$k" ]; then
      tail -n +"$((k + 1))" "$f" | head -n "$((n - k))" | sed 's/^/shipped: /'
      sent=$((sent + n - k))
      echo "$n" > "$pos"
    fi
  done
}
trap 'ship; echo "fluent-bit: SIGTERM: flushed, $sent lines shipped"; exit 0' TERM
echo "fluent-bit: watching $dir every ${FLUSH_INTERVAL:-1}s"
while :; do
  ship
  sleep "${FLUSH_INTERVAL:-1}" &
  wait $!
done
