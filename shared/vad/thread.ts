/**
 * A VAD worker thread (see service.ts): one silero model (an ONNX Runtime
 * session) for all its streams, one segmenter per stream. Receives batches of
 * operations, answers with batched events.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { SileroPool } from './silero.js';
import { Segmenter } from './segmenter.js';
import type { FromThread, ToThread, ToThreadBatch, VadEvent, VadServiceOptions } from './service.js';

const opts = workerData as VadServiceOptions;
const pool = new SileroPool({ modelPath: opts.modelPath, warm: opts.poolWarm, max: opts.poolMax });
let lastStats = 0;

/*
 * Batching: every window that needs silero waits for one model call over all the streams
 * of this thread (SileroModel.run, batch N). The main thread collects frames for up to
 * `batchWaitMs` per message (service.ts); whatever has arrived when the thread gets to it
 * is processed in rounds: each stream runs its segmenter until a window needs the model
 * (the stream is then blocked, and its later operations wait behind it, in order); one
 * model call classifies the waiting windows of all blocked streams; they resume; and so on
 * until every stream has used up its audio. A stream's events keep their order; streams
 * are independent.
 */
/** Queued operations with their audio resolved to buffers. */
type Op = Exclude<ToThread, { op: 'push' }> | { op: 'push'; id: number; pcm: Buffer };

interface Stream {
  seg: Segmenter;
  /** Operations that arrived while the segmenter was blocked, in order. */
  waiting: Op[];
}

const streams = new Map<number, Stream>();
const segOpts = { ...opts, deferred: true };
let inbox: Op[] = [];
let scheduled = false;

parentPort!.on('message', (batch: ToThreadBatch) => {
  for (const m of batch.ops) {
    inbox.push(
      m.op === 'push' ? { op: 'push', id: m.id, pcm: Buffer.from(batch.chunks[m.chunk], m.off, m.len) } : m,
    );
  }
  if (!scheduled) {
    scheduled = true;
    setImmediate(processInbox);
  }
});

function processInbox(): void {
  scheduled = false;
  const ops = inbox;
  inbox = [];
  const out = new Map<number, VadEvent[]>();
  const emit = (id: number, evs: VadEvent[]) => {
    if (evs.length === 0) return;
    const list = out.get(id);
    if (list) for (const e of evs) list.push(e);
    else out.set(id, evs);
  };
  const blocked = new Set<number>();
  /** Applies operations in order until the segmenter blocks; the rest wait. */
  const apply = (id: number, st: Stream): void => {
    while (st.waiting.length > 0 && !st.seg.blocked) {
      const m = st.waiting.shift()!;
      switch (m.op) {
        case 'push':
          emit(id, st.seg.push(m.pcm));
          break;
        case 'flush':
          emit(id, [...st.seg.flush(), { type: 'flushed' }]);
          break;
        case 'configure':
          st.seg.configure(m.settings);
          break;
        case 'close':
          st.seg.close();
          streams.delete(id);
          break;
      }
    }
    if (st.seg.blocked) blocked.add(id);
  };
  for (const m of ops) {
    if (m.op === 'open') {
      const o = m.streamAudio ? { ...segOpts, streamAudio: true } : segOpts;
      streams.set(m.id, { seg: new Segmenter(m.settings, pool, o), waiting: [] });
      continue;
    }
    const st = streams.get(m.id);
    if (!st) {
      if (m.op === 'flush') emit(m.id, [{ type: 'flushed' }]);
      continue;
    }
    st.waiting.push(m);
    if (!blocked.has(m.id)) apply(m.id, st);
  }
  // Rounds: one model call for the waiting windows of all blocked streams.
  while (pool.model.pending > 0) {
    pool.model.run();
    const ids = [...blocked];
    blocked.clear();
    for (const id of ids) {
      const st = streams.get(id);
      if (!st) continue;
      emit(id, st.seg.resume());
      apply(id, st);
    }
  }
  send(out);
}

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
    msg.stats = pool.stats;
  }
  if (msg.events || msg.stats) parentPort!.postMessage(msg, transfer);
}

parentPort!.postMessage({ ready: true, stats: pool.stats } satisfies FromThread);
