/**
 * Faults: a full data disk (issue 36). The app's DATA_DIR and temp directory
 * are a small tmpfs filled to a few hundred KiB: a download that fills it
 * used to raise an uncaught ENOSPC (the process died, and again after each
 * restart), an upload was blamed (400 invalid_audio, with the spool path), a
 * job whose checkpoint write failed errored for good and left a 0-byte temp
 * file, and a resubmission reusing an errored workflow's chunk never billed
 * it. Now: the job pauses and completes once space returns, the upload is
 * 507 with Retry-After, nothing half-written is left, every chunk is billed
 * once. A disk floor refuses new work before anything is written.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import {
  audioDir,
  buildRecording,
  createBatchTestApp,
  durationOf,
  issueKey,
  pollJob,
  randomId,
  startFileServer,
  tmpDir,
  waitFor,
} from '../batch/helpers.js';
import type { BatchTestApp, FileServer } from '../batch/helpers.js';
import { leaks } from './cluster.js';

const KiB = 1024;

/** Writes `file` until the filesystem holding it has at most `leave` bytes free. */
function fill(file: string, leave: number): void {
  const s = fs.statfsSync(path.dirname(file));
  const free = s.bavail * s.bsize;
  const fd = fs.openSync(file, 'a');
  const block = Buffer.alloc(64 * KiB, 1);
  try {
    for (let left = free - leave; left > 0; left -= block.length) {
      try {
        fs.writeSync(fd, block, 0, Math.min(block.length, left));
      } catch {
        break; // full
      }
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** Every file under `dir` whose name matches `re`. */
function filesUnder(dir: string, re: RegExp): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && re.test(e.name)) out.push(path.join(e.parentPath, e.name));
  }
  return out;
}

