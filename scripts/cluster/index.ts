/**
 * The scaled deployment on one machine, without Docker: N API, N realtime and
 * N engine processes from the build output (dist/), an S3-compatible store
 * (s3rver), the machine's Postgres and Redis (or the given URLs), and
 * HAProxy with docker/haproxy.cfg rendered for loopback. A one-shot migration
 * runs before any instance starts, as the compose file's `migrate` service.
 *
 * `npm run cluster` runs it (scripts/cluster.ts); the deployment test starts
 * it through `startCluster` and kills parts of it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import S3rver from 's3rver';
import { haproxyConfigPath, renderHaproxyConfig } from './haproxy.js';
import { settingNames } from '../../shared/config/index.js';
import { REALTIME_NODE_FLAGS } from '../../shared/config/realtime.js';

const here = path.dirname(fileURLToPath(import.meta.url));

export type Role = 'api' | 'realtime' | 'engine';

export interface ClusterOptions {
  /** Public port of the load balancer (0: a free one). */
  port: number;
  apis: number;
  realtimes: number;
  engines: number;
  databaseUrl: string;
  redisUrl: string;
  adminToken: string;
  sessionSecret: string;
  webhookSecret: string;
  /** An S3 endpoint to use instead of starting s3rver (with S3_* credentials in `env`). */
  s3Endpoint?: string;
  /** Where logs, the rendered HAProxy config and the local S3 data go. */
  workDir: string;
  /** The compiled repository (dist/); default: the one this module runs from, else ./dist. */
  distDir?: string;
  /** Extra environment for every instance (plans, lease TTLs, ...). */
  env?: Record<string, string>;
  /**
   * Settings for every instance that give way to the topology the cluster
   * sets itself (addresses, ports, store, secrets): those an operator set in
   * the environment of `npm run cluster` (`clusterOptionsFromEnv`).
   */
  settings?: Record<string, string>;
  /** Every output line of every process, with its name. */
  onLine?: (name: string, line: string) => void;
  /**
   * A PEM file (certificate chain and private key): HAProxy terminates TLS
   * with it, HTTPS and wss:// on the public port (docker/haproxy.cfg,
   * TLS_CERT_FILE). Unset: plain HTTP.
   */
  tlsCertFile?: string;
}

export interface ClusterProcess {
  name: string;
  role: Role;
  port: number;
  url: string;
  child: ChildProcess;
  /** Output lines so far (JSON log lines of our processes). */
  lines: string[];
  exited: Promise<number | null>;
  env: Record<string, string>;
}

export interface Cluster {
  url: string;
  wsUrl: string;
  port: number;
  processes: Map<string, ClusterProcess>;
  haproxy: ChildProcess;
  haproxyConfig: string;
  s3Endpoint: string;
  /** Starts one more instance of a role (or restarts a stopped one under its name and port). */
  start(name: string): Promise<ClusterProcess>;
  /** Stops everything (SIGTERM, then SIGKILL after a grace). */
  stop(): Promise<void>;
}

/** The dist/ directory the processes run from. */
function defaultDistDir(): string {
  // scripts/cluster → repo root; dist/scripts/cluster → dist.
  const up = path.resolve(here, '../..');
  return path.basename(up) === 'dist' ? up : path.join(up, 'dist');
}

export { ensureDatabase, freePort, stopProcess, waitHttpOk } from './processes.js';
import { ensureDatabase, freePort, stopProcess, waitHttpOk } from './processes.js';

function haproxyBinary(): string {
  for (const p of ['/usr/sbin/haproxy', '/usr/local/sbin/haproxy', '/usr/bin/haproxy'])
    if (fs.existsSync(p)) return p;
  throw new Error("HAProxy is not installed: run `npm run setup` (installs Debian's haproxy)");
}

const ENTRY: Record<Role, string> = {
  api: 'api/main.js',
  realtime: 'realtime/main.js',
  engine: 'engine/main.js',
};
/**
 * The realtime tier decodes with the built-in engine's streaming form (each
 * utterance searched while it is spoken, the session's own normalisation):
 * the remote engine workers only get whole clips, which loses words at the
 * cuts and answers late. Segment and batch on the API keep the engine
 * workers. Admission follows the decoder pool: one streaming decoder per
 * session (about 40 MiB each), no more sessions than the instance's cores
 * carry at real time, and no new session while as many utterances wait for
 * their final as there are decoders (the decoders are behind). docker/compose.yaml's
 * realtime services carry the same values (the deployment test checks).
 */
