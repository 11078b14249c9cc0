/**
 * Where segmentation runs. A realtime session opens a `VadStream`, pushes
 * audio and receives segmenter events through a callback:
 *
 * - `InlineVad`: segmenters and the VAD model (factory.ts) in the calling
 *   thread, in rounds at the end of each event-loop turn (tests, small
 *   deployments).
 * - `ThreadedVad`: the same rounds with one batched VAD model per worker thread,
 *   streams spread over the threads; frames are collected for up to
 *   `batchWaitMs` into one message per thread, events come back batched. The
 *   main thread (the WebSocket server's event loop) then only moves bytes, so
 *   its latency stays low while the model runs on the other cores; the wait
 *   lets the thread classify many streams' windows per model call.
 *
 * After each `flush()` the stream delivers a `{type: 'flushed'}` marker once
 * the flush's own events have been delivered.
 */
import type { Worker } from 'node:worker_threads';
import { startThread } from '../../shared/workerThread.js';
import { loadVad } from './factory.js';
import type { PoolStats, Vad } from './vad.js';
import { WINDOW_BYTES, type SegmenterOptions, type SegmenterSettings } from './segmenter.js';
import { SegmentationRounds, type VadEvent } from './rounds.js';

export type { VadEvent };

export interface VadStream {
  push(pcm: Buffer): void;
  /** `closing`: the session is closing (a drain): the flush does not wait for pause verdicts. */
  flush(closing?: boolean): void;
  /** Answers a `pause` event: the silence (ms) after which the utterance ends (Segmenter.verdict); the stream waits for it. */
  verdict(pause: number, end: number): void;
  configure(settings: SegmenterSettings): void;
  close(): void;
}

export interface VadStats {
  mode: 'inline' | 'threads';
  streams: number;
  threads: number;
  models: PoolStats;
}

/** Per stream: `streamAudio` sends an open utterance's audio as it is spoken (segmenter.ts). */
export interface VadStreamOptions {
  streamAudio?: boolean;
}

/** Where a stream's events go, in batches. */
export type VadEventSink = (events: VadEvent[]) => void;

export interface VadService {
  open(settings: SegmenterSettings, onEvents: VadEventSink, opts?: VadStreamOptions): VadStream;
  stats(): VadStats;
  close(): Promise<void>;
  /** Registers a listener for a fatal failure (a crashed VAD thread). */
  onFailure?(fn: (err: Error) => void): void;
  readonly healthy?: boolean;
}

export interface VadServiceOptions extends SegmenterOptions {
  modelPath: string;
  poolWarm: number;
  poolMax: number;
  /**
   * VAD threads: how long arriving audio may wait before it is sent to its
   * thread, so that the windows of many streams share one model call (0 = at
   * the end of each event-loop turn).
   */
  batchWaitMs: number;
  /** ... unless this many windows of audio are already waiting. */
  batchWindows: number;
}

export class InlineVad implements VadService {
  private streams = 0;
  private nextId = 1;
  private readonly handlers = new Map<number, VadEventSink>();
  private readonly rounds: SegmentationRounds;
  private failed: Error | null = null;
  private readonly failureListeners: ((err: Error) => void)[] = [];

  constructor(
    private readonly vad: Vad | null,
    opts: SegmenterOptions,
  ) {
    this.rounds = new SegmentationRounds(
      vad,
      opts,
      (out) => {
        for (const [id, evs] of out) this.handlers.get(id)?.(evs);
      },
      (err) => {
        this.failed = err;
        for (const fn of this.failureListeners) fn(err);
      },
    );
  }

  onFailure(fn: (err: Error) => void): void {
    this.failureListeners.push(fn);
    if (this.failed) fn(this.failed);
  }

  get healthy(): boolean {
    return !this.failed;
  }