describe('faults: a full data disk', function () {
  this.timeout(240_000);
  const mnt = tmpDir('faults-disk-');
  const tmp = path.join(mnt, 'tmp');
  const filler = path.join(mnt, 'filler');
  const served = tmpDir('faults-disk-files-');
  const recording = path.join(served, 'talk.wav');
  let files: FileServer;
  /** Serves the same files without a Content-Length (chunked): their size is known only at the end. */
  let chunked: { url: string; close(): Promise<void> };
  let t: BatchTestApp;
  let key: string;
  let keyId: string;
  let savedTmpdir: string | undefined;
  let seconds: number;

  before(async function () {
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=24m', 'tmpfs', mnt]);
    } catch {
      this.skip(); // mounting a tmpfs needs root
    }
    fs.mkdirSync(tmp);
    buildRecording(recording, [
      'jfk.wav',
      'librispeech-1221-135766-0001.wav',
      'librispeech-1089-134686-0001.wav',
    ]);
    seconds = durationOf(recording);
    execFileSync('sox', [recording, path.join(served, 'talk.flac')]);
    execFileSync('sox', [path.join(audioDir, 'jfk.wav'), path.join(served, 'jfk.flac')]);
    files = await startFileServer(served);
    const server = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'audio/wav' });
      fs.createReadStream(path.join(served, path.basename(req.url ?? ''))).pipe(res);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    chunked = {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: () => new Promise<void>((r) => server.close(() => r())),
    };
    // The segment spool goes to the temp directory: the same small disk.
    savedTmpdir = process.env.TMPDIR;
    process.env.TMPDIR = tmp;
    t = await createBatchTestApp({ DATA_DIR: mnt, DISK_FLOOR_MB: '0' }, { start: true });
    ({ key, id: keyId } = await issueKey(t, { plan: 'pro' }));
  });
  after(async () => {
    await t?.close();
    await files?.close();
    await chunked?.close();
    if (savedTmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = savedTmpdir;
    try {
      execFileSync('umount', [mnt]);
    } catch {
      // not mounted
    }
    fs.rmSync(mnt, { recursive: true, force: true });
    fs.rmSync(served, { recursive: true, force: true });
  });
  afterEach(() => {
    fs.rmSync(filler, { force: true });
    t.hooks.onEngineCall = undefined;
    expect(t.logs.text).to.not.match(/uncaught exception/);
  });

  const submit = (requestId = randomId(), url = `${files.url}/talk.wav`) =>
    request(t.server).post('/v1/audio/transcriptions/jobs').set('authorization', `Bearer ${key}`).send({
      audio_url: url,
      request_id: requestId,
      segment_seconds: 10,
      concurrency: 1,
    });

  const pauses = () => (t.logs.text.match(/workflow paused/g) ?? []).length;

  const billedSeconds = async (id: string) => {
    const rows = await t.deps.db('usage_events').where({ plane: 'batch', ref_id: id });
    return rows.reduce((a, r: { audio_seconds: string }) => a + Number(r.audio_seconds), 0);
  };

  for (const [how, url, says] of [
    [
      'declared larger than the free space: not fetched',
      () => `${files.url}/talk.wav`,
      /does not fit the server's free disk space/,
    ],
    [
      'of unknown length that fills the disk',
      () => `${chunked.url}/talk.wav`,
      /no disk space left to download/,
    ],
  ] as const) {
    it(`a download ${how}: the job pauses (the process lives), and completes once space returns`, async () => {
      fill(filler, 256 * KiB);
      const before = pauses();
      const res = await submit(randomId(), url());
      expect(res.status, res.text).to.equal(202);
      const id = res.body.workflow_id as string;
      await waitFor(
        async () => pauses() > before || (await pollJob(t, key, id)).status === 'errored',
        30_000,
      );
      expect((await pollJob(t, key, id)).status).to.not.equal('errored');
      expect(t.logs.text).to.match(says);
      expect(filesUnder(mnt, /^source$/)).to.deep.equal([]);
      fs.rmSync(filler);
      const done = await waitFor(async () => {
        const p = await pollJob(t, key, id);
        return p.status === 'complete' || p.status === 'errored' ? p : undefined;
      }, 60_000);
      expect(done.status, JSON.stringify(done.error)).to.equal('complete');
      expect(await billedSeconds(id)).to.be.closeTo(seconds, 0.05);
    });
  }

  it('a segment upload on a full disk: 507 insufficient_storage with Retry-After, no path; served within 5 s of space returning', async () => {
    fill(filler, 256 * KiB);
    const upload = (name = 'talk.flac') =>
      request(t.server)
        .post('/v1/audio/transcriptions')
        .set('authorization', `Bearer ${key}`)
        .attach('file', fs.readFileSync(path.join(served, name)), name);
    const refused = await upload();
    expect(refused.status, refused.text).to.equal(507);
    expect(refused.body.error.code).to.equal('insufficient_storage');
    expect(refused.headers['retry-after']).to.match(/^\d+$/);
    expect(leaks(refused.text)).to.deep.equal([]);
    expect(filesUnder(tmp, /^decode-/)).to.deep.equal([]);
    fs.rmSync(filler);
    // Served again: the first upload sent after space returned is answered 200 (its transcription time,
    // which a loaded machine stretches, is not the disk's).
    const back = Date.now();
    let sentAt = 0;
    const ok = await waitFor(async () => {
      sentAt = Date.now();
      const r = await upload('jfk.flac');
      return r.status === 200 ? r : undefined;
    }, 30_000);
    expect(ok.body.text).to.match(/country/);
    expect(sentAt - back).to.be.below(5000);
  });

  it('the disk fills while a job transcribes: it pauses, leaves no temp file, then bills every chunk once', async () => {
    let filled = false;
    t.hooks.onEngineCall = (_id, chunk) => {
      if (chunk === 1 && !filled) {
        filled = true;
        fill(filler, 0);
      }
    };
    const before = pauses();
    const res = await submit();
    expect(res.status, res.text).to.equal(202);
    const id = res.body.workflow_id as string;
    await waitFor(async () => filled, 60_000);
    await waitFor(async () => pauses() > before || (await pollJob(t, key, id)).status === 'errored', 30_000);
    expect((await pollJob(t, key, id)).status).to.not.equal('errored');
    expect(filesUnder(mnt, /\.tmp$/)).to.deep.equal([]);
    fs.rmSync(filler);
    const done = await waitFor(async () => {
      const p = await pollJob(t, key, id);
      return p.status === 'complete' || p.status === 'errored' ? p : undefined;
    }, 60_000);
    expect(done.status, JSON.stringify(done.error)).to.equal('complete');
    expect(await billedSeconds(id)).to.be.closeTo(seconds, 0.05);
  });

  it("a resubmission that reuses an errored workflow's chunks bills them (once)", async () => {
    const requestId = randomId();
    t.hooks.onEngineCall = (_id, chunk) => {
      if (chunk === 1) throw new Error('engine failure for this test');
    };
    const first = (await submit(requestId)).body.workflow_id as string;
    await waitFor(
      async () => ((await pollJob(t, key, first)).status === 'errored' ? true : undefined),
      60_000,
    );
    t.hooks.onEngineCall = undefined;
    const second = await submit(requestId);
    expect(second.status, second.text).to.equal(202);
    const id = second.body.workflow_id as string;
    expect(id).to.not.equal(first);
    const done = await waitFor(async () => {
      const p = await pollJob(t, key, id);
      return p.status === 'complete' || p.status === 'errored' ? p : undefined;
    }, 60_000);
    expect(done.status).to.equal('complete');
    expect((await billedSeconds(first)) + (await billedSeconds(id))).to.be.closeTo(seconds, 0.05);
    // A third submission reuses every chunk: all were billed, nothing is billed again.
    const third = (await submit(requestId)).body.workflow_id as string;
    await waitFor(
      async () => ((await pollJob(t, key, third)).status === 'complete' ? true : undefined),
      60_000,
    );
    expect(await billedSeconds(third)).to.equal(0);
    const total = await t.deps.db('usage_events').where({ key_id: keyId, plane: 'batch' });
    expect(total.length).to.be.greaterThan(0);
  });
});

describe('faults: the disk floor', function () {
  this.timeout(60_000);
  let t: BatchTestApp;
  let key: string;

  before(async () => {
    // A floor no disk reaches: every directory is below it.
    t = await createBatchTestApp({ DISK_FLOOR_MB: String(1 << 30) });
    ({ key } = await issueKey(t, { plan: 'pro' }));
  });
  after(() => t?.close());

  it('below the floor: uploads and job submissions get 507 with Retry-After before the body is read; /readyz says so', async () => {
    const upload = await request(t.server)
      .post('/v1/audio/transcriptions')
      .set('authorization', `Bearer ${key}`)
      .attach('file', fs.readFileSync(path.join(audioDir, 'jfk.wav')), 'jfk.wav');
    expect(upload.status, upload.text).to.equal(507);
    expect(upload.body.error).to.include({ code: 'insufficient_storage' });
    expect(upload.headers['retry-after']).to.match(/^\d+$/);
    const job = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: 'https://example.com/a.wav' });
    expect(job.status, job.text).to.equal(507);
    expect(job.body).to.include({ code: 'insufficient_storage' });
    expect(job.headers['retry-after']).to.match(/^\d+$/);
    const ready = await request(t.server).get('/readyz');
    expect(ready.status).to.equal(503);
    expect(ready.body.checks).to.include({ disk: false });
    // What writes nothing goes on.
    expect((await request(t.server).get('/health')).status).to.equal(200);
  });
});