export const REALTIME_ENV: Record<string, string> = {
  STT_ENGINE: 'builtin',
  STT_STREAM_DECODERS: '5',
  REALTIME_MAX_SESSIONS: '5',
  REALTIME_MAX_QUEUED_UTTERANCES: '5',
  // The clip form (a session whose decoder is not free) needs one decoder thread, not one per core.
  STT_THREADS: '1',
  // An instance is one core's worth of sessions (a core decodes 5 real-time streams): one streaming
  // thread holds its 5 decoders (a second thread adds its own isolate and models, about 60 MiB, and no
  // core), and 5 streams' VAD runs in the WebSocket thread (a VAD thread is an isolate, about 20 MiB,
  // for some 80 µs of silero per second and stream). docs/decisions/deployment.md, "One core per instance".
  STT_STREAM_THREADS: '1',
  REALTIME_VAD_THREADS: '0',
  // An utterance whose final waits behind decoders that fell behind real time (a busy machine) may
  // wait up to the session's own REALTIME_TRANSCRIBE_TIMEOUT_MS (30 s) instead of the engine's
  // shorter limit (base + 1 s per audio second, 10 s by default). Either way it fails alone: a decode
  // behind busy cores is queueing (EngineBusyError), which the breaker does not count.
  STT_BUILTIN_TIMEOUT_BASE_MS: '30000',
};
const NODE_FLAGS: Record<Role, string[]> = { api: [], realtime: REALTIME_NODE_FLAGS, engine: [] };
const ROLE_ENV: Record<Role, Record<string, string>> = { api: {}, realtime: REALTIME_ENV, engine: {} };

const READY_PATH: Record<Role, string> = {
  api: '/readyz/instance',
  realtime: '/readyz',
  engine: '/readyz',
};

