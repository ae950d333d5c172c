#!/usr/bin/env bash
# Makes the services look like a real deployment before the tests run: another application ("shopfront")
# keeps its data beside oncely's, as in every production Redis, PostgreSQL, MariaDB, RabbitMQ and NATS.
# A test that assumes an empty service fails here, as it would for a user. Idempotent and quick on a
# second run; it never touches oncely's namespaces (Redis `oncely:`/`oncely-test:`, schemas and
# databases `oncely*`, streams `T_*`). Called by scripts/services.sh once the services answer.
set -euo pipefail
cd "$(dirname "$0")/.."

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
POSTGRES_URL=${POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
started=$SECONDS
step() { echo "lived-in: $1 ($((SECONDS - started)) s)"; }

# Redis: about 154,000 keys of several types. The marker expires before the shortest string TTL (2 h),
# so while it is there the keys are too; when it is gone the keys are written again (SET overwrites).
redis() { redis-cli -u "$REDIS_URL" "$@"; }
marker=shopfront:lived-in
if [ "$(redis EXISTS "$marker")" = 1 ]; then
  step "Redis already holds shopfront's keys"
else
  # RESP through redis-cli --pipe: one round trip for the lot, a few seconds for 150,000 keys.
  reply=$(awk -v streamed=5000 '
    function send(n,   i, s) { s = "*" n "\r\n"; for (i = 1; i <= n; i++) s = s "$" length(a[i]) "\r\n" a[i] "\r\n"; printf "%s", s }
    function set2(x, y) { a[1] = x; a[2] = y }
    BEGIN {
      srand(31)
      for (i = 0; i < 110000; i++) { set2("SET", "shopfront:session:" i); a[3] = sprintf("u%07d|%08x", i, int(rand() * 2^31)); a[4] = "EX"; a[5] = 7200 + int(rand() * 21600); send(5) }
      for (i = 0; i < 25000; i++) { set2("HSET", "shopfront:cart:" i); a[3] = "customer"; a[4] = "cus_" i; a[5] = "items"; a[6] = 1 + i % 7; a[7] = "total_cents"; a[8] = 100 * (i % 97); send(8) }
      for (i = 0; i < 15000; i++) { set2("SADD", "shopfront:tags:" i); a[3] = "new"; a[4] = "tier-" i % 4; a[5] = "region-" i % 9; send(5) }
      for (i = 0; i < 2000; i++) { set2("RPUSH", "shopfront:jobs:" i); a[3] = "email:" i; a[4] = "sms:" i; send(4) }
      for (i = 0; i < 2000; i++) { set2("ZADD", "shopfront:rank:" i); a[3] = i % 1000; a[4] = "sku-" i; send(4) }
      set2("DEL", "shopfront:orders"); send(2)
      for (i = 0; i < streamed; i++) { set2("XADD", "shopfront:orders"); a[3] = "*"; a[4] = "order"; a[5] = "ORD-" i; a[6] = "state"; a[7] = "paid"; send(7) }
      set2("XGROUP", "CREATE"); a[3] = "shopfront:orders"; a[4] = "fulfilment"; a[5] = "0"; send(5)
    }' | redis --pipe)
  if ! grep -q 'errors: 0,' <<<"$reply"; then
    echo "lived-in: redis-cli --pipe reported errors: $reply" >&2
    exit 1
  fi
  redis SET "$marker" "$(date -u +%FT%TZ)" EX 3600 >/dev/null
  step "Redis: shopfront's keys written ($(redis DBSIZE) keys in the database)"
fi

# PostgreSQL: other schemas with tables named like oncely's (records, events, outbox, flow_runs), and a
# `records` table in public. Rows are added only to an empty table, so a second run reads and leaves.
psql "$POSTGRES_URL" -q -o /dev/null -v ON_ERROR_STOP=1 <<'SQL'
SET client_min_messages = warning;
-- Two runs at once would race on CREATE SCHEMA IF NOT EXISTS.
SELECT pg_advisory_lock(31031);
CREATE SCHEMA IF NOT EXISTS shopfront;
CREATE SCHEMA IF NOT EXISTS crm;
CREATE TABLE IF NOT EXISTS shopfront.records (id bigserial PRIMARY KEY, key text NOT NULL UNIQUE, state text NOT NULL, payload jsonb, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO shopfront.records (key, state, payload)
  SELECT 'inv-' || g, (ARRAY['open', 'paid', 'void'])[1 + g % 3], jsonb_build_object('amount', g * 7)
  FROM generate_series(1, 5000) g WHERE NOT EXISTS (SELECT 1 FROM shopfront.records);
CREATE TABLE IF NOT EXISTS shopfront.events (id bigserial PRIMARY KEY, source text NOT NULL, type text NOT NULL, body text, status text NOT NULL DEFAULT 'new');
INSERT INTO shopfront.events (source, type, body, status)
  SELECT 'stripe', 'charge.succeeded', '{"n":' || g || '}', 'pending'
  FROM generate_series(1, 20000) g WHERE NOT EXISTS (SELECT 1 FROM shopfront.events);
CREATE TABLE IF NOT EXISTS shopfront.outbox (id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL, status text NOT NULL DEFAULT 'pending', next_attempt_at bigint NOT NULL DEFAULT 0);
INSERT INTO shopfront.outbox (topic, payload)
  SELECT 'mail.send', jsonb_build_object('to', 'user' || g || '@example.com')
  FROM generate_series(1, 2000) g WHERE NOT EXISTS (SELECT 1 FROM shopfront.outbox);
CREATE TABLE IF NOT EXISTS crm.flow_runs (id text PRIMARY KEY, flow text NOT NULL, status text NOT NULL, lease_until bigint);
INSERT INTO crm.flow_runs (id, flow, status)
  SELECT 'run-' || g, 'onboarding', 'pending' FROM generate_series(1, 1000) g WHERE NOT EXISTS (SELECT 1 FROM crm.flow_runs);
CREATE TABLE IF NOT EXISTS crm.records (tenant text NOT NULL, action text NOT NULL, key text NOT NULL, state text NOT NULL, PRIMARY KEY (tenant, action, key));
INSERT INTO crm.records (tenant, action, key, state)
  SELECT 'acme', 'sync', 'contact-' || g, 'succeeded' FROM generate_series(1, 1000) g WHERE NOT EXISTS (SELECT 1 FROM crm.records);
CREATE TABLE IF NOT EXISTS crm.events (id bigserial PRIMARY KEY, kind text NOT NULL, at timestamptz NOT NULL DEFAULT now());
INSERT INTO crm.events (kind) SELECT 'contact.updated' FROM generate_series(1, 1000) WHERE NOT EXISTS (SELECT 1 FROM crm.events);
CREATE TABLE IF NOT EXISTS public.records (id bigserial PRIMARY KEY, name text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO public.records (name) SELECT 'legacy-' || g FROM generate_series(1, 500) g WHERE NOT EXISTS (SELECT 1 FROM public.records);
SELECT pg_advisory_unlock(31031);
SQL
step "PostgreSQL: schemas shopfront and crm, public.records"

# MariaDB: other databases with tables of the same names. Rows from a cross join of digits (MySQL and
# MariaDB alike), added only to an empty table.
mariadb -h 127.0.0.1 -P 3306 -u root <<'SQL'
CREATE DATABASE IF NOT EXISTS shopfront;
CREATE DATABASE IF NOT EXISTS crm;
USE shopfront;
CREATE TABLE IF NOT EXISTS shopfront.records (id BIGINT AUTO_INCREMENT PRIMARY KEY, `key` VARCHAR(100) NOT NULL UNIQUE, state VARCHAR(20) NOT NULL, payload JSON);
CREATE TABLE IF NOT EXISTS shopfront.events (id BIGINT AUTO_INCREMENT PRIMARY KEY, type VARCHAR(100) NOT NULL, status VARCHAR(20) NOT NULL);
CREATE TABLE IF NOT EXISTS shopfront.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(100) NOT NULL, status VARCHAR(20) NOT NULL);
CREATE TABLE IF NOT EXISTS crm.records (tenant VARCHAR(64) NOT NULL, action VARCHAR(64) NOT NULL, `key` VARCHAR(200) NOT NULL, state VARCHAR(20) NOT NULL, PRIMARY KEY (tenant, action, `key`));
CREATE TABLE IF NOT EXISTS crm.flow_runs (id VARCHAR(64) PRIMARY KEY, status VARCHAR(20) NOT NULL);
CREATE TEMPORARY TABLE n AS
  WITH d (d) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)
  SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d AS i FROM d a, d b, d c, d e;
INSERT INTO shopfront.records (`key`, state, payload)
  SELECT CONCAT('inv-', i), 'paid', JSON_OBJECT('amount', i) FROM n WHERE NOT EXISTS (SELECT 1 FROM shopfront.records);
INSERT INTO shopfront.events (type, status) SELECT 'charge.succeeded', 'pending' FROM n WHERE NOT EXISTS (SELECT 1 FROM shopfront.events);
INSERT INTO shopfront.outbox (topic, status) SELECT 'mail.send', 'pending' FROM n WHERE i < 2000 AND NOT EXISTS (SELECT 1 FROM shopfront.outbox);
INSERT INTO crm.records (tenant, action, `key`, state)
  SELECT 'acme', 'sync', CONCAT('contact-', i), 'succeeded' FROM n WHERE i < 1000 AND NOT EXISTS (SELECT 1 FROM crm.records);
INSERT INTO crm.flow_runs (id, status) SELECT CONCAT('run-', i), 'pending' FROM n WHERE i < 1000 AND NOT EXISTS (SELECT 1 FROM crm.flow_runs);
SQL
step "MariaDB: databases shopfront and crm"

# RabbitMQ and NATS through their clients (rabbitmqadmin is not on every machine).
node --import tsx scripts/lived-in-brokers.ts
step "done"