  open(settings: SegmenterSettings, onEvents: VadEventSink, opts: VadStreamOptions = {}): VadStream {
    const id = this.nextId++;
    this.streams++;
    this.handlers.set(id, onEvents);
    this.rounds.add({ op: 'open', id, settings, streamAudio: opts.streamAudio });
    let closed = false;
    return {
      // Copied now (the caller's bytes, a uWS ArrayBuffer, are only valid during its callback).
      push: (pcm) => !closed && this.rounds.add({ op: 'push', id, pcm: Buffer.from(pcm) }),
      flush: (closing) => !closed && this.rounds.add({ op: 'flush', id, closing }),
      verdict: (pause, end) => !closed && this.rounds.add({ op: 'verdict', id, pause, end }),
      configure: (s) => !closed && this.rounds.add({ op: 'configure', id, settings: s }),
      close: () => {
        if (closed) return;
        closed = true;
        this.streams--;
        this.handlers.delete(id);
        this.rounds.add({ op: 'close', id });
      },
    };
  }

  stats(): VadStats {
    return {
      mode: 'inline',
      streams: this.streams,
      threads: 0,
      models: this.vad?.stats ?? { created: 0, inUse: 0, idle: 0, calls: 0, windows: 0 },
    };
  }

  async close(): Promise<void> {}
}

// ---- threads ---------------------------------------------------------------------------------

export type ToThread =
  | { op: 'open'; id: number; settings: SegmenterSettings; streamAudio?: boolean }
  /** Audio bytes at `off`..`off+len` of the message's chunk number `chunk`. */
  | { op: 'push'; id: number; chunk: number; off: number; len: number }
  | { op: 'flush'; id: number; closing?: boolean }
  | { op: 'verdict'; id: number; pause: number; end: number }
  | { op: 'configure'; id: number; settings: SegmenterSettings }
  | { op: 'close'; id: number };

/** One message per thread per batch: operations plus the audio they point into. */
export interface ToThreadBatch {
  ops: ToThread[];
  chunks: ArrayBuffer[];
}

export interface FromThread {
  events?: [number, VadEvent[]][];
  stats?: PoolStats;
  ready?: boolean;
}

const STAGE_BYTES = 64 * 1024;

interface Lane {
  worker: Worker;
  outbox: ToThread[];
  /** Audio of the batch's frames, copied into few large buffers (one allocation per 64 KiB, not per frame). */
  chunks: ArrayBuffer[];
  stage: Buffer | null;
  staged: number;
  /** Audio bytes in the outbox. */
  audioBytes: number;
  streams: number;
  models: PoolStats;
}

export class ThreadedVad implements VadService {
  private readonly lanes: Lane[] = [];
  private readonly handlers = new Map<number, VadEventSink>();
  private nextId = 1;
  private immediate = false;
  private timer: NodeJS.Timeout | null = null;
  private waitMs = 0;
  private batchBytes = Infinity;
  private closed = false;
  private failed: Error | null = null;
  private readonly failureListeners: ((err: Error) => void)[] = [];

  private constructor() {}

  /** Called once if a VAD thread crashes; the service is unusable afterwards. */
  onFailure(fn: (err: Error) => void): void {
    this.failureListeners.push(fn);
    if (this.failed) fn(this.failed);
  }

  get healthy(): boolean {
    return !this.failed && !this.closed;
  }

  private fail(err: Error): void {
    if (this.failed) return;
    this.failed = err;
    for (const fn of this.failureListeners) fn(err);
  }

  static async start(threads: number, opts: VadServiceOptions): Promise<ThreadedVad> {
    const vad = new ThreadedVad();
    vad.waitMs = opts.batchWaitMs;
    vad.batchBytes = opts.batchWindows * WINDOW_BYTES;
    const perThread = {
      ...opts,
      poolWarm: Math.ceil(opts.poolWarm / threads),
      poolMax: Math.ceil(opts.poolMax / threads),
    };
    await Promise.all(
      Array.from({ length: threads }, async () => {
        const worker = startThread(import.meta.url, './thread', perThread);
        const lane: Lane = {
          worker,
          outbox: [],
          chunks: [],
          stage: null,
          staged: 0,
          audioBytes: 0,
          streams: 0,
          models: { created: 0, inUse: 0, idle: 0, calls: 0, windows: 0 },
        };
        await new Promise<void>((resolve, reject) => {
          worker.once('error', reject);
          worker.on('message', (m: FromThread) => {
            if (m.ready) resolve();
            if (m.stats) lane.models = m.stats;
            if (m.events) vad.deliver(m.events);
          });
        });
        // A VAD thread that dies takes its streams' state with it: report it once, loudly.
        worker.on('error', (err) => vad.fail(err));
        worker.on('exit', (code) => {
          if (!vad.closed) vad.fail(new Error(`VAD thread exited with code ${code}`));
        });
        worker.unref();
        vad.lanes.push(lane);
      }),
    );
    return vad;
  }

