-- The app's tables. oncely applies this file at start (and on `oncely migrate`) each time it
-- changes, so every statement must be safe to run again.
-- created_at and updated_at are kept by the host in epoch milliseconds: BIGINT, not INTEGER.
CREATE TABLE IF NOT EXISTS orders (
  id TEXT PRIMARY KEY,
  customer_id TEXT NOT NULL,
  amount_cents INTEGER NOT NULL,
  status TEXT NOT NULL,
  created_at BIGINT,
  updated_at BIGINT
);
