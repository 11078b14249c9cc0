/**
 * Entry point of the API process in a scaled deployment: everything comes
 * from the environment (DATABASE_URL required). For the no-configuration
 * start, see scripts/start.ts. A declaration on the process shell
 * (shared/process/runner.ts): startApi drains and closes in its own order.
 */
import { runProcess } from '../shared/process/runner.js';
import { startApi } from './server.js';

await runProcess({ name: 'api', start: ({ config, logger }) => startApi(config, logger) }).catch(
  () => undefined,
);
