/**
 * Batch benchmark, end to end on real Postgres, pg-boss and PocketSphinx:
 *
 * 1. A 30-minute recording (the test clips repeated with pauses) runs as one
 *    job at concurrency 1 (1 decoder thread) and at concurrency 2 (2 decoder
 *    threads): wall time, engine decode time, workflow overhead and speed-up.
 * 2. Word error rate of the batch transcript against the references, next to
 *    the WER of decoding each clip whole (the engine on the unsliced clip).
 *
 * Usage: npx tsx test/bench/batch/e2e.ts [minutes=30] [segment_seconds=300] [rounds=1]
 * With rounds > 1 the two runs alternate that many times and the fastest of
 * each is compared (the machine may be shared with other work).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { createSpeechEngine } from '../../../shared/stt/index.js';
import { canonicalWavSamples } from '../../../shared/audio/index.js';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import {
  audioDir,
  buildRecording,
  createBatchTestApp,
  issueKey,
  REFS,
  startFileServer,
  tmpDir,
  waitFor,
} from '../../batch/helpers.js';

const minutes = Number(process.argv[2] ?? 30);
const segmentSeconds = Number(process.argv[3] ?? 300);
const rounds = Math.max(1, Number(process.argv[4] ?? 1));
const CLIPS = Object.keys(REFS);

function words(s: string): string[] {
  return s
    .toLowerCase()
    .replace(/[^a-z0-9' ]+/g, ' ')
    .split(/\s+/)
    .filter(Boolean);
}

function editDistance(a: string[], b: string[]): number {
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++)
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length];
}

function wer(hyp: string, ref: string): number {
  const r = words(ref);
  return editDistance(words(hyp), r) / r.length;
}

/** Decodes each clip whole with the engine: the reference point for sliced decoding. */
async function wholeClipWer(): Promise<{ wer: number; texts: Record<string, string> }> {
  const config = loadConfig({ STT_THREADS: '2', LOG_LEVEL: 'warn' });
  const engine = createSpeechEngine(config, createLogger({ level: 'warn' }));
  await engine.ready();
  const texts: Record<string, string> = {};
  for (const c of CLIPS) {
    const pcm = canonicalWavSamples(fs.readFileSync(path.join(audioDir, c)))!;
    texts[c] = (await engine.transcribe({ pcm })).text;
  }
  await engine.close();
  const hyp = CLIPS.map((c) => texts[c]).join(' ');
  return { wer: wer(hyp, CLIPS.map((c) => REFS[c]).join(' ')), texts };
}

async function runJob(
  label: string,
  wav: string,
  concurrency: number,
  threads: number,
  segment = segmentSeconds,
) {
  const dir = path.dirname(wav);
  const files = await startFileServer(dir);
  const t = await createBatchTestApp({ STT_THREADS: String(threads), LOG_LEVEL: 'warn' }, { start: true });
  try {
    const key = (await issueKey(t, { ownerId: 'bench', plan: 'pro' })).key;
    const t0 = Date.now();
    const sub = await request(t.server)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({ audio_url: `${files.url}/${path.basename(wav)}`, segment_seconds: segment, concurrency });
    const done = await waitFor(
      async () => {
        const r = await request(t.server)
          .get(`/v1/audio/transcriptions/jobs/${sub.body.workflow_id}`)
          .set('authorization', `Bearer ${key}`);
        return r.body.status === 'complete' || r.body.status === 'errored' ? r : undefined;
      },
      3 * 3600_000,
      250,
    );
    const endToEndMs = Date.now() - t0;
    if (done.body.status !== 'complete') throw new Error(`${label}: ${JSON.stringify(done.body.error)}`);
    const out = done.body.output;
    const engineMs = out.report.engine_ms as number;
    const steps = done.body.steps as { name: string; started_at: string; ended_at: string }[];
    const span = (n: string) => {
      const s = steps.find((x) => x.name === n);
      return s ? new Date(s.ended_at).getTime() - new Date(s.started_at).getTime() : 0;
    };
    const res = {
      label,
      concurrency,
      threads,
      audio_s: out.probe.duration_seconds as number,
      chunks: out.report.chunk_count as number,
      end_to_end_ms: endToEndMs,
      engine_ms: engineMs,
      probe_ms: span('probe'),
      slice_ms: span('slice'),
      aggregate_ms: span('aggregate'),
      text: out.result.text as string,
    };
    return res;
  } finally {
    await t.close();
    await files.close();
  }
}

