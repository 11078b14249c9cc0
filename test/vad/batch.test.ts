/**
 * Batched silero (realtime/vad/silero.ts, thread.ts): the windows of many
 * streams classified by one model call give the same utterances as one
 * stream at a time in the caller's thread, on the real clips of
 * test/audio with the real model.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { loadConfig } from '../../shared/config/index.js';
import { canonicalWavSamples } from '../../shared/audio/index.js';
import { Segmenter, type SegmenterEvent, type SegmenterSettings } from '../../realtime/vad/segmenter.js';
import { loadVad } from '../../realtime/vad/factory.js';
import { WINDOW_SAMPLES } from '../../realtime/vad/vad.js';
import { InlineVad, ThreadedVad, type VadEvent, type VadService } from '../../realtime/vad/service.js';
import { pushThrough } from '../../realtime/vad/rounds.js';

const AUDIO_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../audio');
const silence = (ms: number) => Buffer.alloc(Math.round(ms * 16) * 2);
const clips = fs
  .readdirSync(AUDIO_DIR)
  .filter((f) => f.endsWith('.wav'))
  .sort()
  .map((f) =>
    Buffer.concat([
      silence(300),
      canonicalWavSamples(fs.readFileSync(path.join(AUDIO_DIR, f)))!,
      silence(1200),
    ]),
  );

const config = loadConfig({});
const v = config.realtime.vad;
const segOpts = {
  gateDbfs: v.gateDbfs,
  releaseAfterMs: v.releaseAfterMs,
  holdDb: v.holdDb,
  quietDb: v.quietDb,
  candidateGapMs: v.candidateGapMs,
  maxSkip: v.maxSkip,
};
/** Streams differ in threshold and silence so that every stream blocks and resumes on its own schedule. */
const settingsOf = (i: number): SegmenterSettings => ({
  ...config.realtime.vadDefaults,
  threshold: [0.5, 0.3, 0.7][i % 3],
  silenceMs: [500, 300, 800][i % 3],
});

const describeEvent = (e: VadEvent) =>
  e.type === 'stop'
    ? `stop ${e.audioStartMs}-${e.audioEndMs} ${e.reason} speech=${e.speechMs} bytes=${e.pcm.length}`
    : e.type === 'start'
      ? `start ${e.audioStartMs}`
      : e.type;

/** Each stream pushes its audio in 100 ms frames, all streams interleaved; then flush. */
async function segmentAll(vad: VadService, streams: Buffer[]): Promise<string[][]> {
  const got: string[][] = streams.map(() => []);
  const flushed: Promise<void>[] = [];
  const handles = streams.map((_, i) => {
    let done!: () => void;
    flushed.push(new Promise<void>((r) => (done = r)));
    return vad.open(settingsOf(i), (evs) => {
      for (const e of evs) {
        got[i].push(describeEvent(e));
        if (e.type === 'flushed') done();
      }
    });
  });
  const longest = Math.max(...streams.map((s) => s.length));
  for (let off = 0; off < longest; off += 3200) {
    streams.forEach((pcm, i) => off < pcm.length && handles[i].push(pcm.subarray(off, off + 3200)));
    // Let the thread see several frames per batch, as under load.
    if ((off / 3200) % 4 === 3) await new Promise((r) => setTimeout(r, 5));
  }
  for (const h of handles) h.flush();
  await Promise.all(flushed);
  for (const h of handles) h.close();
  return got;
}

describe('batched silero VAD', function () {
  this.timeout(120_000);

  it('gives the same utterances as one stream at a time (real clips, inline and VAD thread)', async () => {
    // 3 copies of each clip with different settings: 18 streams, batches of up to 18 windows.
    const streams = [...clips, ...clips, ...clips];
    // One stream at a time, every model call of batch 1.
    const alone = await loadVad({ modelPath: v.modelPath, warm: 0, max: 1 });
    const expected: string[][] = [];
    for (const [i, pcm] of streams.entries()) {
      const seg = new Segmenter(settingsOf(i), alone, segOpts);
      const evs: VadEvent[] = await pushThrough(seg, alone, pcm);
      expected.push([...evs, ...seg.flush(), { type: 'flushed' as const }].map(describeEvent));
      seg.close();
    }
    expect(alone.stats.calls).to.equal(alone.stats.windows);
    const inline = new InlineVad(await loadVad({ modelPath: v.modelPath, warm: 0, max: 64 }), segOpts);
    const threaded = await ThreadedVad.start(1, {
      ...v,
      poolWarm: 0,
      poolMax: 64,
      batchWaitMs: 20,
      batchWindows: 64,
    });
    try {
      expect(await segmentAll(inline, streams)).to.deep.equal(expected);
      expect(await segmentAll(threaded, streams)).to.deep.equal(expected);
      // Real speech was segmented by the VAD, not just flushed.
      for (const evs of expected)
        expect(
          evs.filter((e) => / (end_of_speech|target_duration) /.test(e)).length,
          evs.join('; '),
        ).to.be.greaterThan(0);
    } finally {
      await threaded.close();
    }
  });

  it('a stream blocked on the model keeps its later operations in order, and a close while queued is safe', async () => {
    const pool = await loadVad({ modelPath: v.modelPath, warm: 0, max: 4 });
    const a = new Segmenter(settingsOf(0), pool, segOpts);
    const b = new Segmenter(settingsOf(0), pool, segOpts);
    const refPool = await loadVad({ modelPath: v.modelPath, warm: 0, max: 1 });
    const ref = new Segmenter(settingsOf(0), refPool, segOpts);
    const clip = clips[0];
    const expected = [...(await pushThrough(ref, refPool, clip)), ...ref.flush()].map(describeEvent);

    const got: SegmenterEvent[] = [...a.push(clip)];
    b.push(clip.subarray(0, 40 * WINDOW_SAMPLES * 2));
    expect(a.blocked && b.blocked, 'both wait for the model').to.equal(true);
    expect(() => a.flush()).to.throw(/waiting for the model/);
    // b closes while its window is queued: the model still runs it, then its state goes back.
    b.close();
    while (pool.pending > 0) {
      await pool.run();
      got.push(...a.resume());
    }
    got.push(...a.flush());
    expect(got.map(describeEvent)).to.deep.equal(expected);
    expect(pool.stats.calls).to.be.greaterThan(10);
    a.close();
    expect(pool.stats).to.deep.include({ inUse: 0 });
  });
});
