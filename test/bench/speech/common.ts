/** Small helpers shared by the speech benchmarks. */
import fs from 'node:fs';
import { canonicalWavSamples } from '../../../shared/audio/index.js';
import type { SpeechStream } from '../../../shared/stt/types.js';
import { silence } from '../../realtime/helpers.js';

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export function pcmOfWav(file: string): Buffer {
  const pcm = canonicalWavSamples(fs.readFileSync(file));
  if (!pcm) throw new Error(`${file} is not 16 kHz mono PCM16`);
  return pcm;
}

export const fmt = (x: number, digits = 1) => x.toFixed(digits);

/** POSTs one clip to a transcription endpoint; returns status, client time and engine time. */
export async function postClip(
  baseUrl: string,
  key: string,
  wav: Buffer,
  fields: Record<string, string> = {},
): Promise<{ status: number; ms: number; engineMs: number; body: string }> {
  const form = new FormData();
  form.append('file', new Blob([wav as Uint8Array<ArrayBuffer>], { type: 'audio/wav' }), 'clip.wav');
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  const started = performance.now();
  const res = await fetch(`${baseUrl}/v1/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
  const body = await res.text();
  return {
    status: res.status,
    ms: performance.now() - started,
    engineMs: Number(res.headers.get('x-engine-ms') ?? NaN),
    body,
  };
}

/** Makes the engine load `n` streaming decoders: one stream each, all with an utterance of silence open at once. */
export async function loadStreamingDecoders(
  engine: { openStream(): SpeechStream },
  n: number,
): Promise<void> {
  const streams = Array.from({ length: n }, () => engine.openStream());
  const utts = streams.map((s) => s.begin({})!);
  for (const u of utts) u.push(silence(200));
  await Promise.all(utts.map((u) => u.finish()));
  for (const s of streams) s.close();
}
