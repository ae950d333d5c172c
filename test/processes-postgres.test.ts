import { describeClockSkew, describeProcesses } from './processes.js';
import { dropSchema, freshSchema, POSTGRES_URL } from './support/postgres.js';

const schema = freshSchema();
describeProcesses(
  'postgres',
  () => ({ kind: 'postgres', connectionString: POSTGRES_URL, schema }),
  () => dropSchema(schema),
);

const skewSchema = freshSchema();
describeClockSkew(
  'postgres',
  () => ({ kind: 'postgres', connectionString: POSTGRES_URL, schema: skewSchema }),
  () => dropSchema(skewSchema),
);
