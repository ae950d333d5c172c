#!/usr/bin/env bash
# Starts the services the tests talk to (PostgreSQL, MariaDB, Redis, NATS with JetStream, RabbitMQ) when
# they are down, and waits until they answer. The tests never skip a missing service: they fail, so this runs before them.
set -euo pipefail

wait_for() { # name, check command, [tries of 0.5 s, default 60]
  for _ in $(seq 1 "${3:-60}"); do
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

# nc is not on every machine: bash's /dev/tcp answers whether a port accepts connections.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! port_open 4222; then
  echo "services: starting NATS (JetStream)"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
fi
wait_for NATS "port_open 4222"

if ! port_open 5672; then
  echo "services: starting RabbitMQ"
  rabbitmq-server -detached || true
fi
# RabbitMQ boots the Erlang VM first: up to a minute on a loaded machine.
wait_for RabbitMQ "port_open 5672" 120

if ! mariadb -h 127.0.0.1 -P 3306 -u root -e 'select 1' >/dev/null 2>&1; then
  echo "services: starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
fi
wait_for MariaDB "mariadb -h 127.0.0.1 -P 3306 -u root -e 'select 1'"
mariadb -h 127.0.0.1 -P 3306 -u root -e 'create database if not exists test'

# Debian packages the tests use: Chromium for the dashboard's end-to-end tests (playwright-core never
# downloads a browser here), stress-ng for `npm run test:stress`'s CPU hogs.
install() { # command, package
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "services: installing $2"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$2" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "$2" >/dev/null; }
}
install chromium chromium
install stress-ng stress-ng
chromium --version

# Other applications' data beside oncely's, as in a real deployment (see the script).
bash "$(dirname "$0")/lived-in.sh"
