/**
 * Faults: what ffmpeg may read and spend (issue 36). A batch `audio_url`
 * serving a playlist made ffmpeg read a local file (and bill it); an MP4
 * whose index declares 80 M samples took 1.9 GB; malformed chunk tables and
 * deep box nesting were a 500 with a stack. Every ffmpeg child now reads
 * only its own input, with a demuxer from a fixed list, under a memory and
 * CPU bound; each is measured here on the real ffmpeg children of the app.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import {
  audioDir,
  createBatchTestApp,
  issueKey,
  randomId,
  startFileServer,
  tmpDir,
  waitFor,
} from '../batch/helpers.js';
import type { BatchTestApp, FileServer } from '../batch/helpers.js';
import { execFileSync } from 'node:child_process';
import { leaks } from './cluster.js';
import {
  dashManifest,
  hlsPlaylist,
  mp4DeepNesting,
  mp4LyingChunkCount,
  mp4SampleBomb,
  trackerModule,
} from './media.js';

const MiB = 1024 * 1024;

/** Peak resident set (VmHWM) and CPU time of this process's ffmpeg children, sampled every 10 ms. */
function watchFfmpeg(): { stop(): { peakBytes: number; cpuSeconds: number; seen: number } } {
  const seen = new Map<number, { hwm: number; cpu: number }>();
  const tick = setInterval(() => {
    for (const d of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
        const m = /^\d+ \((.*)\) \S+ (\d+)/.exec(stat);
        if (!m || m[1] !== 'ffmpeg' || Number(m[2]) !== process.pid) continue;
        const status = fs.readFileSync(`/proc/${d}/status`, 'utf8');
        const hwm = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        const cpu = (Number(fields[11]) + Number(fields[12])) / 100; // utime + stime, in clock ticks
        const prev = seen.get(Number(d));
        seen.set(Number(d), { hwm: Math.max(hwm, prev?.hwm ?? 0), cpu: Math.max(cpu, prev?.cpu ?? 0) });
      } catch {
        // the process ended between the listing and the read
      }
    }
  }, 10);
  return {
    stop() {
      clearInterval(tick);
      const all = [...seen.values()];
      return {
        peakBytes: Math.max(0, ...all.map((s) => s.hwm)),
        cpuSeconds: Math.max(0, ...all.map((s) => s.cpu)),
        seen: all.length,
      };
    },
  };
}