export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const dist = opts.distDir ?? defaultDistDir();
  for (const role of Object.keys(ENTRY) as Role[])
    if (!fs.existsSync(path.join(dist, ENTRY[role])))
      throw new Error(`${path.join(dist, ENTRY[role])} missing: run \`npm run build\` first`);
  fs.mkdirSync(opts.workDir, { recursive: true });
  const started: (() => Promise<void>)[] = [];
  const processes = new Map<string, ClusterProcess>();
  let haproxyChild: ChildProcess | undefined;
  let haproxyLines: string[] | undefined;
  // Outside in: the load balancer, then the instances (they drain), then the engines they call, then S3.
  const stopAll = async () => {
    if (haproxyChild) await stopProcess(haproxyChild, 5000);
    const tier = (roles: Role[]) =>
      Promise.all(
        [...processes.values()]
          .filter((p) => roles.includes(p.role))
          .map((p) => stopProcess(p.child, 20_000)),
      );
    await tier(['api', 'realtime']);
    await tier(['engine']);
    for (const fn of started.reverse()) await fn().catch(() => {});
  };

  try {
    // S3-compatible store shared by every API instance (artifacts, checkpoints).
    let s3Endpoint = opts.s3Endpoint;
    let s3Env: Record<string, string> = {};
    if (!s3Endpoint) {
      const dir = path.join(opts.workDir, 's3');
      fs.mkdirSync(dir, { recursive: true });
      const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir });
      const addr = await server.run();
      started.push(() => server.close());
      s3Endpoint = `http://127.0.0.1:${addr.port}`;
      // s3rver accepts its fixed development credentials.
      s3Env = { S3_ACCESS_KEY_ID: 'S3RVER', S3_SECRET_ACCESS_KEY: 'S3RVER' };
    }

    await ensureDatabase(opts.databaseUrl);
    const ports = {
      api: await Promise.all(Array.from({ length: opts.apis }, freePort)),
      realtime: await Promise.all(Array.from({ length: opts.realtimes }, freePort)),
      engine: await Promise.all(Array.from({ length: opts.engines }, freePort)),
    };
    const loopback = (p: number) => `127.0.0.1:${p}`;
    // The compose file's x-app environment, with loopback addresses.
    const common: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      NODE_ENV: 'production',
      DATABASE_URL: opts.databaseUrl,
      REDIS_URL: opts.redisUrl,
      GATEWAY_ADMIN_TOKEN: opts.adminToken,
      GATEWAY_SESSION_TOKEN_SECRET: opts.sessionSecret,
      WEBHOOK_SECRET: opts.webhookSecret,
      STT_WORKER_URLS: ports.engine.map((p, i) => `engine${i + 1}=http://${loopback(p)}`).join(','),
      STT_ATTEMPT_TIMEOUT_MS: '30000',
      STT_BUDGET_MS: '60000',
      TRUST_PROXY: 'true',
      LOG_LEVEL: 'info',
      REALTIME_READY_URLS: ports.realtime.map((p) => `http://${loopback(p)}/readyz`).join(','),
      ARTIFACT_STORE: 's3',
      S3_ENDPOINT: s3Endpoint,
      S3_BUCKET: 'transcriptions',
      S3_FORCE_PATH_STYLE: 'true',
      ...s3Env,
      // The one-shot migration below has run: instances do not migrate.
      MIGRATE_ON_START: 'false',
      // On SIGTERM an API first fails its load-balancer check, then stops (fall 2 x 500 ms < 2 s).
      SHUTDOWN_DRAIN_DELAY_MS: '2000',
    };

    const specs = new Map<string, { role: Role; port: number }>();
    (['engine', 'api', 'realtime'] as Role[]).forEach((role) =>
      ports[role].forEach((port, i) => specs.set(`${role}${i + 1}`, { role, port })),
    );

    const envFor = (name: string, role: Role, port: number): Record<string, string> => {
      const dataDir = path.join(opts.workDir, name);
      const own: Record<string, string> = {
        api: { HOST: '127.0.0.1', PORT: String(port) },
        realtime: { REALTIME_HOST: '127.0.0.1', REALTIME_PORT: String(port) },
        engine: { ENGINE_HOST: '127.0.0.1', ENGINE_PORT: String(port), STT_THREADS: '1' },
      }[role];
      const settings = Object.entries(opts.settings ?? {}).filter(([k]) => !(k in common) && !(k in own));
      return {
        ...common,
        DATA_DIR: dataDir,
        ...ROLE_ENV[role],
        ...Object.fromEntries(settings),
        ...opts.env,
        ...own,
      };
    };

    const start = async (name: string): Promise<ClusterProcess> => {
      const spec = specs.get(name);
      if (!spec) throw new Error(`no process named ${name}`);
      const env = envFor(name, spec.role, spec.port);
      const proc = spawnProcess(
        name,
        spec.role,
        process.execPath,
        [...NODE_FLAGS[spec.role], path.join(dist, ENTRY[spec.role])],
        env,
        opts,
      );
      proc.port = spec.port;
      proc.url = `http://127.0.0.1:${spec.port}`;
      processes.set(name, proc);
      await waitHttpOk(proc.url + READY_PATH[spec.role], 120_000, proc.exited).catch((err: Error) => {
        throw new Error(`${name}: ${err.message}\n${proc.lines.slice(-3).join('\n')}`);
      });
      if (haproxyLines) await backInRotation(name, haproxyLines);
      return proc;
    };

    // One-shot migration (compose: the `migrate` service), before any instance starts.
    const migrate = spawnProcess(
      'migrate',
      'api',
      process.execPath,
      [path.join(dist, 'scripts/migrate.js')],
      { ...common, ...opts.env, DATA_DIR: path.join(opts.workDir, 'migrate') },
      opts,
    );
    const migrated = await migrate.exited;
    if (migrated !== 0)
      throw new Error(`migration failed (exit ${migrated}): ${migrate.lines.slice(-5).join('\n')}`);

    const names = (role: Role) => [...specs].filter(([, s]) => s.role === role).map(([n]) => n);
    await Promise.all(names('engine').map(start));
    await Promise.all([...names('api'), ...names('realtime')].map(start));

    // HAProxy with the images' config, rendered for these ports.
    const port = opts.port || (await freePort());
    const cfgPath = path.join(opts.workDir, 'haproxy.cfg');
    const rendered = renderHaproxyConfig(fs.readFileSync(haproxyConfigPath(), 'utf8'), {
      bind: loopback(port),
      servers: { api: ports.api.map(loopback), realtime: ports.realtime.map(loopback) },
    });
    fs.writeFileSync(cfgPath, rendered);
    // docker/haproxy.cfg terminates TLS when TLS_CERT_FILE is in its environment (and only then).
    const tls = opts.tlsCertFile ? path.resolve(opts.tlsCertFile) : undefined;
    if (tls && !fs.existsSync(tls)) throw new Error(`TLS_CERT_FILE ${tls} does not exist`);
    const haproxyEnv = tls ? { ...common, TLS_CERT_FILE: tls } : common;
    const haproxy = spawnProcess('haproxy', 'api', haproxyBinary(), ['-db', '-f', cfgPath], haproxyEnv, opts);
    haproxyChild = haproxy.child;
    haproxyLines = haproxy.lines;
    const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
    await waitHttpOk(`${url}/readyz`, 30_000, haproxy.exited, { insecure: !!tls }).catch((err: Error) => {
      // A taken PORT, for example: HAProxy says why in its last lines.
      throw new Error(`${err.message}\n${haproxy.lines.slice(-3).join('\n')}`);
    });

    return {
      url,
      wsUrl: `${tls ? 'wss' : 'ws'}://127.0.0.1:${port}/v1/audio/transcriptions/stream`,
      port,
      processes,
      haproxy: haproxy.child,
      haproxyConfig: cfgPath,
      s3Endpoint,
      start,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/**
 * A restarted instance is back when HAProxy's checks have brought it UP again
 * (`rise`); HAProxy prints each server's state changes
 * (`Server api/api1 is DOWN`, `... is UP`).
 */
async function backInRotation(name: string, haproxyLines: string[], timeoutMs = 30_000): Promise<void> {
  const state = new RegExp(`Server \\S+/${name} is (UP|DOWN)`);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const last = [...haproxyLines].reverse().find((l) => state.test(l));
    if (!last || state.exec(last)![1] === 'UP') return;
    if (Date.now() > deadline) throw new Error(`${name} is ready but HAProxy still has it DOWN`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function spawnProcess(
  name: string,
  role: Role,
  command: string,
  args: string[],
  env: Record<string, string>,
  opts: ClusterOptions,
): ClusterProcess {
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const log = fs.createWriteStream(path.join(opts.workDir, `${name}.log`), { flags: 'a' });
  for (const stream of [child.stdout, child.stderr]) {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const parts = (rest + chunk).split('\n');
      rest = parts.pop() ?? '';
      for (const line of parts) {
        lines.push(line);
        log.write(line + '\n');
        opts.onLine?.(name, line);
      }
    });
  }
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      log.end();
      resolve(code ?? (signal ? -1 : null));
    }),
  );
  return { name, role, port: 0, url: '', child, lines, exited, env };
}

