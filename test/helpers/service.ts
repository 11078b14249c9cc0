/**
 * The whole service as `npm start` runs it (scripts/start.ts: the API with
 * batch workers, the realtime process spliced onto the same base URL), in a
 * child process with its own DATA_DIR and a free port. With DATABASE_URL in
 * `env` it uses that database; without, its own embedded Postgres.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface RunningService {
  /** http://127.0.0.1:PORT */
  baseUrl: string;
  adminToken: string;
  dataDir: string;
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

export async function startService(env: Record<string, string> = {}): Promise<RunningService> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-service-'));
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    cwd: REPO_ROOT,
    env: {
      PATH: process.env.PATH!,
      HOME: process.env.HOME ?? '/root',
      DATA_DIR: dataDir,
      PORT: '0',
      HOST: '127.0.0.1',
      EMBEDDED_PG_PORT: String(50_000 + Math.floor(Math.random() * 5000)),
      // HTTPS beside it on any free port (8443 would collide between tests running at once).
      HTTPS_PORT: '0',
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  // A start that fails here must not leave the service running (mocha's parallel workers exit, their children do not).
  const started = async (): Promise<{ port: string; secrets: { adminToken: string } }> => {
    const port = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start banner:\n${out}`)), 120_000);
      const check = () => {
        const m = /service is up on http:\/\/localhost:(\d+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      };
      child.stdout!.on('data', check);
      child.once('exit', (c) => {
        clearTimeout(timer);
        reject(new Error(`start exited ${c}:\n${out}`));
      });
    });
    child.removeAllListeners('exit');
    return { port, secrets: JSON.parse(fs.readFileSync(path.join(dataDir, 'secrets.json'), 'utf8')) };
  };
  const { port, secrets } = await started().catch((err: unknown) => {
    // As stop() does: SIGINT lets the start stop its own children (realtime, embedded Postgres).
    child.kill('SIGINT');
    throw err;
  });
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    adminToken: env.GATEWAY_ADMIN_TOKEN ?? secrets.adminToken,
    dataDir,
    child,
    output: () => out,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGINT');
        await exited;
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Issues a key through the admin API of a running service. */
export async function issueServiceKey(
  svc: RunningService,
  body: { owner_id?: string; plan?: string; label?: string } = {},
): Promise<{ key: string; id: string }> {
  const res = await fetch(`${svc.baseUrl}/v1/external-transcription/keys`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${svc.adminToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ owner_id: 'surface', plan: 'pro', ...body }),
  });
  if (res.status !== 201) throw new Error(`key issue: ${res.status} ${await res.text()}`);
  const { data } = (await res.json()) as { data: { key: string; id: string } };
  return { key: data.key, id: data.id };
}
