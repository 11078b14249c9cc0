/**
 * The real API for the benchmark: Postgres, Redis limits, full middleware
 * chain; beside it, on a second port, the poll floor (pollFloor.ts) built
 * from the same dependencies.
 */
import type { AddressInfo } from 'node:net';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { startApi } from '../../../api/server.js';
import { pollFloorApp } from './pollFloor.js';

const config = loadConfig({ ...process.env, PORT: '0', HOST: '127.0.0.1' });
// Access logs go where production sends them (stdout); the bench discards them.
const logger = createLogger({ level: config.logLevel, name: 'api' });
const api = await startApi(config, logger);
const issued = await api.deps.keys.issue({ ownerId: 'bench', plan: 'bench' });
const floor = pollFloorApp(api.deps).listen(0, '127.0.0.1');
await new Promise((resolve) => floor.once('listening', resolve));
process.send?.({ port: api.port, floorPort: (floor.address() as AddressInfo).port, key: issued.key });
process.on('message', (m) => {
  if (m === 'cpu') process.send?.({ cpu: process.cpuUsage() });
  if (m === 'stop') {
    floor.close();
    void api.stop().then(() => process.exit(0));
  }
});