/** SIGTERM, then SIGKILL when it has not exited within `graceMs`. */
export function operatorSettings(env: NodeJS.ProcessEnv): Record<string, string> {
  const own = new Set(['DATA_DIR', 'PORT', 'HOST']);
  const out: Record<string, string> = {};
  for (const name of settingNames()) {
    const v = env[name];
    if (v !== undefined && !own.has(name)) out[name] = v;
  }
  return out;
}

/** Settings of `npm run cluster` from the environment (as compose: secrets are required). */
export function clusterOptionsFromEnv(env: NodeJS.ProcessEnv): ClusterOptions {
  const need = (name: string) => {
    const v = env[name];
    if (!v) throw new Error(`set ${name} (as for docker compose)`);
    return v;
  };
  const count = (name: string, fallback: number) => {
    const n = Number(env[name] ?? fallback);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a whole number >= 1`);
    return n;
  };
  const s3Endpoint = env.S3_ENDPOINT || undefined;
  return {
    tlsCertFile: env.TLS_CERT_FILE || undefined,
    port: Number(env.PORT ?? 8080),
    apis: count('CLUSTER_APIS', 2),
    realtimes: count('CLUSTER_REALTIMES', 2),
    engines: count('CLUSTER_ENGINES', 2),
    databaseUrl: env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/stt_cluster',
    redisUrl: env.REDIS_URL || 'redis://127.0.0.1:6379',
    adminToken: need('GATEWAY_ADMIN_TOKEN'),
    sessionSecret: need('GATEWAY_SESSION_TOKEN_SECRET'),
    webhookSecret: need('WEBHOOK_SECRET'),
    s3Endpoint,
    workDir: path.resolve(
      env.CLUSTER_DIR || path.join(os.tmpdir(), `stt-cluster-${randomBytes(3).toString('hex')}`),
    ),
    settings: operatorSettings(env),
    env: s3Endpoint
      ? {
          S3_ACCESS_KEY_ID: need('S3_ACCESS_KEY_ID'),
          S3_SECRET_ACCESS_KEY: need('S3_SECRET_ACCESS_KEY'),
          ...(env.S3_BUCKET ? { S3_BUCKET: env.S3_BUCKET } : {}),
        }
      : {},
  };
}
