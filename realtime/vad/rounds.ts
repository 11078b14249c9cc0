/**
 * Segmentation in rounds over one batched VAD model (vad.ts), wherever it
 * runs (a VAD thread, or inline in the server thread): the operations that
 * have arrived are applied stream by stream until each stream's segmenter
 * needs the model (the stream is then blocked, and its later operations wait
 * behind it, in order); one model call classifies the waiting windows of all
 * blocked streams; they resume; and so on until every stream has used up its
 * audio. A stream's events keep their order; streams are independent. Model
 * calls are asynchronous (silero's go through onnxruntime-node's public API),
 * so each round awaits its call; operations arriving meanwhile go to the next
 * batch.
 */
import {
  Segmenter,
  type SegmenterEvent,
  type SegmenterOptions,
  type SegmenterSettings,
} from './segmenter.js';
import type { Vad } from './vad.js';

export type VadEvent = SegmenterEvent | { type: 'flushed' };

/** One stream's operation, its audio as a buffer. */
export type StreamOp =
  | { op: 'open'; id: number; settings: SegmenterSettings; streamAudio?: boolean }
  | { op: 'push'; id: number; pcm: Buffer }
  | { op: 'flush'; id: number; closing?: boolean }
  | { op: 'verdict'; id: number; pause: number; end: number }
  | { op: 'configure'; id: number; settings: SegmenterSettings }
  | { op: 'close'; id: number };

interface Stream {
  seg: Segmenter;
  /** Operations that arrived while the segmenter was blocked, in order. */
  waiting: StreamOp[];
}

export class SegmentationRounds {
  private readonly streams = new Map<number, Stream>();
  private inbox: StreamOp[] = [];
  private scheduled = false;
  private running = false;

  /**
   * `deliver` gets each batch's events per stream (a `flushed` marker after each flush's
   * own events); `fail` a model failure (the rounds stop).
   */
  constructor(
    private readonly vad: Vad | null,
    private readonly opts: SegmenterOptions,
    private readonly deliver: (events: Map<number, VadEvent[]>) => void,
    private readonly fail: (err: Error) => void,
  ) {}

  /** Queues operations; they are applied at the end of this event-loop turn (or after the running batch). */
  add(op: StreamOp): void {
    this.inbox.push(op);
    if (this.scheduled || this.running) return;
    this.scheduled = true;
    setImmediate(() => void this.process());
  }

  private async process(): Promise<void> {
    this.scheduled = false;
    this.running = true;
    try {
      while (this.inbox.length > 0) {
        const ops = this.inbox;
        this.inbox = [];
        this.deliver(await this.batch(ops));
      }
    } catch (err) {
      this.fail(err instanceof Error ? err : new Error(String(err)));
      return;
    } finally {
      this.running = false;
    }
  }

  private async batch(ops: StreamOp[]): Promise<Map<number, VadEvent[]>> {
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
      // A closing session's flush does not wait for pause verdicts (its drain window is running).
      if (!st.seg.blocked && st.waiting.some((o) => o.op === 'flush' && o.closing))
        emit(id, st.seg.flushWaiting());
      while (st.waiting.length > 0 && !st.seg.blocked && !st.seg.judging) {
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
            this.streams.delete(id);
            break;
        }
      }
      if (st.seg.blocked) blocked.add(id);
      // A stream closed while it waits for a verdict gets none: it ends here.
      if (st.seg.judging && st.waiting.some((o) => o.op === 'close')) {
        st.seg.close();
        this.streams.delete(id);
      }
    };
    for (const m of ops) {
      if (m.op === 'open') {
        const o = m.streamAudio ? { ...this.opts, streamAudio: true } : this.opts;
        this.streams.set(m.id, { seg: new Segmenter(m.settings, this.vad, o), waiting: [] });
        continue;
      }
      const st = this.streams.get(m.id);
      if (!st) {
        if (m.op === 'flush') emit(m.id, [{ type: 'flushed' }]);
        continue;
      }
      // The verdict a stream waits for does not queue behind the audio it holds back (a stream blocked
      // on the model is not waiting for one: it would be a stale answer, ignored either way).
      if (m.op === 'verdict') {
        if (!blocked.has(m.id)) emit(m.id, st.seg.verdict(m.pause, m.end));
      } else {
        st.waiting.push(m);
      }
      if (!blocked.has(m.id)) apply(m.id, st);
    }
    // Rounds: one model call for the waiting windows of all blocked streams.
    while (blocked.size > 0) {
      await this.vad!.run();
      const ids = [...blocked];
      blocked.clear();
      for (const id of ids) {
        const st = this.streams.get(id);
        if (!st) continue;
        emit(id, st.seg.resume());
        apply(id, st);
      }
    }
    return out;
  }
}

/**
 * One segmenter over `pcm`, model calls included (tests and offline tools that
 * drive a single stream): `push` plus the rounds it needs.
 */
export async function pushThrough(seg: Segmenter, vad: Vad, pcm: Buffer): Promise<SegmenterEvent[]> {
  const out = seg.push(pcm);
  while (seg.blocked) {
    await vad.run();
    out.push(...seg.resume());
  }
  return out;
}