const dir = tmpDir('bench-batch-');
// One pass over the six clips is ~49.7 s of speech plus pauses.
const passes = Math.max(1, Math.round((minutes * 60) / (49.7 + CLIPS.length * 0.7)));
const sequence = Array.from({ length: passes }, () => CLIPS).flat();
const wav = buildRecording(path.join(dir, 'long.wav'), sequence, 0.7);
const refText = sequence.map((c) => REFS[c]).join(' ');
console.log(
  `recording: ${passes} passes over ${CLIPS.length} clips, ${(fs.statSync(wav).size / 32000 / 60).toFixed(1)} min`,
);

const whole = await wholeClipWer();
console.log(`WER decoding each clip whole: ${(whole.wer * 100).toFixed(2)}%`);

const c1s: Awaited<ReturnType<typeof runJob>>[] = [];
const c2s: Awaited<ReturnType<typeof runJob>>[] = [];
for (let r = 0; r < rounds; r++) {
  c1s.push(await runJob('concurrency 1', wav, 1, 1));
  c2s.push(await runJob('concurrency 2', wav, 2, 2));
  if (rounds > 1) {
    const [a, b] = [c1s[r], c2s[r]];
    console.log(
      `round ${r + 1}: concurrency 1 ${(a.end_to_end_ms / 1000).toFixed(1)} s, concurrency 2 ${(b.end_to_end_ms / 1000).toFixed(1)} s, speed-up ${(a.end_to_end_ms / b.end_to_end_ms).toFixed(2)}x`,
    );
  }
}
const fastest = (xs: typeof c1s) => xs.reduce((a, b) => (b.end_to_end_ms < a.end_to_end_ms ? b : a));
const c1 = fastest(c1s);
const c2 = fastest(c2s);
const c1Wer = wer(c1.text, refText);
const overhead1 = c1.end_to_end_ms / c1.engine_ms - 1;
console.log(
  `concurrency 1 (1 decoder): ${c1.chunks} chunks, end to end ${(c1.end_to_end_ms / 1000).toFixed(1)} s, engine ${(c1.engine_ms / 1000).toFixed(1)} s, ` +
    `overhead ${(overhead1 * 100).toFixed(2)}% (probe ${c1.probe_ms} ms, slice ${c1.slice_ms} ms, aggregate ${c1.aggregate_ms} ms), RTF ${(c1.end_to_end_ms / 1000 / c1.audio_s).toFixed(3)}`,
);
console.log(
  `WER batch (sliced at pauses, segment_seconds ${segmentSeconds}): ${(c1Wer * 100).toFixed(2)}% (whole clips ${(whole.wer * 100).toFixed(2)}%, delta ${((c1Wer - whole.wer) * 100).toFixed(2)} points)`,
);
console.log(
  `concurrency 2 (2 decoders): end to end ${(c2.end_to_end_ms / 1000).toFixed(1)} s, engine ${(c2.engine_ms / 1000).toFixed(1)} s, ` +
    `speed-up over concurrency 1: ${(c1.end_to_end_ms / c2.end_to_end_ms).toFixed(2)}x${rounds > 1 ? ` (fastest of ${rounds} each)` : ''}, ` +
    `decoders busy on average ${(c2.engine_ms / c2.end_to_end_ms).toFixed(2)} of 2`,
);
console.log(
  `load average at the end: ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')} on ${os.availableParallelism()} cores`,
);
console.log(`transcripts identical at both concurrencies: ${c1.text === c2.text}`);
fs.rmSync(dir, { recursive: true, force: true });
process.exit(0);