describe('faults: what ffmpeg may read and spend', function () {
  this.timeout(180_000);
  let t: BatchTestApp;
  let key: string;
  let files: FileServer;
  const dir = tmpDir('faults-ffmpeg-');
  /** Local files a tenant must never get transcribed: outside what the file server serves. */
  const secrets = tmpDir('faults-secret-');

  before(async () => {
    const jfk = path.join(audioDir, 'jfk.wav');
    for (const [name, codec] of [
      ['secret.mp3', ['-c:a', 'libmp3lame']],
      ['secret.ts', ['-c:a', 'mp2', '-f', 'mpegts']],
      ['secret.m4a', ['-c:a', 'aac']],
    ] as const) {
      execFileSync('ffmpeg', [
        '-hide_banner',
        '-loglevel',
        'error',
        '-y',
        '-i',
        jfk,
        ...codec,
        path.join(secrets, name),
      ]);
    }
    fs.writeFileSync(path.join(dir, 'hls-mp3.bin'), hlsPlaylist(path.join(secrets, 'secret.mp3')));
    fs.writeFileSync(path.join(dir, 'hls-ts.bin'), hlsPlaylist(path.join(secrets, 'secret.ts')));
    fs.writeFileSync(path.join(dir, 'dash.bin'), dashManifest(path.join(secrets, 'secret.m4a')));
    fs.writeFileSync(path.join(dir, 'bomb.m4a'), mp4SampleBomb(dir));
    fs.writeFileSync(path.join(dir, 'tune.bin'), trackerModule());
    files = await startFileServer(dir);
    t = await createBatchTestApp({}, { start: true });
    key = (await issueKey(t, { plan: 'pro' })).key;
  });
  after(async () => {
    await t?.close();
    await files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
    fs.rmSync(secrets, { recursive: true, force: true });
  });

  async function runJob(url: string) {
    const res = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: url, request_id: randomId() });
    expect(res.status, res.text).to.equal(202);
    const id = res.body.workflow_id as string;
    return waitFor(async () => {
      const p = await request(t.server)
        .get(`/v1/audio/transcriptions/jobs/${id}`)
        .set('authorization', `Bearer ${key}`);
      return ['errored', 'complete'].includes(p.body.status as string) ? p : undefined;
    }, 60_000);
  }

  for (const [name, container] of [
    ['hls-mp3.bin', 'hls'],
    ['hls-ts.bin', 'hls'],
    ['dash.bin', 'dash'],
  ] as const) {
    it(`a batch audio_url serving a ${container} playlist of a local file: errored, nothing read`, async () => {
      const done = await runJob(`${files.url}/${name}`);
      expect(done.body.status, done.text).to.equal('errored');
      expect(done.body.error.name).to.equal('AudioDecodeError');
      expect(done.body.error.message).to.include(`container (${container})`);
      expect(done.text).to.not.match(/country/i);
      expect(leaks(done.text)).to.deep.equal([]);
    });
  }

  it('a batch audio_url serving a tracker module (synthesized audio): errored before any decoding', async () => {
    const done = await runJob(`${files.url}/tune.bin`);
    expect(done.body.status, done.text).to.equal('errored');
    expect(done.body.error.message).to.include('container (libopenmpt)');
  });

  const upload = (file: Buffer, name: string) =>
    request(t.server)
      .post('/v1/audio/transcriptions')
      .set('authorization', `Bearer ${key}`)
      .attach('file', file, name);

  it('an upload of a playlist is refused as a container the service does not read', async () => {
    const res = await upload(hlsPlaylist(path.join(secrets, 'secret.mp3')), 'list.m3u8');
    expect(res.status, res.text).to.equal(400);
    expect(res.body.error.code).to.equal('invalid_audio');
    expect(leaks(res.text)).to.deep.equal([]);
  });

  it('an MP4 declaring 80 M samples: 400 invalid_audio, its ffmpeg under 256 MiB and 5 s of CPU', async () => {
    const bomb = fs.readFileSync(path.join(dir, 'bomb.m4a'));
    expect(bomb.length).to.be.below(2000);
    const watch = watchFfmpeg();
    const res = await upload(bomb, 'bomb.m4a');
    const used = watch.stop();
    expect(res.status, res.text).to.equal(400);
    expect(res.body.error.code).to.equal('invalid_audio');
    expect(used.peakBytes, 'ffmpeg peak RSS').to.be.below(256 * MiB);
    expect(used.cpuSeconds, 'ffmpeg CPU').to.be.below(5);
  });

  it('a batch audio_url of the same MP4: errored, its ffmpeg under 256 MiB', async () => {
    const watch = watchFfmpeg();
    const done = await runJob(`${files.url}/bomb.m4a`);
    const used = watch.stop();
    expect(done.body.status, done.text).to.equal('errored');
    expect(done.body.error.name).to.equal('AudioDecodeError');
    expect(used.peakBytes, 'ffmpeg peak RSS').to.be.below(256 * MiB);
  });

  it('an MP4 whose stco declares 2^30 offsets, and one nested 100,000 boxes deep: 400, no stack logged', async () => {
    for (const [file, name] of [
      [mp4LyingChunkCount(dir), 'stco.m4a'],
      [mp4DeepNesting(), 'deep.m4a'],
    ] as const) {
      const res = await upload(file, name);
      expect(res.status, `${name}: ${res.text}`).to.equal(400);
      expect(res.body.error.code).to.equal('invalid_audio');
    }
    expect(leaks(t.logs.text), 'log leaks').to.deep.equal([]);
  });
});
