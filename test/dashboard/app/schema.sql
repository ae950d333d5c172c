-- Every effect is a row with an id of its own: counting rows counts executions.
CREATE TABLE IF NOT EXISTS dash_orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL, created_at BIGINT);
CREATE TABLE IF NOT EXISTS applied (id TEXT PRIMARY KEY, event_id TEXT NOT NULL, created_at BIGINT);
