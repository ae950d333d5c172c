import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';

/** The MariaDB (or MySQL) the tests use; MYSQL_URL overrides the local default. */
export const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/** A database name no other test run uses, so runs in parallel never see each other's records. */
export function freshDatabase(): string {
  return `oncely_t_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
}

/** The test server's URI with `database` as the connection's database. */
export function databaseUrl(database: string): string {
  const url = new URL(MYSQL_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

/** A pool on the test server that fails fast, instead of hanging, when MariaDB is down. */
export function testPool(database?: string, connectionLimit = 10, multipleStatements = false): mysql.Pool {
  return mysql.createPool({
    uri: database === undefined ? MYSQL_URL : databaseUrl(database),
    connectionLimit,
    connectTimeout: 5_000,
    charset: 'utf8mb4',
    multipleStatements,
  });
}

/** Creates a database made by freshDatabase(). */
export async function createDatabase(name: string): Promise<void> {
  await admin(`CREATE DATABASE IF NOT EXISTS \`${checked(name)}\``);
}

/** Drops a database made by freshDatabase() and everything in it. */
export async function dropDatabase(name: string): Promise<void> {
  await admin(`DROP DATABASE IF EXISTS \`${checked(name)}\``);
}

function checked(name: string): string {
  if (!/^oncely_t_[a-z0-9]+$/.test(name)) throw new Error(`refusing to touch database ${JSON.stringify(name)}`);
  return name;
}

async function admin(statement: string): Promise<void> {
  const connection = await mysql.createConnection({ uri: MYSQL_URL, connectTimeout: 5_000 });
  try {
    await connection.query(statement);
  } finally {
    await connection.end();
  }
}
