/**
 * A VAD worker thread (see service.ts): its own silero pool and one segmenter
 * per stream. Receives batches of operations, answers with batched events.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { SileroPool } from './silero.js';
import { Segmenter } from './segmenter.js';
import type { FromThread, ToThread, ToThreadBatch, VadEvent, VadServiceOptions } from './service.js';

const opts = workerData as VadServiceOptions;
const pool = new SileroPool({ modelPath: opts.modelPath, warm: opts.poolWarm, max: opts.poolMax });
const streams = new Map<number, Segmenter>();
let lastStats = 0;

/*
 * Messages that arrive while the thread is busy are processed together, grouped by stream:
 * running one silero instance on several consecutive windows keeps its weights in cache
 * (measured: 100 instances visited 3 windows at a time cost 1.5x more per window than 9 at a
 * time). Order within a stream is kept; streams are independent. When the thread keeps up,
 * nothing waits: a batch is processed on the next turn of its loop.
 */
/** Queued operations with their audio resolved to buffers. */
type Op = Exclude<ToThread, { op: 'push' }> | { op: 'push'; id: number; pcm: Buffer };
let inbox: Op[] = [];
let scheduled = false;

parentPort!.on('message', (batch: ToThreadBatch) => {
  for (const m of batch.ops) {
    inbox.push(m.op === 'push' ? { op: 'push', id: m.id, pcm: Buffer.from(batch.chunks[m.chunk], m.off, m.len) } : m);
  }
  if (!scheduled) {
    scheduled = true;
    setImmediate(processInbox);
  }
});

function processInbox(): void {
  scheduled = false;
  const byStream = new Map<number, Op[]>();
  for (const m of inbox) {
    const list = byStream.get(m.id);
    if (list) list.push(m);
    else byStream.set(m.id, [m]);
  }
  inbox = [];
  const batch: Op[] = [];
  for (const list of byStream.values()) for (const m of list) batch.push(m);
  const out = new Map<number, VadEvent[]>();
  const emit = (id: number, evs: VadEvent[]) => {
    if (evs.length === 0) return;
    const list = out.get(id);
    if (list) list.push(...evs);
    else out.set(id, [...evs]);
  };
  for (const m of batch) {
    switch (m.op) {
      case 'open':
        streams.set(m.id, new Segmenter(m.settings, pool, opts));
        break;
      case 'push': {
        const seg = streams.get(m.id);
        if (seg) emit(m.id, seg.push(m.pcm));
        break;
      }
      case 'flush': {
        const seg = streams.get(m.id);
        emit(m.id, [...(seg ? seg.flush() : []), { type: 'flushed' }]);
        break;
      }
      case 'configure':
        streams.get(m.id)?.configure(m.settings);
        break;
      case 'close':
        streams.get(m.id)?.close();
        streams.delete(m.id);
        break;
    }
  }
  const msg: FromThread = {};
  const transfer: ArrayBuffer[] = [];
  if (out.size > 0) {
    msg.events = [...out.entries()];
    for (const [, evs] of msg.events) {
      for (const ev of evs) {
        if (ev.type !== 'stop') continue;
        // Utterance audio moves to the main thread without a copy when it owns its buffer.
        if (ev.pcm.byteOffset !== 0 || ev.pcm.buffer.byteLength !== ev.pcm.length) ev.pcm = Buffer.from(ev.pcm);
        if (ev.pcm.byteOffset === 0 && ev.pcm.buffer.byteLength === ev.pcm.length) transfer.push(ev.pcm.buffer as ArrayBuffer);
      }
    }
  }
  const now = Date.now();
  if (now - lastStats > 1000) {
    lastStats = now;
    msg.stats = pool.stats;
  }
  if (msg.events || msg.stats) parentPort!.postMessage(msg, transfer);
}

parentPort!.postMessage({ ready: true, stats: pool.stats } satisfies FromThread);
