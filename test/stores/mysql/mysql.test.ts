import { afterAll, beforeAll } from 'vitest';
import { mysqlStore } from '../../../src/mysql/index.js';
import { createDatabase, databaseUrl, dropDatabase, freshDatabase, testPool } from '../../support/mysql.js';
import { describeConformance } from '../conformance.js';
import { describeListing } from '../listing.js';

const database = freshDatabase();
const pool = testPool(database);

beforeAll(() => createDatabase(database));
afterAll(async () => {
  await pool.end();
  await dropDatabase(database);
});

describeConformance('mysql (uri, batched)', () => mysqlStore({ uri: databaseUrl(database) }));
describeConformance('mysql (pool, unbatched)', () => mysqlStore({ pool, table: 'unbatched', batch: false }));
describeListing('mysql', () => mysqlStore({ uri: databaseUrl(database), table: 'listing' }), { idOrder: true });
