/**
 * Faults: the suite's own redis-server (connection leases and handshake
 * rates) is killed and started again while realtime sessions (a real
 * realtime/main.ts process) stream real audio. Invariants: the realtime
 * process stays up; new upgrades meanwhile get the documented 503
 * `limits_unavailable` with Retry-After, and succeed again once Redis is
 * back; open sessions either carry on to their end or close with a
 * documented code; every session is billed exactly once (usage_events).
 */
import fs from 'node:fs';
import { expect } from 'chai';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { connect, readPcm, refused, silence, type Client } from '../realtime/helpers.js';
import { leaks, OwnRedis, queryUrl, ServiceProcess, startRealtimeStack, tmpDir, waitFor } from './cluster.js';

/** Close codes of interface 7.3 a session may end with when a dependency fails. */
const DOCUMENTED_CLOSES = [1000, 1001, 1008, 1011, 1013, 4408];
const COMPLETED = 'conversation.item.input_audio_transcription.completed';

describe('faults: Redis stopped and restarted under realtime load', function () {
  this.timeout(180_000);
  let redis: OwnRedis;
  let db: TestDatabase;
  let api: { proc: ServiceProcess; url: string };
  let rt: ServiceProcess;
  let wsUrl: string;
  let key: string;
  const dataDir = tmpDir('stt-faults-redis-rt-');

  before(async () => {
    redis = await OwnRedis.start();
    db = await createTestDatabase('stt_faults');
    let realtime;
    ({
      api,
      rt: realtime,
      key,
    } = await startRealtimeStack({
      DATABASE_URL: db.url,
      REDIS_URL: redis.url,
      DATA_DIR: dataDir,
    }));
    ({ proc: rt, wsUrl } = realtime);
  });

  after(async () => {
    await rt?.stop();
    await api?.proc.stop();
    await redis?.stop();
    await db?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const auth = () => ({ authorization: `Bearer ${key}` });
  const open = async (): Promise<Client> => {
    const c = await connect(wsUrl, { headers: auth() });
    await c.next('session.created');
    return c;
  };

  it('refuses upgrades with 503 + Retry-After while Redis is down, keeps streams, bills each session once', async () => {
    const speech = Buffer.concat([readPcm('jfk.wav'), silence(1000)]);
    const clients = await Promise.all([open(), open(), open()]);
    const ids = clients.map((c) => c.events[0].session_id as string);
    // Real time: the streams run through the whole outage.
    const streams = clients.map((c) => c.stream(speech, { pace: 1 }));
    await redis.stop();

    const refusal = await waitFor(
      'an upgrade refused for want of Redis',
      async () => {
        const r = await refused(wsUrl, auth()).catch(() => undefined);
        return r?.status === 503 ? r : undefined;
      },
      20_000,
      200,
    );
    expect(refusal.body.error.code).to.equal('limits_unavailable');
    expect(refusal.headers['retry-after']).to.match(/^\d+$/);
    expect(leaks(JSON.stringify(refusal.body))).to.deep.equal([]);
    expect(rt.alive, 'the realtime process is up during the outage').to.equal(true);

    await redis.start();
    const late = await waitFor(
      'an upgrade accepted after the outage',
      () => open().catch(() => undefined),
      30_000,
      300,
    );
    ids.push(late.events[0].session_id as string);
    clients.push(late);

    await Promise.all(streams);
    // Sessions that kept streaming through the outage get their words.
    const carriedOn = clients.slice(0, 3).filter((c) => c.ws.readyState === c.ws.OPEN);
    await Promise.all(carriedOn.map((c) => c.next(COMPLETED, 60_000)));
    for (const c of clients) if (c.ws.readyState === c.ws.OPEN) c.ws.close(1000);
    const closes = await Promise.all(clients.map((c) => c.closed));
    for (const { code, reason } of closes) {
      expect(DOCUMENTED_CLOSES, `close ${code} ${reason}`).to.include(code);
    }

    const rows = await waitFor(
      'every session billed',
      async () => {
        const r = await queryUrl<{ ref_id: string; n: string; seconds: string }>(
          db.url,
          "SELECT ref_id, count(*) AS n, sum(audio_seconds) AS seconds FROM usage_events WHERE plane = 'realtime' GROUP BY ref_id",
        );
        return ids.every((id) => r.some((x) => x.ref_id === id)) ? r : undefined;
      },
      60_000,
      500,
    );
    for (const id of ids) expect(rows.find((r) => r.ref_id === id)?.n, id).to.equal('1');
    // A session that streamed through the outage is billed its audio (12 s of it), not a fragment.
    for (const [i, id] of ids.slice(0, 3).entries()) {
      if (closes[i].code !== 1000) continue;
      expect(Number(rows.find((r) => r.ref_id === id)?.seconds), id).to.be.greaterThan(11);
    }
    expect(rt.alive, 'the realtime process is up').to.equal(true);
  });
});
