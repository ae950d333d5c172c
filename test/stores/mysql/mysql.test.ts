import { afterAll, beforeAll } from 'vitest';
import { mysqlStore } from '../../../src/mysql/index.js';
import { createDatabase, databaseUrl, dropDatabase, freshDatabase, testPool } from '../../support/mysql.js';
import { describeConformance } from '../conformance.js';
import { describeListing } from '../listing.js';

const database = freshDatabase();
const pool = testPool(database);
// A pool made with multipleStatements: the store finds out and sends each batch in one round trip, as on its own.
const scripted = testPool(database, 10, true);

beforeAll(() => createDatabase(database));
afterAll(async () => {
  await pool.end();
  await scripted.end();
  await dropDatabase(database);
});

describeConformance('mysql (uri, batched)', () => mysqlStore({ uri: databaseUrl(database) }));
// On a plain pool each statement is a round trip of its own.
describeConformance('mysql (pool, batched)', () => mysqlStore({ pool, table: 'plain' }));
describeConformance('mysql (pool with multipleStatements, unbatched)', () =>
  mysqlStore({ pool: scripted, table: 'unbatched', batch: false }),
);
describeListing('mysql', () => mysqlStore({ uri: databaseUrl(database), table: 'listing' }), { idOrder: true });
