/**
 * `npm run cluster`: the scaled deployment on this machine without Docker
 * (see scripts/cluster/index.ts). The load balancer listens on PORT (8080);
 * GATEWAY_ADMIN_TOKEN, GATEWAY_SESSION_TOKEN_SECRET and WEBHOOK_SECRET come
 * from the environment as in compose; CLUSTER_APIS, CLUSTER_REALTIMES,
 * CLUSTER_ENGINES (2 each) size it; TLS_CERT_FILE (a PEM file: certificate
 * chain and key) makes HAProxy serve HTTPS and wss:// on PORT. Ctrl-C stops all of it.
 */
import { clusterOptionsFromEnv, startCluster } from './cluster/index.js';

let options;
try {
  options = clusterOptionsFromEnv(process.env);
} catch (err) {
  console.error(`cluster: ${(err as Error).message}`);
  process.exit(2);
}
const quiet = process.env.CLUSTER_QUIET === 'true';
console.log(`cluster: starting (logs in ${options.workDir})`);
const cluster = await startCluster({
  ...options,
  onLine: quiet ? undefined : (name, line) => console.log(`${name.padEnd(10)} ${line}`),
}).catch((err: Error) => {
  console.error(`cluster: ${err.message}`);
  process.exit(1);
});
console.log(`cluster: ready on ${cluster.url} (realtime ${cluster.wsUrl})`);
for (const p of cluster.processes.values()) console.log(`cluster:   ${p.name.padEnd(10)} ${p.url}`);
let stopping = false;
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    if (stopping) return;
    stopping = true;
    console.log('cluster: stopping');
    void cluster.stop().then(() => process.exit(0));
  });
}
