/**
 * The speech engine in a worker thread (see threadedEngine.ts): with a remote
 * worker pool, each utterance is a multipart HTTP request whose encoding and
 * parsing cost a few ms of CPU; here that work stays off the WebSocket loop.
 */
import { parentPort } from 'node:worker_threads';
import { loadConfig } from '../shared/config/index.js';
import { createLogger } from '../shared/logger.js';
import { createSpeechEngine } from '../shared/stt/index.js';

export type ToEngine =
  | {
      t: 'tx';
      id: number;
      pcm: Uint8Array;
      language?: string;
      prompt?: string;
      model?: string;
      workerId?: string;
    }
  | { t: 'abort'; id: number }
  | { t: 'health'; id: number };

export type FromEngine =
  | { t: 'ready'; languages: string[] }
  | { t: 'done'; id: number; result?: unknown; error?: { message: string; code: string; retryable: boolean } }
  | { t: 'health'; id: number; healthy: boolean };

const config = loadConfig();
const logger = createLogger({ level: config.logLevel, name: 'realtime' });
const engine = createSpeechEngine(config, logger);
const aborts = new Map<number, AbortController>();

parentPort!.on('message', (m: ToEngine) => {
  if (m.t === 'abort') {
    aborts.get(m.id)?.abort(new Error('aborted by the session'));
    return;
  }
  if (m.t === 'health') {
    void engine.healthy().then(
      (healthy) => parentPort!.postMessage({ t: 'health', id: m.id, healthy } satisfies FromEngine),
      () => parentPort!.postMessage({ t: 'health', id: m.id, healthy: false } satisfies FromEngine),
    );
    return;
  }
  const ac = new AbortController();
  aborts.set(m.id, ac);
  engine
    .transcribe({
      pcm: Buffer.from(m.pcm.buffer, m.pcm.byteOffset, m.pcm.byteLength),
      language: m.language,
      prompt: m.prompt,
      model: m.model,
      workerId: m.workerId,
      signal: ac.signal,
    })
    .then(
      (result) => parentPort!.postMessage({ t: 'done', id: m.id, result } satisfies FromEngine),
      (err: Error & { code?: string; retryable?: boolean }) =>
        parentPort!.postMessage({
          t: 'done',
          id: m.id,
          error: {
            message: err.message,
            code: err.code ?? 'transcription_failed',
            retryable: err.retryable ?? true,
          },
        } satisfies FromEngine),
    )
    .finally(() => aborts.delete(m.id));
});

await engine.ready();
parentPort!.postMessage({ t: 'ready', languages: engine.languages() } satisfies FromEngine);
