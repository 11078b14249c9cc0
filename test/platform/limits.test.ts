import { expect } from 'chai';
import { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { MemoryLimits, RedisLimits, type LimitsDriver } from '../../shared/limits/index.js';
import { createTestApp, issueKey, type TestApp } from '../helpers/app.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/db.js';

const drivers: [string, () => LimitsDriver][] = [
  ['memory', () => new MemoryLimits()],
  ['redis', () => RedisLimits.connect(TEST_REDIS_URL, `stt-test-${randomUUID()}:`)],
];

for (const [name, make] of drivers) {
  describe(`limits driver: ${name}`, () => {
    let l: LimitsDriver;
    before(async () => {
      l = make();
      // Until Redis answers, each instance limits on its own (the insurance limiter): count in Redis from the start.
      expect(await l.ping()).to.equal(true);
    });
    after(() => l.close());

    it('allows perMinute requests then refuses with a retry delay', async () => {
      const owner = randomUUID();
      for (let i = 0; i < 3; i++) expect((await l.consume('requests', owner, 3)).allowed).to.equal(true);
      const d = await l.consume('requests', owner, 3);
      expect(d.allowed).to.equal(false);
      expect(d.retryAfterMs).to.be.within(1, 60_000);
      // Buckets are per owner and per kind.
      expect((await l.consume('requests', randomUUID(), 3)).allowed).to.equal(true);
      expect((await l.consume('connections', owner, 3)).allowed).to.equal(true);
    });

    it('counts calls made in one turn together and answers each as if made one by one', async () => {
      const owner = randomUUID();
      // Seven calls in one turn against a limit of 5: the first five allowed, in order, with falling remainders.
      const first = await Promise.all(Array.from({ length: 7 }, () => l.consume('polls', owner, 5)));
      expect(first.map((d) => d.allowed)).to.deep.equal([true, true, true, true, true, false, false]);
      expect(first.slice(0, 5).map((d) => d.remaining)).to.deep.equal([4, 3, 2, 1, 0]);
      for (const d of first.slice(5)) expect(d.retryAfterMs).to.be.within(1, 60_000);
      // The key has used its minute: a later turn is refused whole; other keys and sizes are counted apart.
      const later = await Promise.all([l.consume('polls', owner, 5), l.consume('polls', owner, 5)]);
      expect(later.map((d) => d.allowed)).to.deep.equal([false, false]);
      const other = await Promise.all([l.consume('polls', randomUUID(), 2), l.consume('polls', owner, 9)]);
      expect(other.map((d) => d.allowed)).to.deep.equal([true, true]);
    });

    it('grants at most max leases, re-grants to a holder, and frees on release', async () => {
      const owner = randomUUID();
      expect(
        await l.acquireLease({ scope: 'connections', owner, leaseId: 's1', max: 2, ttlMs: 5000 }),
      ).to.equal(true);
      expect(
        await l.acquireLease({ scope: 'connections', owner, leaseId: 's2', max: 2, ttlMs: 5000 }),
      ).to.equal(true);
      expect(
        await l.acquireLease({ scope: 'connections', owner, leaseId: 's3', max: 2, ttlMs: 5000 }),
      ).to.equal(false);
      expect(
        await l.acquireLease({ scope: 'connections', owner, leaseId: 's1', max: 2, ttlMs: 5000 }),
      ).to.equal(true);
      expect(await l.countLeases('connections', owner)).to.equal(2);
      await l.releaseLease('connections', owner, 's1');
      expect(
        await l.acquireLease({ scope: 'connections', owner, leaseId: 's3', max: 2, ttlMs: 5000 }),
      ).to.equal(true);
    });

    it('expires leases that are not renewed (a dead holder frees its slot) and keeps renewed ones', async () => {
      const owner = randomUUID();
      expect(await l.acquireLease({ scope: 'c', owner, leaseId: 'dead', max: 1, ttlMs: 150 })).to.equal(true);
      expect(await l.acquireLease({ scope: 'c', owner, leaseId: 'new', max: 1, ttlMs: 150 })).to.equal(false);
      // Wait for the expiry itself (bounded), not for a fixed sleep a loaded machine may stretch.
      const deadline = Date.now() + 10_000;
      while ((await l.countLeases('c', owner)) > 0) {
        expect(Date.now(), 'the unrenewed lease expires').to.be.below(deadline);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(await l.renewLease('c', owner, 'dead', 150)).to.equal(false);
      // Renewed well inside its life (every 200 ms for a 5 s lease): a stalled tick cannot expire it.
      expect(await l.acquireLease({ scope: 'c', owner, leaseId: 'live', max: 1, ttlMs: 5000 })).to.equal(
        true,
      );
      for (let i = 0; i < 4; i++) {
        await new Promise((r) => setTimeout(r, 200));
        expect(await l.renewLease('c', owner, 'live', 5000)).to.equal(true);
      }
      expect(await l.countLeases('c', owner)).to.equal(1);
    });

    it('refuses to renew a lease that expired before anything swept it, and does not revive it', async () => {
      const owner = randomUUID();
      expect(await l.acquireLease({ scope: 'c', owner, leaseId: 'stale', max: 1, ttlMs: 100 })).to.equal(
        true,
      );
      // Nothing counts or acquires in between: the renewal itself must see the expiry.
      await new Promise((r) => setTimeout(r, 300));
      expect(await l.renewLease('c', owner, 'stale', 5000)).to.equal(false);
      expect(await l.countLeases('c', owner)).to.equal(0);
      expect(await l.acquireLease({ scope: 'c', owner, leaseId: 'next', max: 1, ttlMs: 5000 })).to.equal(
        true,
      );
    });
  });
}

describe('Redis rate limits shared by instances', () => {
  const prefix = `stt-test-${randomUUID()}:`;
  const a = RedisLimits.connect(TEST_REDIS_URL, prefix);
  const b = RedisLimits.connect(TEST_REDIS_URL, prefix);
  before(async () => {
    expect(await a.ping()).to.equal(true);
    expect(await b.ping()).to.equal(true);
  });
  after(async () => {
    await a.close();
    await b.close();
  });

  it('admits exactly the limit across instances under concurrent load', async () => {
    const owner = randomUUID();
    const limit = 1000;
    const decisions = await Promise.all(
      Array.from({ length: 1300 }, (_, i) => (i % 2 ? a : b).consume('requests', owner, limit)),
    );
    expect(decisions.filter((d) => d.allowed)).to.have.length(limit);
    const refused = decisions.find((d) => !d.allowed)!;
    expect(refused.retryAfterMs).to.be.within(1, 60_000);
  });

  it('counts the calls of one key made in one turn with one Redis call', async () => {
    const owner = randomUUID();
    // Every command Redis runs, as MONITOR reports it (ioredis's public monitor mode), kept when it names this key.
    const monitor = await new Redis(TEST_REDIS_URL).monitor();
    const commands: string[][] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      // Script calls only: MONITOR also lists the commands a script runs.
      if (/^eval/i.test(args[0]) && args.some((a) => a.includes(owner))) commands.push(args);
    });
    try {
      await new Promise((r) => setTimeout(r, 100));
      const decisions = await Promise.all(Array.from({ length: 40 }, () => a.consume('polls', owner, 30)));
      expect(decisions.filter((d) => d.allowed)).to.have.length(30);
      await new Promise((r) => setTimeout(r, 200));
      // One script call (two when Redis first answers NOSCRIPT and ioredis sends the script itself), not forty.
      expect(commands.length, JSON.stringify(commands)).to.be.within(1, 2);
      expect(commands.at(-1)).to.include('40');
    } finally {
      monitor.disconnect();
    }
  });

  it('a limit first used while other commands are in flight is counted, not a crash (auto-pipelining)', async () => {
    // ioredis's auto-pipeline copies the client's scripts when it is created; a limiter defined later
    // (each new plan size makes one) was missing from the open pipeline: an uncaught TypeError in ioredis
    // stopped the process (seen in a realtime instance of the cluster test).
    const fresh = RedisLimits.connect(TEST_REDIS_URL, `stt-test-${randomUUID()}:`);
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    const mochaHandlers = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    process.on('uncaughtException', onUncaught);
    try {
      expect(await fresh.ping()).to.equal(true);
      // In one pass of the event loop's check phase: a callback issues a command (it opens an
      // auto-pipeline, sent on the next pass), then the batched consume creates the first limiter.
      const other = new Promise((resolve, reject) =>
        setImmediate(() => fresh.redis.get('x').then(resolve, reject)),
      );
      const decision = fresh.consume('requests', randomUUID(), 7);
      await other;
      expect((await decision).allowed).to.equal(true);
      await new Promise((r) => setTimeout(r, 100));
    } finally {
      process.removeListener('uncaughtException', onUncaught);
      for (const h of mochaHandlers) process.on('uncaughtException', h);
      await fresh.close();
    }
    expect(uncaught.map(String)).to.deep.equal([]);
  });

  it('keeps small limits exact', async () => {
    const owner = randomUUID();
    const results = [];
    for (let i = 0; i < 14; i++) results.push((await (i % 2 ? a : b).consume('requests', owner, 12)).allowed);
    expect(results.filter(Boolean)).to.have.length(12);
    expect(results.slice(12)).to.deep.equal([false, false]);
  });
});

