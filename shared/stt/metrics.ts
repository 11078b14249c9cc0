/**
 * Speech engine metrics, for every plane that transcribes in this process
 * (segment requests, batch chunks, realtime utterances): calls by outcome,
 * engine time, audio seconds, and for the remote pool its attempts per
 * worker, fallbacks and worker health.
 */
import { counter, gauge, histogram } from '../metrics/index.js';
import type { TranscribeResult } from './types.js';

const requests = counter(
  'stt_speech_requests_total',
  'Transcriptions by engine and outcome (ok or error code).',
  ['engine', 'outcome'],
);
const engineSeconds = histogram(
  'stt_speech_engine_seconds',
  'Engine time per transcription (decode time, or the answering attempt for the remote pool).',
  [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
  ['engine'],
);
const audioSeconds = counter('stt_speech_audio_seconds_total', 'Audio seconds transcribed, by engine.', [
  'engine',
]);
export const attempts = counter(
  'stt_speech_worker_attempts_total',
  'Remote pool attempts by worker id and outcome (ok, failed, refused).',
  ['worker', 'outcome'],
);
export const fallbacks = counter(
  'stt_speech_fallbacks_total',
  'Remote transcriptions answered by a fallback worker.',
);
export const workerHealthy = gauge(
  'stt_speech_worker_healthy',
  '1 when a remote worker passes its health check.',
  ['worker'],
);

const KNOWN_CODES = new Set([
  'transcription_failed',
  'unsupported_language',
  'unknown_worker',
  'timeout',
  'aborted',
  'engine_overloaded',
  'audio_too_long',
]);

/** Runs one transcription and records its outcome. */
export async function measured(
  engine: 'builtin' | 'remote',
  audio: number,
  run: () => Promise<TranscribeResult>,
): Promise<TranscribeResult> {
  try {
    const r = await run();
    requests.inc({ engine, outcome: 'ok' });
    engineSeconds.observe({ engine }, r.engineMs / 1000);
    audioSeconds.inc({ engine }, audio);
    if (r.fallbackUsed) fallbacks.inc();
    return r;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    requests.inc({ engine, outcome: typeof code === 'string' && KNOWN_CODES.has(code) ? code : 'other' });
    throw err;
  }
}
