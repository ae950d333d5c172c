/** The dashboard in Chromium against `oncely serve` on PostgreSQL, in a schema of its own (suite.ts). */
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { dashboardSuite } from './suite.js';

const schema = freshSchema();
dashboardSuite(
  'postgres',
  () => `${POSTGRES_URL}?schema=${schema}`,
  () => dropSchema(schema),
);