describe('maxRequestsPerMinute on HTTP transcription routes', () => {
  let db: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  before(async () => {
    db = await createTestDatabase();
    const env = { REDIS_URL: TEST_REDIS_URL };
    a = await createTestApp(env, { db });
    b = await createTestApp(env, { db });
  });
  after(async () => {
    await a.close();
    await b.close();
    await db.drop();
  });

  it('is shared by two API instances on one Redis and refused with 429 + Retry-After in the plane shape', async () => {
    expect(a.deps.limits.kind).to.equal('redis');
    const { key } = await issueKey(a, { plan: 'free' }); // 12 per minute
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const app = i % 2 ? a : b;
      statuses.push(
        (
          await request(app.server)
            .post('/v1/audio/transcriptions/session-token')
            .set('Authorization', `Bearer ${key}`)
        ).status,
      );
    }
    expect(statuses.every((s) => s === 200)).to.equal(true);
    for (const app of [a, b]) {
      const res = await request(app.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('Authorization', `Bearer ${key}`)
        .expect(429);
      expect(Number(res.headers['retry-after'])).to.be.within(1, 60);
      expect(res.body.error).to.include({ code: 'rate_limit_exceeded', type: 'rate_limit_error' });
      expect(res.body.error.message).to.be.a('string');
    }
    // Another key of the same owner has its own bucket.
    const other = await issueKey(a, { plan: 'free' });
    await request(a.server)
      .post('/v1/audio/transcriptions/session-token')
      .set('Authorization', `Bearer ${other.key}`)
      .expect(200);
  });

  it('limits job polls in a bucket of their own (POLL_REQUESTS_PER_MINUTE), across instances, in the batch shape', async () => {
    const env = { REDIS_URL: TEST_REDIS_URL, POLL_REQUESTS_PER_MINUTE: '4' };
    const [p, q] = [await createTestApp(env, { db }), await createTestApp(env, { db })];
    try {
      const { key } = await issueKey(p, { plan: 'free' });
      const path = `/v1/audio/transcriptions/jobs/cf_${'0'.repeat(64)}`;
      for (let i = 0; i < 4; i++) {
        await request((i % 2 ? p : q).server)
          .get(path)
          .set('Authorization', `Bearer ${key}`)
          .expect(404);
      }
      for (const app of [p, q]) {
        const res = await request(app.server).get(path).set('Authorization', `Bearer ${key}`).expect(429);
        expect(Number(res.headers['retry-after'])).to.be.within(1, 60);
        expect(res.body.error).to.be.a('string').and.include('job polls');
      }
      // The poll aliases share the bucket, and so do artifact reads (a read loop slowed everyone before
      // they did); the plan's request bucket is untouched.
      await request(p.server)
        .get(`/cf_${'0'.repeat(64)}`)
        .set('Authorization', `Bearer ${key}`)
        .expect(429);
      await request(p.server)
        .get('/r2/transcription/x/result.json')
        .set('Authorization', `Bearer ${key}`)
        .expect(429);
      await request(p.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('Authorization', `Bearer ${key}`)
        .expect(200);
    } finally {
      await p.close();
      await q.close();
    }
  });

  it('POLL_REQUESTS_PER_MINUTE=0 turns the poll limit off', async () => {
    const c = await createTestApp({ POLL_REQUESTS_PER_MINUTE: '0' }, { db });
    try {
      const { key } = await issueKey(c, { plan: 'free' });
      for (let i = 0; i < 30; i++) {
        await request(c.server)
          .get(`/v1/audio/transcriptions/jobs/cf_${'1'.repeat(64)}`)
          .set('Authorization', `Bearer ${key}`)
          .expect(404);
      }
    } finally {
      await c.close();
    }
  });

  it('uses the in-memory driver when REDIS_URL is not set', async () => {
    const c = await createTestApp({}, { db });
    try {
      expect(c.deps.limits.kind).to.equal('memory');
      const { key } = await issueKey(c, { plan: 'free' });
      for (let i = 0; i < 12; i++)
        await request(c.server)
          .post('/v1/audio/transcriptions/session-token')
          .set('Authorization', `Bearer ${key}`)
          .expect(200);
      await request(c.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('Authorization', `Bearer ${key}`)
        .expect(429);
    } finally {
      await c.close();
    }
  });
});