  private deliver(items: [number, VadEvent[]][]): void {
    for (const [id, evs] of items) {
      for (const ev of evs)
        if (ev.type === 'stop' || ev.type === 'audio')
          ev.pcm = Buffer.from(ev.pcm.buffer, ev.pcm.byteOffset, ev.pcm.byteLength);
      this.handlers.get(id)?.(evs);
    }
  }

  /**
   * Queues an operation for the lane's thread. Audio waits up to `batchWaitMs`, so that a
   * thread gets many streams' frames per message (and per model call); a flush, or a lane
   * with `batchWindows` of audio waiting, goes at the end of the current event-loop turn.
   */
  private send(lane: Lane, msg: ToThread, now = false): void {
    lane.outbox.push(msg);
    if (msg.op === 'push') lane.audioBytes += msg.len;
    if (this.immediate) return;
    if (now || this.waitMs <= 0 || lane.audioBytes >= this.batchBytes) {
      this.immediate = true;
      setImmediate(() => this.drain());
    } else if (!this.timer) {
      this.timer = setTimeout(() => this.drain(), this.waitMs);
      this.timer.unref();
    }
  }

  private drain(): void {
    this.immediate = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const lane of this.lanes) {
      if (lane.outbox.length === 0) continue;
      const batch: ToThreadBatch = { ops: lane.outbox, chunks: lane.chunks };
      lane.outbox = [];
      lane.chunks = [];
      lane.stage = null;
      lane.staged = 0;
      lane.audioBytes = 0;
      lane.worker.postMessage(batch, batch.chunks);
    }
  }

  open(settings: SegmenterSettings, onEvents: VadEventSink, opts: VadStreamOptions = {}): VadStream {
    const id = this.nextId++;
    const lane = this.lanes.reduce((a, b) => (b.streams < a.streams ? b : a));
    lane.streams++;
    this.handlers.set(id, onEvents);
    this.send(lane, { op: 'open', id, settings, streamAudio: opts.streamAudio });
    let closed = false;
    return {
      push: (pcm) => {
        if (closed) return;
        // Copied now (the caller's bytes, a uWS ArrayBuffer, are only valid during its callback).
        if (!lane.stage || lane.staged + pcm.length > lane.stage.length) {
          lane.stage = Buffer.allocUnsafeSlow(Math.max(STAGE_BYTES, pcm.length));
          lane.chunks.push(lane.stage.buffer as ArrayBuffer);
          lane.staged = 0;
        }
        pcm.copy(lane.stage, lane.staged);
        this.send(lane, { op: 'push', id, chunk: lane.chunks.length - 1, off: lane.staged, len: pcm.length });
        lane.staged += pcm.length;
      },
      // A flush answers a client waiting for its transcript: no batching delay.
      flush: (closing) => !closed && this.send(lane, { op: 'flush', id, closing }, true),
      // The stream waits for it.
      verdict: (pause, end) => !closed && this.send(lane, { op: 'verdict', id, pause, end }, true),
      configure: (s) => !closed && this.send(lane, { op: 'configure', id, settings: s }),
      close: () => {
        if (closed) return;
        closed = true;
        lane.streams--;
        this.handlers.delete(id);
        this.send(lane, { op: 'close', id });
      },
    };
  }

  stats(): VadStats {
    const models: PoolStats = { created: 0, inUse: 0, idle: 0, calls: 0, windows: 0 };
    for (const l of this.lanes)
      for (const k of Object.keys(models) as (keyof PoolStats)[]) models[k] += l.models[k];
    return { mode: 'threads', streams: this.handlers.size, threads: this.lanes.length, models };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await Promise.all(this.lanes.map((l) => l.worker.terminate()));
  }
}

/** Inline when `threads` is 0, worker threads otherwise. */
export async function createVadService(threads: number, opts: VadServiceOptions): Promise<VadService> {
  if (threads <= 0) {
    return new InlineVad(
      await loadVad({ modelPath: opts.modelPath, warm: opts.poolWarm, max: opts.poolMax }),
      opts,
    );
  }
  return ThreadedVad.start(threads, opts);
}
