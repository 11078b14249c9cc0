/**
 * A realtime instance (realtime/main.ts, a real child process) SIGKILLed
 * with streaming sessions open: each session is billed from its last
 * checkpoint, counts against the key's window while it runs and after, and
 * is closed (lapsed) by a process still alive within one usage lease TTL,
 * exactly once.
 */
import { expect } from 'chai';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { createDb, type Knex } from '../../shared/db/index.js';
import { PlanCatalog } from '../../shared/plans.js';
import { KeyStore } from '../../shared/auth/index.js';
import { UsageLedger, windowUsage } from '../../shared/usage.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { bearer, connect, eventually, forkRealtime, readPcm, silence } from '../realtime/helpers.js';

describe('usage of a killed realtime instance', function () {
  this.timeout(90_000);
  const LEASE_TTL_MS = 2000;
  const SWEEP_MS = 300;
  // The usage lease is the realtime connection lease; the instance checkpoints every third of it.
  const env = { REALTIME_LEASE_TTL_MS: String(LEASE_TTL_MS), LOG_LEVEL: 'error' };
  let testDb: TestDatabase;
  let db: Knex;
  let survivor: UsageLedger;

  before(async () => {
    testDb = await createTestDatabase('stt_usage_kill');
    db = createDb(testDb.url, { poolMax: 2 });
    // Any process of the service sweeps: here the ledger an API instance runs, on the same database.
    survivor = new UsageLedger(
      db,
      loadConfig(env, { ledger: { sweepMs: SWEEP_MS } }).ledger,
      createLogger({ level: 'silent' }),
    ).start();
  });
  after(async () => {
    await survivor?.close();
    await db?.destroy();
    await testDb?.drop();
  });

  it('bills each open session once, from its last checkpoint, and closes it within one lease TTL', async () => {
    const rec = await new KeyStore(db, new PlanCatalog({})).issue({ ownerId: 'killed', plan: 'pro' });
    const rt = await forkRealtime(testDb.url, env);
    try {
      const speech = readPcm('jfk.wav');
      const quiet = silence(3000);
      const sessions = await Promise.all(
        [speech, quiet].map(async (pcm) => {
          const c = await connect(rt.url, bearer(rec.key!));
          const id = (await c.next('session.created')).session_id as string;
          await c.stream(pcm, { pace: 1 }); // real time: no utterance is dropped for max_concurrent_utterances
          return { c, id, seconds: pcm.length / 32_000 };
        }),
      );
      const rows = () =>
        db('usage_events')
          .where({ plane: 'realtime', key_id: rec.id })
          .orderBy('ref_id')
          .select('ref_id', 'audio_seconds', 'status');
      const expected = sessions
        .map((s) => ({ ref_id: s.id, audio_seconds: s.seconds }))
        .sort((x, y) => x.ref_id.localeCompare(y.ref_id));
      // Checkpointed while it runs: the whole audio is in live rows, and in the key's window.
      const live = await eventually(
        rows,
        (rs) => JSON.stringify(rs) === JSON.stringify(expected.map((e) => ({ ...e, status: 'live' }))),
        15_000,
      );
      expect(live.map((r) => r.status)).to.deep.equal(['live', 'live']);
      const total = speech.length / 32_000 + quiet.length / 32_000;
      expect(await windowUsage(db, rec.id, 3600)).to.be.closeTo(total, 1e-9);

      await rt.kill();
      const killedAt = Date.now();
      await Promise.all(sessions.map((s) => s.c.closed));
      const closed = await eventually(
        rows,
        (rs) => rs.length === 2 && rs.every((r) => r.status === 'lapsed'),
        LEASE_TTL_MS + 10_000,
      );
      const closedAfterMs = Date.now() - killedAt;
      expect(closed).to.deep.equal(expected.map((e) => ({ ...e, status: 'lapsed' })));
      // Within one lease TTL after the last checkpoint, plus one sweep (and this poll's own step).
      expect(closedAfterMs).to.be.lessThan(LEASE_TTL_MS + SWEEP_MS + 1500);
      // Once: later sweeps change nothing, and the window counts it once.
      await new Promise((r) => setTimeout(r, 3 * SWEEP_MS));
      expect(await rows()).to.deep.equal(closed);
      expect(await windowUsage(db, rec.id, 3600)).to.be.closeTo(total, 1e-9);
    } finally {
      await rt.kill();
    }
  });
});
