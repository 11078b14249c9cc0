/**
 * The built-in engine's streaming form: worker threads each owning a bounded
 * number of PocketSphinx decoders (`STT_STREAM_DECODERS` in all, the memory
 * bound). Every realtime session is homed on one thread, which keeps the
 * session's feature-normalisation estimate (cmn.ts); its utterances are fed
 * there frame by frame while they are spoken. When the home thread has no
 * free decoder, `begin()` answers null and the session uses the clip form.
 */
import type { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { SpeechConfig } from '../config/speech.js';
import { FRAME_SECONDS, gridSkip, SAMPLE_RATE, type RecognizedWord } from './pocketsphinx/decoder.js';
import type { FromStreamThread, StreamThreadData, ToStreamThread } from './pocketsphinx/streamThread.js';
import { normalizeLanguage } from './language.js';
import { buildTranscript } from './transcript.js';
import { startThread } from '../workerThread.js';
import { respell, specFor, type BiasSpec, type PromptBias } from './bias/index.js';
import {
  EngineBusyError,
  SpeechError,
  type SentenceEndCues,
  type SpeechStream,
  type StreamingUtterance,
  type TranscribeResult,
} from './types.js';

interface Pending {
  resolve: (r: { words: RecognizedWord[]; decodeMs: number }) => void;
  reject: (e: Error) => void;
}

interface Lane {
  index: number;
  worker: Worker;
  ready: boolean;
  exited: boolean;
  /**
   * Decoders this thread may hold, and those in use: one per session with an
   * utterance open or finishing. A session's next utterance reuses its decoder
   * (the thread ends one utterance before it begins the next).
   */
  slots: number;
  busy: number;
  streams: number;
  pending: Map<number, Pending>;
  /** Sentence-end questions waiting for their answer. */
  questions: Map<number, (cues: SentenceEndCues) => void>;
}

export interface StreamingStats {
  threads: number;
  decoders: number;
  busy: number;
  streams: number;
  /** Utterances that found no free decoder (clip form instead), since start. */
  fallbacks: number;
}

const RESTART_DELAY_MS = 1000;
/** The answer of a decoder that cannot say (gone, or the utterance is over). */
const NO_CUES: SentenceEndCues = { probability: 0, order: 0, words: [] };
/** How long close() lets a thread finish its queue before stopping it. */
const CLOSE_GRACE_MS = 1000;

export class StreamingPool {
  private readonly lanes: Lane[] = [];
  private nextUtt = 1;
  private nextStream = 1;
  private nextQuestion = 1;
  private closed = false;
  private fallbacks = 0;

  constructor(
    private readonly cfg: SpeechConfig['builtin'],
    private readonly log: Logger,
    private readonly bias?: PromptBias,
  ) {
    const threads = Math.min(cfg.streamThreads, cfg.streamDecoders);
    for (let i = 0; i < threads; i++) {
      // The bound is spread over the threads (the first ones take the remainder).
      const slots = Math.floor(cfg.streamDecoders / threads) + (i < cfg.streamDecoders % threads ? 1 : 0);
      this.spawn(i, slots);
    }
  }

  /** Resolves when every thread has loaded its first decoders (or, for one that failed, stopped trying). */
  async ready(): Promise<void> {
    while (!this.closed && this.lanes.some((l) => !l.ready && !l.exited))
      await new Promise((r) => setTimeout(r, 20));
  }

  stats(): StreamingStats {
    const sum = (f: (l: Lane) => number) => this.lanes.reduce((n, l) => n + f(l), 0);
    return {
      threads: this.lanes.length,
      decoders: sum((l) => l.slots),
      busy: sum((l) => l.busy),
      streams: sum((l) => l.streams),
      fallbacks: this.fallbacks,
    };
  }

  private spawn(index: number, slots: number): void {
    const data: StreamThreadData = {
      hmm: this.cfg.hmm,
      lm: this.cfg.lm,
      dict: this.bias?.files.dict ?? this.cfg.dict,
      extras: this.bias?.files.extras,
      pocketsphinxLibrary: this.cfg.pocketsphinxLibrary,
      sphinxbaseLibrary: this.cfg.sphinxbaseLibrary,
      extraArgs: [...this.cfg.extraArgs, ...this.cfg.streamExtraArgs],
      sessionCmn: this.cfg.streamCmn,
      warm: Math.min(2, slots),
    };
    const worker = startThread(import.meta.url, './pocketsphinx/streamThread', data);
    const lane: Lane = {
      index,
      worker,
      ready: false,
      exited: false,
      slots,
      busy: 0,
      streams: this.lanes[index]?.streams ?? 0,
      pending: new Map(),
      questions: new Map(),
    };
    this.lanes[index] = lane;
    worker.on('message', (m: FromStreamThread) => {
      if (m.type === 'ready') {
        lane.ready = true;
        return;
      }
      if (m.type === 'sentenceEnd') {
        lane.questions.get(m.req)?.(m.cues);
        lane.questions.delete(m.req);
        return;
      }
      const p = lane.pending.get(m.utt);
      if (!p) return;
      lane.pending.delete(m.utt);
      if (m.type === 'result') p.resolve({ words: m.words, decodeMs: m.decodeMs });
      else p.reject(new SpeechError(`Decoder error: ${m.message}`, 'transcription_failed'));
    });
    worker.on('error', (err) => this.log.error({ err, thread: index }, 'streaming speech thread failed'));
    worker.on('exit', (code) => {
      lane.ready = false;
      lane.exited = true;
      for (const p of lane.pending.values())
        p.reject(new SpeechError('The speech decoder stopped unexpectedly.', 'transcription_failed'));
      lane.pending.clear();
      for (const answer of lane.questions.values()) answer(NO_CUES);
      lane.questions.clear();
      if (this.closed) return;
      this.log.error({ thread: index, code }, 'streaming speech thread exited; restarting');
      setTimeout(() => !this.closed && this.spawn(index, slots), RESTART_DELAY_MS).unref();
    });
  }

  /** A session's stream, homed on the thread with the fewest sessions. */
  open(): SpeechStream {
    const lane = this.lanes.reduce((a, b) => (b.streams < a.streams ? b : a));
    lane.streams++;
    const stream = { id: this.nextStream++, active: 0 };
    let closed = false;
    return {
      begin: (opts) => {
        const language = normalizeLanguage(opts.language);
        if (closed || this.closed || (language && language !== 'en')) return null;
        // Messages wait in the thread's queue while its decoder loads; a thread that died is being replaced.
        const home = this.lanes[lane.index];
        if (home.exited || (stream.active === 0 && home.busy >= home.slots)) {
          this.fallbacks++;
          return null;
        }
        const bias = specFor(this.bias, opts.prompt, opts.vocabulary);
        return this.begin(home, stream, gridSkip(opts.streamPosition), bias);
      },
      close: () => {
        if (closed) return;
        closed = true;
        const home = this.lanes[lane.index];
        home.streams--;
        this.post(home, { type: 'forget', stream: stream.id });
      },
    };
  }

  private post(lane: Lane, m: ToStreamThread, transfer: ArrayBuffer[] = []): void {
    if (!lane.exited) lane.worker.postMessage(m, transfer);
  }

  private begin(
    lane: Lane,
    stream: { id: number; active: number },
    skip: number,
    bias: BiasSpec | undefined,
  ): StreamingUtterance {
    const utt = this.nextUtt++;
    /** Bytes still to drop from the front (the utterance aligned to the stream's frame grid). */
    let toSkip = skip * 2;
    if (stream.active++ === 0) lane.busy++;
    let bytes = 0;
    let state: 'open' | 'finishing' | 'done' = 'open';
    const done = () => {
      if (state === 'done') return;
      state = 'done';
      if (--stream.active === 0) lane.busy--;
    };
    this.post(lane, { type: 'begin', utt, stream: stream.id, bias });
    return {
      push: (whole) => {
        const pcm = toSkip > 0 ? whole.subarray(Math.min(toSkip, whole.length)) : whole;
        toSkip -= whole.length - pcm.length;
        if (state !== 'open' || pcm.length < 2) return;
        // Copied into a transferable buffer (the caller's may be a view on a pooled slab).
        const copy = new ArrayBuffer(pcm.length - (pcm.length % 2));
        new Uint8Array(copy).set(pcm.subarray(0, copy.byteLength));
        bytes += copy.byteLength;
        this.post(lane, { type: 'feed', utt, pcm: copy }, [copy]);
      },
      sentenceEnd: () =>
        new Promise<SentenceEndCues>((resolve) => {
          if (state !== 'open' || lane.exited) return resolve(NO_CUES);
          const req = this.nextQuestion++;
          lane.questions.set(req, resolve);
          this.post(lane, { type: 'sentenceEnd', utt, req });
        }),
      cancel: () => {
        if (state !== 'open') return;
        done();
        this.post(lane, { type: 'cancel', utt });
      },
      finish: async (signal) => {
        if (state !== 'open')
          throw new SpeechError('The utterance was already finished.', 'transcription_failed');
        state = 'finishing';
        const offset = skip / SAMPLE_RATE;
        const seconds = bytes / 2 / SAMPLE_RATE + offset;
        const limitMs = this.cfg.timeoutBaseMs + this.cfg.timeoutPerAudioSecondMs * seconds;
        try {
          const out = await new Promise<{ words: RecognizedWord[]; decodeMs: number }>((resolve, reject) => {
            const timer = setTimeout(
              () =>
                stop(new EngineBusyError(`Decoding took longer than ${Math.round(limitMs)} ms.`, 'timeout')),
              limitMs,
            );
            const onAbort = () => stop(new SpeechError('The request was aborted.', 'aborted', false));
            const stop = (err: Error) => {
              clearTimeout(timer);
              signal?.removeEventListener('abort', onAbort);
              lane.pending.delete(utt);
              reject(err);
            };
            lane.pending.set(utt, {
              resolve: (r) => {
                clearTimeout(timer);
                signal?.removeEventListener('abort', onAbort);
                resolve(r);
              },
              reject: stop,
            });
            signal?.addEventListener('abort', onAbort, { once: true });
            if (lane.exited)
              return stop(
                new SpeechError('The speech decoder stopped unexpectedly.', 'transcription_failed'),
              );
            if (signal?.aborted) return onAbort();
            this.post(lane, { type: 'end', utt });
          });
          const words = respell(out.words, bias).map((w) => ({
            word: w.word,
            start: offset + w.startFrame * FRAME_SECONDS,
            end: offset + (w.endFrame + 1) * FRAME_SECONDS,
            confidence: w.confidence,
          }));
          const result: TranscribeResult = {
            ...buildTranscript(words, seconds, 'en'),
            workerId: `builtin-stream-${lane.index}`,
            fallbackUsed: false,
            engineMs: out.decodeMs,
          };
          return result;
        } finally {
          done();
        }
      },
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(
      this.lanes.map(async (lane) => {
        if (lane.exited) return;
        const exited = new Promise<void>((resolve) => lane.worker.once('exit', () => resolve()));
        this.post(lane, { type: 'close' });
        // The close waits behind the thread's queue: audio of sessions that have ended, which a decoder
        // behind real time would go on decoding for seconds (a draining realtime process then outlived its
        // stop deadline). Past a short grace the thread is stopped (after its current native call).
        const late = setTimeout(() => void lane.worker.terminate(), CLOSE_GRACE_MS);
        await exited;
        clearTimeout(late);
      }),
    );
  }
}
