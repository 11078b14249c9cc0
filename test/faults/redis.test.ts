/**
 * Faults: the suite's own redis-server is killed and started again while
 * the API (a real api/main.ts process, plan limits in that Redis) takes
 * REST load. Invariants: the process stays up, every answer meanwhile is a
 * success or a documented 503 with Retry-After in the plane's shape,
 * /readyz reports Redis, and everything succeeds again once Redis is back.
 */
import fs from 'node:fs';
import { expect } from 'chai';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import {
  issueKey,
  leaks,
  OwnRedis,
  ServiceProcess,
  sleep,
  startApiProcess,
  tmpDir,
  UNLIMITED_PLANS,
  waitFor,
} from './cluster.js';

describe('faults: Redis stopped and restarted under REST load', function () {
  this.timeout(180_000);
  let redis: OwnRedis;
  let db: TestDatabase;
  let api: { proc: ServiceProcess; url: string };
  let key: string;
  const dataDir = tmpDir('stt-faults-redis-');

  before(async () => {
    redis = await OwnRedis.start();
    db = await createTestDatabase('stt_faults');
    api = await startApiProcess({
      DATABASE_URL: db.url,
      REDIS_URL: redis.url,
      DATA_DIR: dataDir,
      BATCH_WORKERS: 'false',
      PLANS_JSON: UNLIMITED_PLANS,
    });
    key = await issueKey(api.url);
  });

  after(async () => {
    await api?.proc.stop();
    await redis?.stop();
    await db?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const submit = async () => {
    const res = await fetch(`${api.url}/v1/audio/transcriptions/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ audio_url: 'https://example.com/a.wav' }),
    });
    return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.text() };
  };

  it('answers 202 or a documented 503 with Retry-After throughout, reports Redis in /readyz, recovers', async () => {
    const answers: Awaited<ReturnType<typeof submit>>[] = [];
    let running = true;
    const load = (async () => {
      while (running) {
        answers.push(...(await Promise.all([submit(), submit(), submit()])));
        await sleep(20);
      }
    })();
    await sleep(1500);
    await redis.stop();
    const down = await waitFor(
      'readyz to report Redis',
      async () => {
        const r = await fetch(`${api.url}/readyz`);
        const body = (await r.json()) as { checks: Record<string, boolean> };
        return r.status === 503 ? body : undefined;
      },
      20_000,
      200,
    );
    expect(down.checks).to.include({ redis: false });
    await sleep(3000);
    await redis.start();
    await waitFor('ready again', async () => (await fetch(`${api.url}/readyz`)).status === 200, 30_000, 200);
    await waitFor('a 202 after the outage', async () => (await submit()).status === 202, 30_000, 200);
    await sleep(1000);
    running = false;
    await load;

    expect(answers.filter((a) => a.status === 202).length).to.be.greaterThan(3);
    for (const a of answers) {
      if (a.status === 202) continue;
      expect(a.status, a.body).to.equal(503);
      expect(a.retryAfter, `Retry-After on ${a.body}`).to.match(/^\d+$/);
      expect(JSON.parse(a.body).error, a.body).to.be.a('string');
      expect(leaks(a.body)).to.deep.equal([]);
    }
    const after = await Promise.all([submit(), submit(), submit()]);
    expect(after.map((a) => a.status)).to.deep.equal([202, 202, 202]);
    expect(api.proc.alive, 'the API process is up').to.equal(true);
  });
});
