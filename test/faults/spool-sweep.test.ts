/**
 * Faults: an API killed (kill -9) during a long decode left its spool file
 * (`decode-<uuid>.pcm`, hundreds of MB) in the temp directory for good
 * (issue 36). Spool files now carry their process's pid, and every API and
 * engine process sweeps, at start, those no live process owns.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { issueKey, ServiceProcess, startApiProcess, tmpDir, UNLIMITED_PLANS, waitFor } from './cluster.js';

describe('faults: a decode spool file of a killed process', function () {
  this.timeout(180_000);
  let db: TestDatabase;
  const dir = tmpDir('stt-faults-spool-');
  const spool = path.join(dir, 'tmp');
  const bomb = path.join(dir, 'silence.flac');
  const procs: ServiceProcess[] = [];

  before(async () => {
    execFileSync('ffmpeg', [
      '-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'anullsrc=r=8000:cl=mono',
      '-t', '14000', '-c:a', 'flac', '-compression_level', '12', bomb,
    ]); // prettier-ignore
    fs.mkdirSync(spool);
    db = await createTestDatabase('stt_faults');
  });
  after(async () => {
    for (const p of procs) await p.stop().catch(() => {});
    await db?.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const env = () => ({
    TMPDIR: spool,
    DATABASE_URL: db.url,
    DATA_DIR: dir,
    BATCH_WORKERS: 'false',
    PLANS_JSON: UNLIMITED_PLANS,
  });
  const spooled = () => fs.readdirSync(spool).filter((f) => f.startsWith('decode-'));

  it('is removed when the next process starts; a live one is kept', async () => {
    const api = await startApiProcess(env());
    procs.push(api.proc);
    const key = await issueKey(api.url);
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(fs.readFileSync(bomb))]), 'silence.flac');
    const answer = fetch(`${api.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: form,
    }).catch(() => undefined);
    // A decode in flight: its spool file has grown past 20 MB.
    const [left] = await waitFor(
      'a spool file',
      async () => {
        const f = spooled();
        return f.length && fs.statSync(path.join(spool, f[0])).size > 20 * 1024 * 1024 ? f : undefined;
      },
      60_000,
      20,
    );
    api.proc.child.kill('SIGKILL');
    await answer;
    expect(spooled()).to.include(left);
    // A spool file of a live process (this one's pid, written now) is not another process's to remove.
    const live = path.join(spool, `decode-${process.pid}-00000000-0000-4000-8000-000000000000.pcm`);
    fs.writeFileSync(live, Buffer.alloc(16));
    const next = await startApiProcess({ ...env(), MIGRATE_ON_START: 'false' });
    procs.push(next.proc);
    expect(spooled()).to.not.include(left);
    expect(fs.existsSync(live)).to.equal(true);
  });
});
