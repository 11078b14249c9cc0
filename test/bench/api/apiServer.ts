/** The real API for the benchmark: Postgres, Redis limits, full middleware chain. */
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { startApi } from '../../../api/server.js';

const config = loadConfig({ ...process.env, PORT: '0', HOST: '127.0.0.1' });
// Access logs go where production sends them (stdout); the bench discards them.
const logger = createLogger({ level: config.logLevel, name: 'api' });
const api = await startApi(config, logger);
const issued = await api.deps.keys.issue({ ownerId: 'bench', plan: 'bench' });
process.send?.({ port: api.port, key: issued.key });
process.on('message', (m) => {
  if (m === 'cpu') process.send?.({ cpu: process.cpuUsage() });
  if (m === 'stop') void api.stop().then(() => process.exit(0));
});
