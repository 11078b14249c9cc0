/** Helpers of the cluster script: free ports, the database, waiting for a process, stopping one. */
import type { ChildProcess } from 'node:child_process';
import net from 'node:net';
import pg from 'pg';
import { Agent } from 'undici';

/**
 * Ports for processes that bind later (once they have loaded, seconds on): from below the kernel's
 * ephemeral range (32768 and up), where `listen(0)` never hands one out, starting at an offset of
 * this process's own and never the same one twice in a process. A port `listen(0)` gave was free only
 * at that moment: a test running beside was given the same one and bound it first, and a realtime
 * instance answered on an API's port behind the load balancer.
 */
const PORT_BASE = 20_000;
const PORT_SPAN = 12_000;
let nextPort = PORT_BASE + ((process.pid * 397) % PORT_SPAN);

export async function freePort(): Promise<number> {
  for (let tries = 0; tries < 500; tries++) {
    const port = nextPort;
    nextPort = PORT_BASE + ((nextPort - PORT_BASE + 1) % PORT_SPAN);
    if (await canBind(port)) return port;
  }
  throw new Error(`no free port in ${PORT_BASE}-${PORT_BASE + PORT_SPAN - 1}`);
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** Creates the database of `url` on its server when it does not exist yet. */
export async function ensureDatabase(url: string): Promise<void> {
  const name = decodeURIComponent(new URL(url).pathname.slice(1));
  if (!name) return;
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const c = new pg.Client({ connectionString: admin.toString() });
  await c.connect();
  try {
    const { rowCount } = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (!rowCount) await c.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
  } finally {
    await c.end();
  }
}

/**
 * Waits until `url` answers 200 (or the process exits, or the time is up).
 * `insecure`: an https URL whose certificate is not checked (the cluster's own
 * load balancer on loopback, whatever certificate it was given).
 */
export async function waitHttpOk(
  url: string,
  timeoutMs: number,
  exited?: Promise<unknown>,
  opts: { insecure?: boolean } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  void exited?.then(() => (gone = true));
  let last = '';
  const dispatcher = opts.insecure ? new Agent({ connect: { rejectUnauthorized: false } }) : undefined;
  try {
    while (Date.now() < deadline && !gone) {
      try {
        const res = await fetch(url, {
          signal: AbortSignal.timeout(2000),
          ...(dispatcher ? { dispatcher } : {}),
        });
        await res.body?.cancel();
        if (res.ok) return;
        last = `status ${res.status}`;
      } catch (err) {
        last = (err as Error).message;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await dispatcher?.close();
  }
  throw new Error(`${url} not ready${gone ? ' (process exited)' : ''}: ${last}`);
}

export async function stopProcess(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * The service settings (README, "Configuration") set in `env`, as a compose
 * file's environment would pass them, except DATA_DIR, PORT and HOST, which
 * each instance gets its own of.
 */
