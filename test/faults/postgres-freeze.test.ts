/**
 * Faults: the suite's own Postgres frozen (every process SIGSTOPped, its
 * sockets open: what a hung host or a stalled network looks like), then
 * killed. Calls to it fail fast (issue 22): a request that needs the
 * database is answered 503 with Retry-After within the query timeout
 * (DB_QUERY_TIMEOUT_MS, 10 s) plus a margin, never held for the whole outage;
 * the realtime tier refuses a new session 503 `auth_unavailable` with
 * Retry-After, frozen or stopped; everything answers again once it is back.
 */
import { expect } from 'chai';
import WebSocket from 'ws';
import { DB_QUERY_TIMEOUT_MS } from '../../shared/db/index.js';
import {
  issueKey,
  OwnPostgres,
  ServiceProcess,
  startApiProcess,
  startRealtimeProcess,
  tmpDir,
  UNLIMITED_PLANS,
  waitFor,
} from './cluster.js';

type Answer = { status: number; retryAfter?: string | null; code?: string; ms: number };

async function poll(url: string, key: string): Promise<Answer> {
  const started = Date.now();
  const res = await fetch(`${url}/v1/audio/transcriptions/jobs/cf_${'0'.repeat(64)}`, {
    headers: { authorization: `Bearer ${key}` },
    signal: AbortSignal.timeout(60_000),
  });
  const body = (await res.json().catch(() => ({}))) as { error?: { code?: string } | string };
  const code = typeof body.error === 'object' ? body.error.code : body.error;
  return { status: res.status, retryAfter: res.headers.get('retry-after'), code, ms: Date.now() - started };
}

function upgrade(wsUrl: string, key: string): Promise<Answer> {
  const started = Date.now();
  return new Promise((resolve) => {
    const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${key}` } });
    ws.once('open', () => {
      ws.close();
      resolve({ status: 101, ms: Date.now() - started });
    });
    ws.once('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => {
        const code = (JSON.parse(text || '{}') as { error?: { code?: string } }).error?.code;
        resolve({
          status: res.statusCode ?? 0,
          retryAfter: res.headers['retry-after'],
          code,
          ms: Date.now() - started,
        });
      });
    });
    ws.once('error', () => resolve({ status: 0, ms: Date.now() - started }));
  });
}

describe('faults: Postgres frozen, then killed: calls fail fast', function () {
  this.timeout(240_000);
  const bound = DB_QUERY_TIMEOUT_MS + 5000;
  let pg: OwnPostgres;
  let api: { proc: ServiceProcess; url: string };
  let rt: { proc: ServiceProcess; wsUrl: string };
  let known: string;
  const unknown: string[] = [];

  before(async () => {
    pg = await OwnPostgres.start();
    const env = { DATABASE_URL: pg.url, DATA_DIR: tmpDir('stt-faults-freeze-'), PLANS_JSON: UNLIMITED_PLANS };
    api = await startApiProcess({ ...env, BATCH_WORKERS: 'false', POLL_REQUESTS_PER_MINUTE: '0' });
    rt = await startRealtimeProcess(env);
    known = await issueKey(api.url);
    // Keys each plane has never seen: their lookup needs the database.
    for (let i = 0; i < 3; i++) unknown.push(await issueKey(api.url));
    // Warm pools: the API's and the realtime tier's connections are open when the server freezes.
    expect((await poll(api.url, known)).status).to.equal(404);
    expect((await upgrade(rt.wsUrl, known)).status).to.equal(101);
  });

  after(async () => {
    try {
      pg?.thaw();
    } catch {
      /* not running */
    }
    await api?.proc.stop();
    await rt?.proc.stop();
    await pg?.destroy();
  });

  it('frozen: a request that needs the database gets 503 with Retry-After within the query timeout', async () => {
    pg.freeze();
    try {
      const answers = await Promise.all([
        poll(api.url, known),
        poll(api.url, unknown[0]),
        upgrade(rt.wsUrl, unknown[1]),
      ]);
      for (const a of answers) {
        expect(a.status, JSON.stringify(a)).to.equal(503);
        expect(a.retryAfter, JSON.stringify(a)).to.match(/^\d+$/);
        expect(a.ms, JSON.stringify(a)).to.be.below(bound);
      }
      expect(answers[2].code).to.equal('auth_unavailable');
      expect(api.proc.alive && rt.proc.alive, 'both processes up').to.equal(true);
    } finally {
      pg.thaw();
    }
    // Back: the pools' connections answer again.
    await waitFor(
      'the API answers again',
      async () => (await poll(api.url, known)).status === 404,
      20_000,
      300,
    );
    await waitFor(
      'the stream admits again',
      async () => (await upgrade(rt.wsUrl, unknown[1])).status === 101,
      20_000,
      300,
    );
  });

  it('killed: the realtime tier refuses a new session 503 auth_unavailable with Retry-After, then admits it', async () => {
    await pg.stop();
    const a = await upgrade(rt.wsUrl, unknown[2]);
    expect(a.status, JSON.stringify(a)).to.equal(503);
    expect(a.code).to.equal('auth_unavailable');
    expect(a.retryAfter).to.match(/^\d+$/);
    expect(a.ms).to.be.below(bound);
    await pg.start();
    await waitFor(
      'the stream admits again',
      async () => (await upgrade(rt.wsUrl, unknown[2])).status === 101,
      30_000,
      300,
    );
    expect(rt.proc.alive).to.equal(true);
  });
});
