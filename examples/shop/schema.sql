-- The shop's tables. Every effect of an event is a row (or a stock change), so counting rows
-- counts executions: nothing here dedupes, oncely has to.
CREATE TABLE IF NOT EXISTS products (sku TEXT PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL, stock INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS orders (
  id TEXT PRIMARY KEY, customer_id TEXT NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL,
  amount_cents INTEGER NOT NULL, phone TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT, updated_at BIGINT
);
CREATE TABLE IF NOT EXISTS stock_moves (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, sku TEXT NOT NULL, delta INTEGER NOT NULL, created_at BIGINT);
CREATE TABLE IF NOT EXISTS ledger (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, kind TEXT NOT NULL, amount_cents INTEGER NOT NULL, created_at BIGINT);
CREATE TABLE IF NOT EXISTS parcels (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT);
CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, charge_id TEXT NOT NULL, created_at BIGINT);
CREATE TABLE IF NOT EXISTS sms_sent (id TEXT PRIMARY KEY, phone TEXT NOT NULL, text TEXT NOT NULL, created_at BIGINT);
INSERT INTO products (sku, name, price_cents, stock) VALUES ('TEA-1', 'Longjing tea', 4200, 1000) ON CONFLICT DO NOTHING;
