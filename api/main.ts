/**
 * Entry point of the API process in a scaled deployment: everything comes
 * from the environment (DATABASE_URL required). For the no-configuration
 * start, see scripts/start.ts.
 */
import { loadConfig } from '../shared/config/index.js';
import { createLogger } from '../shared/logger.js';
import { startApi } from './server.js';
import { installFailurePolicy } from '../shared/process/index.js';

const config = loadConfig();
const logger = createLogger({ level: config.logLevel, name: 'api' });
// A fatal exception stops the API gracefully once it runs.
const running: { stop?: () => Promise<void> } = {};
installFailurePolicy(logger, { onFatal: () => running.stop?.() });
const api = await startApi(config, logger);
running.stop = () => api.stop();
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    void api.stop().then(() => process.exit(0));
  });
}
