/**
 * Embedded mode heals: `npm start`'s process (scripts/start.ts) supervises
 * the realtime process and the embedded Postgres. Each is killed (SIGKILL)
 * here; while it is down an upgrade gets 503 upstream_unavailable with
 * Retry-After and /readyz says which part is missing; after the restart
 * (backoff from EMBEDDED_RESTART_BASE_MS) everything answers again and the
 * service process itself never went down.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import WebSocket from 'ws';
import { freePort, leaks, ServiceProcess, sleep, tmpDir, waitFor } from './cluster.js';
import { REALTIME_RETRY_AFTER_SECONDS } from '../../shared/config/platform.js';
import { REALTIME_NODE_FLAGS } from '../../shared/config/realtime.js';

type Upgrade = { status: number; retryAfter?: string; body?: string };

function upgrade(baseUrl: string, key: string): Promise<Upgrade> {
  return new Promise((resolve) => {
    const ws = new WebSocket(`${baseUrl.replace('http', 'ws')}/v1/audio/transcriptions/stream`, {
      headers: { authorization: `Bearer ${key}` },
    });
    ws.once('open', () => {
      ws.close();
      resolve({ status: 101 });
    });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], body }),
      );
    });
    ws.once('error', () => resolve({ status: 0 }));
  });
}

describe('faults: embedded start supervises its children', function () {
  this.timeout(300_000);
  const dataDir = tmpDir('stt-faults-embedded-');
  let svc: ServiceProcess;
  let baseUrl: string;
  let key: string;

  before(async () => {
    svc = ServiceProcess.spawn('scripts/start.ts', {
      DATA_DIR: dataDir,
      PORT: '0',
      HOST: '127.0.0.1',
      EMBEDDED_PG_PORT: String(await freePort()),
      HTTPS_PORT: '0',
      LOG_LEVEL: 'info',
      STT_THREADS: '1',
    });
    baseUrl = (await svc.waitForOutput(/service is up on (http:\/\/localhost:\d+)/, 180_000))[1];
    const token = (await svc.waitForOutput(/Admin token.*\n\s+(adm_\S+)/))[1];
    const res = await fetch(`${baseUrl}/v1/external-transcription/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ owner_id: 'faults', plan: 'pro' }),
    });
    expect(res.status).to.equal(201);
    key = ((await res.json()) as { data: { key: string } }).data.key;
    await waitFor('the stream', async () => (await upgrade(baseUrl, key)).status === 101, 60_000);
  });

  after(async () => {
    await svc?.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const readyz = async () => {
    const res = await fetch(`${baseUrl}/readyz`);
    return { status: res.status, body: (await res.json()) as { checks: Record<string, boolean> } };
  };

  it('a killed realtime process: 503 upstream_unavailable with Retry-After meanwhile, then restarted', async () => {
    const pids = new Set(
      svc
        .logLines()
        .filter((l) => l.name === 'realtime')
        .map((l) => l.pid as number),
    );
    expect(pids.size, 'the realtime process logged').to.be.greaterThan(0);
    const pid = [...pids].at(-1)!;
    // Started with the realtime process's Node flags, as every deployment starts it.
    const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    for (const flag of REALTIME_NODE_FLAGS) expect(argv, 'the realtime command line').to.include(flag);
    // A client streaming at the time of the crash: its connection is what the old listener leaves behind.
    const open = new WebSocket(`${baseUrl.replace('http', 'ws')}/v1/audio/transcriptions/stream`, {
      headers: { authorization: `Bearer ${key}` },
    });
    await new Promise((resolve, reject) => open.once('open', resolve).once('error', reject));
    const closed = new Promise((resolve) => open.once('close', resolve));
    process.kill(pid, 'SIGKILL');
    await closed;
    const refused = await waitFor(
      'a refused upgrade',
      async () => {
        const u = await upgrade(baseUrl, key);
        return u.status === 503 ? u : undefined;
      },
      10_000,
      20,
    );
    expect(refused.retryAfter).to.equal(String(REALTIME_RETRY_AFTER_SECONDS));
    expect(JSON.parse(refused.body!).error.code).to.equal('upstream_unavailable');
    // Restarted on its port: the stream and /readyz answer again. When the port came from a
    // listen on port 0, the killed listener's TIME_WAIT connections kept it bound for 60 s.
    await waitFor(
      'the stream back',
      async () => (await upgrade(baseUrl, key)).status === 101,
      30_000,
      300,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${svc.output.slice(-4000)}`);
    });
    await waitFor('ready again', async () => (await readyz()).status === 200, 30_000, 300);
    expect(svc.alive, 'the service process is up').to.equal(true);
    // The supervisor logs the restart once the child says it listens; the stream may answer first.
    await waitFor(
      'the restart logged',
      async () => svc.output.includes('realtime process restarted'),
      10_000,
      100,
    );
  });

  it('a killed Postgres server: /readyz says so, then it is restarted and requests succeed again', async () => {
    const pid = Number(fs.readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    process.kill(pid, 'SIGKILL');
    const down = await waitFor(
      'readyz to notice',
      async () => {
        const r = await readyz();
        return r.status === 503 ? r : undefined;
      },
      20_000,
      100,
    );
    expect(down.body.checks).to.include({ database: false });
    // Requests meanwhile: answered, never a crash.
    const during = await fetch(`${baseUrl}/v1/audio/transcriptions/jobs/cf_${'0'.repeat(64)}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect([200, 404, 503]).to.include(during.status);
    await waitFor('ready again', async () => (await readyz()).status === 200, 90_000, 500);
    const after = await fetch(`${baseUrl}/v1/audio/transcriptions/jobs/cf_${'0'.repeat(64)}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(after.status).to.equal(404);
    await waitFor('the stream', async () => (await upgrade(baseUrl, key)).status === 101, 30_000, 300);
    expect(svc.alive, 'the service process is up').to.equal(true);
    await sleep(100);
    expect(
      leaks(
        svc.output
          .split('\n')
          .filter((l) => l.includes('"request refused"'))
          .join('\n'),
      ),
    ).to.deep.equal([]);
  });
});
