/**
 * The usage ledger on real Postgres: checkpoints only grow, a final record
 * bills once, expired leases lapse, and usage that could not reach Postgres
 * is spooled on disk and replayed (twice, by two processes) without billing
 * twice.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { loadConfig } from '../../shared/config/index.js';
import type { UsageLedgerConfig } from '../../shared/config/usage.js';
import { createLogger } from '../../shared/logger.js';
import { createDb, type Knex } from '../../shared/db/index.js';
import { PlanCatalog } from '../../shared/plans.js';
import { KeyStore } from '../../shared/auth/index.js';
import { UsageLedger, windowUsage, type UsageUnit } from '../../shared/usage.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const logger = createLogger({ level: 'silent' });
/** A pid above Linux's pid_max: never a running process. */
const DEAD_PID = 4_194_999;

describe('usage ledger', function () {
  this.timeout(30_000);
  let testDb: TestDatabase;
  let db: Knex;
  let keyId: string;
  let spoolDir: string;
  const ledgers: UsageLedger[] = [];

  // Fast replays; `over` changes more of the ledger's internal tuning.
  const ledger = (over: Partial<UsageLedgerConfig> = {}, on: Knex = db) => {
    const cfg: UsageLedgerConfig = {
      ...loadConfig({ USAGE_SPOOL_DIR: spoolDir }).ledger,
      retryMinMs: 20,
      retryMaxMs: 100,
      writeTimeoutMs: 2000,
      ...over,
    };
    const l = new UsageLedger(on, cfg, logger);
    ledgers.push(l);
    return l;
  };
  const rows = (refIds: string[]) =>
    db('usage_events')
      .whereIn('ref_id', refIds)
      .orderBy('ref_id')
      .select('ref_id', 'audio_seconds', 'status');
  const unit = (audioSeconds: number, refId = `sess_${randomBytes(6).toString('hex')}`): UsageUnit => ({
    keyId,
    plane: 'realtime',
    refId,
    audioSeconds,
  });

  before(async () => {
    testDb = await createTestDatabase('stt_usage');
    db = createDb(testDb.url, { poolMax: 4 });
    keyId = (await new KeyStore(db, new PlanCatalog({})).issue({ ownerId: 'usage', plan: 'pro' })).id;
  });
  beforeEach(() => {
    spoolDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-usage-spool-'));
  });
  afterEach(async () => {
    for (const l of ledgers.splice(0)) await l.close();
    fs.rmSync(spoolDir, { recursive: true, force: true });
  });
  after(async () => {
    await db?.destroy();
    await testDb?.drop();
  });

  it('checkpoints never decrease; the final record sets the exact seconds once; later writes change nothing', async () => {
    const l = ledger();
    const u = unit(0);
    await l.checkpoint([{ ...u, audioSeconds: 5 }]);
    await l.checkpoint([{ ...u, audioSeconds: 3 }]);
    expect(await rows([u.refId])).to.deep.equal([{ ref_id: u.refId, audio_seconds: 5, status: 'live' }]);
    await l.checkpoint([{ ...u, audioSeconds: 7.5 }]);
    expect((await rows([u.refId]))[0].audio_seconds).to.equal(7.5);
    // The final record is exact (audio dropped with an utterance that could not start is not billed).
    await l.record({ ...u, audioSeconds: 7.25 });
    await l.record({ ...u, audioSeconds: 9 });
    await l.checkpoint([{ ...u, audioSeconds: 12 }]);
    expect(await rows([u.refId])).to.deep.equal([{ ref_id: u.refId, audio_seconds: 7.25, status: 'final' }]);
    expect(l.spooled).to.equal(0);
  });

  it("the billing window counts live sessions' checkpointed audio", async () => {
    const l = ledger();
    const before = await windowUsage(db, keyId, 3600);
    await l.checkpoint([unit(40), unit(2)]);
    expect(await windowUsage(db, keyId, 3600)).to.be.closeTo(before + 42, 1e-9);
  });

  it('a live row whose lease ran out (its process died) is lapsed by any ledger, keeping its last checkpoint', async () => {
    const dying = ledger({ leaseTtlMs: 300, checkpointMs: 100 });
    const u = unit(11);
    await dying.checkpoint([u]);
    expect((await rows([u.refId]))[0].status).to.equal('live');
    const survivor = ledger();
    await survivor.sweep();
    expect((await rows([u.refId]))[0].status).to.equal('live');
    await new Promise((r) => setTimeout(r, 400));
    await survivor.sweep();
    expect(await rows([u.refId])).to.deep.equal([{ ref_id: u.refId, audio_seconds: 11, status: 'lapsed' }]);
    // Its owner, partitioned rather than dead, can still close it exactly.
    await dying.record({ ...u, audioSeconds: 12 });
    expect(await rows([u.refId])).to.deep.equal([{ ref_id: u.refId, audio_seconds: 12, status: 'final' }]);
  });

  describe('while Postgres is unreachable', () => {
    let down: Knex;
    beforeEach(() => {
      // Nothing listens on port 1: every connection is refused at once.
      down = createDb('postgres://postgres@127.0.0.1:1/none', { poolMax: 2 });
    });
    afterEach(() => down.destroy());

    it('spools durably; replaying the spool four times (adopted copies of dead processes) bills once', async () => {
      const units = [unit(1.5), unit(2.25), unit(3)];
      const live = unit(4);
      const offline = ledger({}, down);
      for (const u of units) await offline.record(u);
      await offline.checkpoint([live]);
      expect(offline.spooled).to.equal(4);
      expect(offline.accepting).to.equal(true);
      await offline.close();
      // On disk, one line per entry, as a process killed now would leave it.
      const lines = fs.readFileSync(offline.spool.file, 'utf8').trim().split('\n');
      expect(lines).to.have.length(4);
      // Copies, as if dead processes had each left the same entries: two whose pid no longer runs, and
      // an earlier process that had this process's pid (a restarted container's pid 1).
      const host = os.hostname().replace(/[^A-Za-z0-9_-]/g, '_');
      for (const name of [
        `${host}.${DEAD_PID}.1.a.jsonl`,
        `${host}.${DEAD_PID}.1.b.jsonl`,
        `${host}.${process.pid}.1.c.jsonl`,
      ]) {
        fs.copyFileSync(offline.spool.file, path.join(spoolDir, name));
      }
      const replayer = ledger();
      await replayer.sweep(); // adopts the dead processes' files, not the one of this (living) process
      await replayer.flush();
      const adoptedAll = fs.readdirSync(spoolDir).filter((f) => f.endsWith('.jsonl'));
      expect(adoptedAll).to.deep.equal([path.basename(offline.spool.file)]);
      // A file of a living pid is adopted once nobody has touched it for `spoolOrphanMs`: a third replay.
      const again = ledger({ spoolOrphanMs: 1000, retryMaxMs: 100 });
      fs.utimesSync(offline.spool.file, new Date(Date.now() - 5000), new Date(Date.now() - 5000));
      await again.sweep();
      await again.flush();
      expect(fs.readdirSync(spoolDir).filter((f) => f.endsWith('.jsonl'))).to.deep.equal([]);
      const ids = [...units, live].map((u) => u.refId);
      const got = await rows(ids);
      expect(got).to.have.length(4);
      const byId = new Map(got.map((r) => [r.ref_id, r]));
      for (const u of units)
        expect(byId.get(u.refId)).to.include({ audio_seconds: u.audioSeconds, status: 'final' });
      expect(byId.get(live.refId)).to.include({ audio_seconds: 4 });
      expect(replayer.spooled + again.spooled).to.equal(0);
      // Nothing was refused on the way (a replay that conflicted would be set aside as rejected).
      expect(fs.existsSync(path.join(spoolDir, 'rejected.log'))).to.equal(false);
    });

    it('refuses new work once the spool holds `spoolMaxUnits`', async () => {
      const offline = ledger({ spoolMaxUnits: 2 }, down);
      await offline.record(unit(1));
      expect(offline.accepting).to.equal(true);
      await offline.record(unit(1));
      expect(offline.accepting).to.equal(false);
    });
  });

  it('an entry that can never be written (unknown key) is set aside in rejected.log; the rest of its batch is billed', async () => {
    const l = ledger();
    const good = unit(2);
    const bad = { ...unit(3), keyId: 'key_that_does_not_exist' };
    await l.checkpoint([good, bad]);
    expect(await rows([good.refId, bad.refId])).to.deep.equal([
      { ref_id: good.refId, audio_seconds: 2, status: 'live' },
    ]);
    const rejected = fs.readFileSync(path.join(spoolDir, 'rejected.log'), 'utf8');
    expect(rejected).to.contain(bad.refId).and.not.contain(good.refId);
    expect(l.spooled).to.equal(0);
  });
});
