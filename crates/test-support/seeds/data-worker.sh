#!/bin/sh
# Stand-in for the seeds' batch worker: processes RECORDS records (default 5), logging each to
# /var/log/app/worker.log for the log agent, then exits 0.
mkdir -p /var/log/app
n=${RECORDS:-5}
i=1
while [ "$i" -le "$n" ]; do
  echo "record $i processed" >> /var/log/app/worker.log
  echo "worker: record $i"
  sleep 0.2
  i=$((i + 1))
done
echo "worker: done, $n records"
