#!/bin/sh
# Stand-in for Flyway (the seeds' database migration): `flyway migrate` applies "migrations" and exits 0.
[ "$1" = migrate ] || { echo "usage: flyway migrate" >&2; exit 1; }
echo "flyway: migrating schema \"public\""
sleep 0.5
echo "flyway: successfully applied 3 migrations"
