#!/usr/bin/env bash
# Starts the services the tests talk to (PostgreSQL, Redis) when they are down, and waits until
# they answer. The tests never skip a missing service: they fail, so this runs before them.
set -euo pipefail

wait_for() { # name, check command
  for _ in $(seq 1 60); do
    if eval "$2" >/dev/null 2>&1; then echo "services: $1 is up"; return 0; fi
    sleep 0.5
  done
  echo "services: $1 did not come up" >&2
  return 1
}

if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
wait_for PostgreSQL "pg_isready -h 127.0.0.1 -p 5432 -q"

if ! redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; then
  echo "services: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
wait_for Redis "redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG"
