/**
 * A VAD worker thread (see service.ts): one VAD model (factory.ts: silero,
 * one ONNX Runtime session) for all its streams, one segmenter per stream, driven in rounds
 * (rounds.ts). Receives batches of operations, answers with batched events.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { loadVad } from './factory.js';
import { SegmentationRounds, type VadEvent } from './rounds.js';
import type { FromThread, ToThreadBatch, VadServiceOptions } from './service.js';

const opts = workerData as VadServiceOptions;
const vad = await loadVad({ modelPath: opts.modelPath, warm: opts.poolWarm, max: opts.poolMax });
let lastStats = 0;

const rounds = new SegmentationRounds(vad, opts, send, (err) => {
  // The thread's streams have lost their state: the main thread ends them (service.ts).
  throw err;
});

parentPort!.on('message', (batch: ToThreadBatch) => {
  for (const m of batch.ops)
    rounds.add(
      m.op === 'push' ? { op: 'push', id: m.id, pcm: Buffer.from(batch.chunks[m.chunk], m.off, m.len) } : m,
    );
});

function send(out: Map<number, VadEvent[]>): void {
  const msg: FromThread = {};
  const transfer: ArrayBuffer[] = [];
  if (out.size > 0) {
    msg.events = [...out.entries()];
    for (const [, evs] of msg.events) {
      for (const ev of evs) {
        if (ev.type !== 'stop' && ev.type !== 'audio') continue;
        // Utterance audio moves to the main thread without a copy when it owns its buffer.
        if (ev.pcm.byteOffset !== 0 || ev.pcm.buffer.byteLength !== ev.pcm.length)
          ev.pcm = Buffer.from(ev.pcm);
        if (ev.pcm.byteOffset === 0 && ev.pcm.buffer.byteLength === ev.pcm.length)
          transfer.push(ev.pcm.buffer as ArrayBuffer);
      }
    }
  }
  const now = Date.now();
  if (now - lastStats > 1000) {
    lastStats = now;
    msg.stats = vad.stats;
  }
  if (msg.events || msg.stats) parentPort!.postMessage(msg, transfer);
}

parentPort!.postMessage({ ready: true, stats: vad.stats } satisfies FromThread);
