/**
 * Scale-out: realtime instances on one Redis share the per-key connection
 * quota, and an instance killed with SIGKILL frees its slots within one
 * lease TTL. Every instance runs the built-in speech engine (one decoder
 * thread each), the configuration with no STT_WORKER_URLS.
 */
import { expect } from 'chai';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { CONNECTION_SCOPE } from '../../realtime/quota.js';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { BuiltinEngine } from '../../shared/stt/builtin.js';
import {
  createRealtimeContext,
  connect,
  refused,
  bearer,
  forkRealtime,
  eventually,
  type RealtimeTestContext,
} from './helpers.js';

async function refusedStatus(url: string, key: string): Promise<number | 'accepted'> {
  try {
    const c = await connect(url, bearer(key));
    c.ws.close(1000);
    return 'accepted';
  } catch (err) {
    return (err as { status?: number }).status ?? -1;
  }
}

describe('realtime scale-out on one Redis', function () {
  this.timeout(60_000);
  let db: TestDatabase;
  let a: RealtimeTestContext;
  let b: RealtimeTestContext;
  let engine: BuiltinEngine;
  // The default prefix, as the child process uses it; keys are per (random) key id, so tests never collide.
  const prefix = 'stt:';
  // Renewed every third of the TTL.
  const env = { REALTIME_LEASE_TTL_MS: '2000' };

  before(async () => {
    db = await createTestDatabase('stt_rt_scale');
    engine = new BuiltinEngine(
      loadConfig({ STT_THREADS: '1' }).speech.builtin,
      createLogger({ level: 'warn' }),
    );
    await engine.ready();
    a = await createRealtimeContext({ engine, redis: true, redisPrefix: prefix, testDb: db, env });
    b = await createRealtimeContext({
      engine,
      redis: true,
      redisPrefix: prefix,
      testDb: db,
      env: { ...env, METRICS_TOKEN: 'rt-scrape-token' },
    });
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await engine?.close();
    await db?.drop();
  });

  /** The key's connection slots are all released (a close releases its lease asynchronously). */
  const slotsFreed = async (keyId: string) => {
    const left = await eventually(
      () => a.limits.countLeases(CONNECTION_SCOPE, keyId),
      (n) => n === 0,
      20_000,
    );
    expect(left, 'connection slots released').to.equal(0);
  };

  it('free plan: a second concurrent connection on the other instance is refused, and allowed after the first closes', async () => {
    const { key, id } = await a.issueKey('free');
    const c = await connect(a.url, bearer(key));
    await c.next('session.created');
    expect(await refusedStatus(b.url, key)).to.equal(429);
    c.ws.close(1000);
    await c.closed;
    await slotsFreed(id);
    const c2 = await connect(b.url, bearer(key));
    await c2.next('session.created');
    expect(await refusedStatus(a.url, key)).to.equal(429);
    c2.ws.close(1000);
    await c2.closed;
  });

  it('free plan: handshakes per minute are counted across instances (6 alternating, the 7th refused on either)', async () => {
    const { key, id } = await a.issueKey('free');
    for (let i = 0; i < 6; i++) {
      const c = await connect((i % 2 ? b : a).url, bearer(key));
      await c.next('session.created');
      c.ws.close(1000);
      await c.closed;
      await slotsFreed(id); // the next handshake is not refused for the slot, only (7th) for the rate
    }
    for (const ctx of [a, b]) {
      const r = await refused(ctx.url, { authorization: `Bearer ${key}` });
      expect(r.status).to.equal(429);
      expect(r.body.error.code).to.equal('connection_rate_exceeded');
      expect(Number(r.headers['retry-after'])).to.be.within(1, 60);
    }
  });

  it('an instance with METRICS_TOKEN asks scrapers for it', async () => {
    const none = await fetch(`${b.base}/metrics`);
    expect(none.status).to.equal(401);
    expect(none.headers.get('www-authenticate')).to.equal('Bearer');
    expect(((await none.json()) as { error: { code: string } }).error.code).to.equal('metrics_unauthorized');
    const wrong = await fetch(`${b.base}/metrics`, { headers: { authorization: 'Bearer rt-scrape' } });
    expect(wrong.status).to.equal(401);
    const right = await fetch(`${b.base}/metrics`, { headers: { authorization: 'Bearer rt-scrape-token' } });
    expect(right.status).to.equal(200);
    expect(await right.text()).to.match(/^stt_realtime_sessions_open /m);
    expect((await fetch(`${a.base}/metrics`)).status).to.equal(200);
  });

  it('leases are renewed while a session lives longer than the TTL', async () => {
    const { key } = await a.issueKey('free');
    const c = await connect(a.url, bearer(key));
    await c.next('session.created');
    await new Promise((r) => setTimeout(r, 3000));
    expect(await refusedStatus(b.url, key)).to.equal(429);
    c.ws.close(1000);
    await c.closed;
  });

  it('an instance killed with SIGKILL frees its slots within the lease TTL', async () => {
    const { key, id } = await a.issueKey('free');
    const rc = await forkRealtime(db.url, env);
    const child = rc.child;
    try {
      const c = await connect(rc.url, bearer(key));
      await c.next('session.created');
      child.kill('SIGKILL');
      await c.closed;
      const killedAt = Date.now();
      let freedAfter = -1;
      // Poll the shared lease set (handshakes would spend the key's per-minute points).
      expect(await a.limits.countLeases(CONNECTION_SCOPE, id)).to.equal(1);
      while (Date.now() - killedAt < 20_000) {
        if ((await a.limits.countLeases(CONNECTION_SCOPE, id)) === 0) {
          freedAfter = Date.now() - killedAt;
          break;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(await refusedStatus(a.url, key)).to.equal('accepted');
      expect(freedAfter, 'slot freed').to.be.greaterThan(-1);
      // Freed by the lease's expiry (TTL 2 s; nothing releases it), with room for a loaded machine.
      expect(freedAfter).to.be.lessThan(2000 + 5000);
    } finally {
      await rc.kill();
    }
  });
});
