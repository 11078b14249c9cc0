/**
 * What the usage ledger costs: one realtime instance's checkpoint of N live
 * sessions (one statement) beside N single-row writes (what a write per
 * session would cost), a final record, a durable spool append (fdatasync),
 * and the window query the realtime and segment admissions run.
 *
 *   npx tsx test/bench/usage/ledger.ts [--sessions 200] [--rounds 30]
 *
 * Real Postgres (TEST_DATABASE_URL), its own database, dropped at the end.
 * Prints medians in milliseconds.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { createDb } from '../../../shared/db/index.js';
import { PlanCatalog } from '../../../shared/plans.js';
import { KeyStore } from '../../../shared/auth/index.js';
import { UsageLedger, windowUsage, type UsageUnit } from '../../../shared/usage.js';
import { Spool } from '../../../shared/usage/spool.js';
import { createTestDatabase } from '../../helpers/db.js';

const { values } = parseArgs({
  options: { sessions: { type: 'string', default: '200' }, rounds: { type: 'string', default: '30' } },
});
const sessions = Number(values.sessions);
const rounds = Number(values.rounds);

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};
async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const testDb = await createTestDatabase('stt_bench_usage');
const db = createDb(testDb.url, { poolMax: 4 });
const spoolDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-bench-spool-'));
const cfg = loadConfig({ USAGE_SPOOL_DIR: spoolDir }).ledger;
const ledger = new UsageLedger(db, cfg, createLogger({ level: 'silent' }));
try {
  const keyId = (await new KeyStore(db, new PlanCatalog({})).issue({ ownerId: 'bench', plan: 'pro' })).id;
  const units: UsageUnit[] = Array.from({ length: sessions }, () => ({
    keyId,
    plane: 'realtime',
    refId: `sess_${randomBytes(12).toString('hex')}`,
    audioSeconds: 0,
  }));
  const batched: number[] = [];
  const single: number[] = [];
  const finals: number[] = [];
  const spoolAppends: number[] = [];
  const windows: number[] = [];
  const spool = new Spool(spoolDir, cfg.spoolOrphanMs);
  for (let r = 1; r <= rounds; r++) {
    const grown = units.map((u) => ({ ...u, audioSeconds: r * 2 }));
    batched.push(await timed(() => ledger.checkpoint(grown)));
    const more = grown.map((u) => ({ ...u, audioSeconds: r * 2 + 1 }));
    single.push(await timed(async () => Promise.all(more.map((u) => ledger.checkpoint([u])))));
    finals.push(
      await timed(() =>
        ledger.record({
          keyId,
          plane: 'segment',
          refId: `seg_${randomBytes(8).toString('hex')}`,
          audioSeconds: 3,
        }),
      ),
    );
    spoolAppends.push(
      await timed(() => spool.append(grown.map((u) => ({ ...u, kind: 'live' as const, at: Date.now() })))),
    );
    windows.push(await timed(() => windowUsage(db, keyId, 86_400)));
  }
  const b = median(batched);
  const s = median(single);
  console.log(`sessions ${sessions}, rounds ${rounds}, medians (ms):`);
  console.log(`checkpoint of ${sessions} live sessions, one statement   ${b.toFixed(2)}`);
  console.log(
    `${sessions} single-session checkpoints (pool of 4)       ${s.toFixed(2)}  (batched = ${((b / s) * 100).toFixed(0)}%)`,
  );
  console.log(`one final record (segment request)                  ${median(finals).toFixed(2)}`);
  console.log(`spool append of ${sessions} entries + fdatasync         ${median(spoolAppends).toFixed(2)}`);
  console.log(`window query (key with ${sessions + rounds} rows)             ${median(windows).toFixed(2)}`);
} finally {
  await ledger.close();
  await db.destroy();
  await testDb.drop();
  fs.rmSync(spoolDir, { recursive: true, force: true });
}
