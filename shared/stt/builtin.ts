/**
 * The built-in engine: a pool of worker threads, each owning one PocketSphinx
 * decoder. Requests queue here; a free thread takes the oldest request it may
 * serve (a request pinned to `builtin-N` waits for that thread).
 *
 * Time limits: a request may wait `queueTimeoutMs` for a free decoder (a
 * burst of clients on few cores queues here); then a CPU engine needs time
 * proportional to the audio, so the decode gets `timeoutBaseMs +
 * timeoutPerAudioSecondMs x seconds` (default 10 s + 1 s per audio second,
 * about three times the decoder's normal real-time factor of 0.3). A request
 * that times out or is aborted while queued never reaches a decoder; one
 * already decoding is answered at once with the error while its thread
 * finishes the (uninterruptible) call.
 */
import type { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { SpeechConfig } from '../config/speech.js';
import { FRAME_SECONDS, SAMPLE_RATE, gridSkip, type RecognizedWord } from './pocketsphinx/decoder.js';
import type { CloseRequest, DecodeJob, ThreadMessage } from './pocketsphinx/thread.js';
import { buildTranscript } from './transcript.js';
import { normalizeLanguage } from './language.js';
import { measured } from './metrics.js';
import { startThread } from '../workerThread.js';
import { StreamingPool } from './streaming.js';
import { promptBias, respell, specFor, type BiasSpec, type PromptBias } from './bias/index.js';
import {
  EngineBusyError,
  SpeechError,
  type SpeechEngine,
  type SpeechStream,
  type TranscribeRequest,
  type TranscribeResult,
} from './types.js';

export const BUILTIN_LANGUAGES = ['en'];

interface Job {
  id: number;
  pcm: Buffer;
  bias?: BiasSpec;
  pinned?: number;
  abort: SharedArrayBuffer;
  resolve: (r: { words: RecognizedWord[]; decodeMs: number; thread: number }) => void;
  reject: (e: Error) => void;
  /** Called when a thread takes the job (starts the decode time limit). */
  started?: () => void;
}

interface Thread {
  index: number;
  worker: Worker;
  ready: boolean;
  /** Its decoder loaded at least once. */
  loaded?: boolean;
  job?: Job;
  exited?: boolean;
}

const THREAD_LOAD_TIMEOUT_MS = 60_000;
/** How long close() waits for a thread to finish its native call and exit. */
const THREAD_STOP_TIMEOUT_MS = 30_000;

export class BuiltinEngine implements SpeechEngine {
  private readonly threads: Thread[] = [];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;
  private readonly readyOnce: Promise<void>;
  private markReady!: () => void;
  private markFailed!: (err: Error) => void;
  /** Threads that exited before their decoder loaded, while none ever loaded. */
  private loadFailures = 0;
  private everReady = false;
  /** The clip threads have been started (at once, or with the first clip when `clipOnDemand`). */
  private spawned = false;
  private broken: Error | undefined;
  /** Prompts and vocabularies (bias/); undefined when the lexicon could not be made. */
  private readonly bias: PromptBias | undefined;

  constructor(
    private readonly cfg: SpeechConfig['builtin'],
    private readonly log: Logger,
  ) {
    this.bias = promptBias(cfg, log);
    this.readyOnce = new Promise((resolve, reject) => {
      this.markReady = resolve;
      this.markFailed = reject;
    });
    this.readyOnce.catch(() => {}); // callers that never wait must not see an unhandled rejection
    // On demand: nothing to wait for until the first clip (the streaming form's start checks the models).
    if (cfg.clipOnDemand) this.markReady();
    else this.spawnAll();
  }

  /** The clip threads, once. */
  private spawnAll(): void {
    if (this.spawned) return;
    this.spawned = true;
    for (let i = 0; i < this.cfg.threads; i++) this.spawn(i);
  }

  /**
   * Resolves when at least one decoder is loaded (at once with `clipOnDemand`); rejects when decoders
   * cannot load at all (bad models or arguments).
   */
  ready(): Promise<void> {
    return this.readyOnce;
  }

  workerIds(): string[] {
    return Array.from({ length: this.cfg.threads }, (_, i) => `builtin-${i}`);
  }

  stats(): { threads: number; ready: number; busy: number; queued: number } {
    return {
      threads: this.threads.length,
      ready: this.threads.filter((t) => t.ready).length,
      busy: this.threads.filter((t) => t.job).length,
      queued: this.queue.length,
    };
  }

  languages(): string[] {
    return BUILTIN_LANGUAGES;
  }

  /** The streaming form's decoders: started by the realtime tier before it listens (the API never needs them). */
  private streaming: StreamingPool | undefined;

  openStream(): SpeechStream {
    if (!this.cfg.streaming || this.closed || this.broken) return { begin: () => null, close: () => {} };
    this.streaming ??= new StreamingPool(this.cfg, this.log, this.bias);
    return this.streaming.open();
  }

  startStreaming(): Promise<void> {
    if (!this.cfg.streaming || this.closed || this.broken) return Promise.resolve();
    this.streaming ??= new StreamingPool(this.cfg, this.log, this.bias);
    return this.streaming.ready();
  }

  streamingStats() {
    return this.streaming?.stats();
  }

  healthy(): Promise<boolean> {
    const up = this.threads.some((t) => t.ready) || (this.cfg.clipOnDemand === true && !this.spawned);
    return Promise.resolve(!this.closed && !this.broken && up);
  }

  transcribe(req: TranscribeRequest): Promise<TranscribeResult> {
    return measured('builtin', req.pcm.length / 2 / SAMPLE_RATE, () => this.decode(req));
  }

  private async decode(req: TranscribeRequest): Promise<TranscribeResult> {
    if (this.closed) throw new SpeechError('The speech engine is shut down.', 'transcription_failed');
    if (this.broken) throw new SpeechError(this.broken.message, 'transcription_failed');
    const language = normalizeLanguage(req.language);
    if (language && !BUILTIN_LANGUAGES.includes(language)) {
      throw new SpeechError(
        `Language "${req.language}" is not supported by this engine (supported: ${BUILTIN_LANGUAGES.join(', ')}).`,
        'unsupported_language',
        false,
      );
    }
    let pinned: number | undefined;
    if (req.workerId !== undefined) {
      const m = /^builtin-(\d+)$/.exec(req.workerId);
      pinned = m ? Number(m[1]) : undefined;
      if (pinned === undefined || pinned >= this.cfg.threads) {
        throw new SpeechError(`Unknown worker "${req.workerId}".`, 'unknown_worker', false);
      }
    }
    const seconds = req.pcm.length / 2 / SAMPLE_RATE;
    if (req.pcm.length < 2) {
      // Nothing to decode: an empty clip is a valid, empty transcript.
      return {
        ...buildTranscript([], seconds, 'en'),
        workerId: 'builtin-0',
        fallbackUsed: false,
        engineMs: 0,
      };
    }
    if (this.queue.length >= this.cfg.maxQueue && !this.threads.some((t) => t.ready && !t.job)) {
      throw new EngineBusyError('All decoders are busy; try again shortly.', 'engine_overloaded');
    }
    const decodeTimeoutMs = this.cfg.timeoutBaseMs + this.cfg.timeoutPerAudioSecondMs * seconds;
    const abort = new SharedArrayBuffer(4);
    const skip = gridSkip(req.streamPosition);
    const pcm = skip > 0 && req.pcm.length > skip * 2 ? req.pcm.subarray(skip * 2) : req.pcm;
    const offset = pcm === req.pcm ? 0 : skip / SAMPLE_RATE;
    const bias = specFor(this.bias, req.prompt, req.vocabulary);
    const out = await new Promise<{ words: RecognizedWord[]; decodeMs: number; thread: number }>(
      (resolve, reject) => {
        const job: Job = { id: this.nextId++, pcm, bias, pinned, abort, resolve, reject };
        const giveUp = (err: Error) => {
          Atomics.store(new Int32Array(abort), 0, 1);
          const i = this.queue.indexOf(job);
          if (i >= 0) this.queue.splice(i, 1);
          reject(err);
        };
        let timer = setTimeout(
          () =>
            giveUp(
              new EngineBusyError(`No decoder became free within ${this.cfg.queueTimeoutMs} ms.`, 'timeout'),
            ),
          this.cfg.queueTimeoutMs,
        );
        job.started = () => {
          clearTimeout(timer);
          timer = setTimeout(
            () =>
              giveUp(
                new EngineBusyError(
                  `Decoding took longer than ${Math.round(decodeTimeoutMs)} ms.`,
                  'timeout',
                ),
              ),
            decodeTimeoutMs,
          );
        };
        const onAbort = () => giveUp(new SpeechError('The request was aborted.', 'aborted', false));
        req.signal?.addEventListener('abort', onAbort, { once: true });
        job.resolve = (r) => {
          clearTimeout(timer);
          req.signal?.removeEventListener('abort', onAbort);
          resolve(r);
        };
        job.reject = (e) => {
          clearTimeout(timer);
          req.signal?.removeEventListener('abort', onAbort);
          reject(e);
        };
        if (req.signal?.aborted) return onAbort();
        this.spawnAll();
        this.queue.push(job);
        this.pump();
      },
    );
    const words = respell(out.words, bias).map((w) => ({
      word: w.word,
      start: offset + w.startFrame * FRAME_SECONDS,
      end: offset + (w.endFrame + 1) * FRAME_SECONDS,
      confidence: w.confidence,
    }));
    return {
      ...buildTranscript(words, seconds, 'en'),
      workerId: `builtin-${out.thread}`,
      fallbackUsed: false,
      engineMs: out.decodeMs,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.streaming?.close();
    for (const job of this.queue.splice(0))
      job.reject(new SpeechError('The speech engine is shut down.', 'transcription_failed'));
    await Promise.all(this.threads.map((t) => this.stopThread(t)));
  }

  /**
   * Asks a thread to exit by itself once its current native call (loading the
   * decoder, or a decode told to abandon) returns; `worker.terminate()` during
   * a native call aborts the whole process. Terminates only as a last resort.
   */
  private async stopThread(thread: Thread): Promise<void> {
    if (thread.exited) return;
    if (thread.job) Atomics.store(new Int32Array(thread.job.abort), 0, 1);
    const exited = new Promise<void>((resolve) => thread.worker.once('exit', () => resolve()));
    thread.worker.postMessage({ type: 'close' } satisfies CloseRequest);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), THREAD_STOP_TIMEOUT_MS);
    });
    const outcome = await Promise.race([exited, late]);
    clearTimeout(timer);
    if (outcome === 'late') {
      this.log.warn({ thread: thread.index }, 'speech thread did not stop in time; terminating it');
      await thread.worker.terminate();
    }
  }

  /** The decoders' dictionary, and the extras model when prompts can bias them. */
  private lexicon(): { dict: string; extras?: string } {
    return this.bias
      ? { dict: this.bias.files.dict, extras: this.bias.files.extras }
      : { dict: this.cfg.dict };
  }

  private spawn(index: number): void {
    const worker = startThread(import.meta.url, './pocketsphinx/thread', {
      hmm: this.cfg.hmm,
      lm: this.cfg.lm,
      ...this.lexicon(),
      pocketsphinxLibrary: this.cfg.pocketsphinxLibrary,
      sphinxbaseLibrary: this.cfg.sphinxbaseLibrary,
      extraArgs: this.cfg.extraArgs,
    });
    const thread: Thread = { index, worker, ready: false };
    this.threads[index] = thread;
    // A decoder loads in about a second; one that never reports is replaced.
    const watchdog = setTimeout(() => {
      this.log.error({ thread: index }, 'speech decoder did not load in time; restarting its thread');
      void worker.terminate();
    }, THREAD_LOAD_TIMEOUT_MS);
    watchdog.unref();
    worker.once('message', () => clearTimeout(watchdog));
    worker.once('exit', () => clearTimeout(watchdog));
    worker.on('message', (msg: ThreadMessage) => this.onMessage(thread, msg));
    worker.on('error', (err) => this.log.error({ err, thread: index }, 'speech thread failed'));
    worker.on('exit', (code) => {
      thread.ready = false;
      thread.exited = true;
      const job = thread.job;
      thread.job = undefined;
      job?.reject(new SpeechError('The speech decoder stopped unexpectedly.', 'transcription_failed'));
      if (this.closed) return;
      if (!thread.loaded && !this.everReady && ++this.loadFailures >= 3) {
        // Not a crash but a configuration that cannot work: stop retrying and say so.
        this.broken = new Error(
          'PocketSphinx decoders fail to load (check the POCKETSPHINX_* settings and the log).',
        );
        this.log.fatal({ thread: index, code }, this.broken.message);
        for (const queued of this.queue.splice(0))
          queued.reject(new SpeechError(this.broken.message, 'transcription_failed'));
        this.markFailed(this.broken);
        return;
      }
      this.log.error({ thread: index, code }, 'speech thread exited; restarting');
      setTimeout(() => !this.closed && this.spawn(index), 1000);
    });
  }

  private onMessage(thread: Thread, msg: ThreadMessage): void {
    if (msg.type === 'ready') {
      thread.ready = true;
      thread.loaded = true;
      this.everReady = true;
      this.log.debug({ thread: thread.index, initMs: msg.initMs }, 'speech decoder loaded');
      this.markReady();
    } else {
      const job = thread.job;
      thread.job = undefined;
      if (job && job.id === msg.id) {
        if (msg.type === 'result')
          job.resolve({ words: msg.words, decodeMs: msg.decodeMs, thread: thread.index });
        else
          job.reject(
            new SpeechError(
              msg.aborted ? 'Transcription was abandoned.' : `Decoder error: ${msg.message}`,
              'transcription_failed',
            ),
          );
      }
    }
    this.pump();
  }

  private pump(): void {
    for (const thread of this.threads) {
      if (!thread.ready || thread.job) continue;
      const i = this.queue.findIndex((j) => j.pinned === undefined || j.pinned === thread.index);
      if (i < 0) continue;
      const [job] = this.queue.splice(i, 1);
      thread.job = job;
      job.started?.();
      // Copy into a transferable buffer; the request's Buffer may be a view on a pooled slab.
      const pcm = new ArrayBuffer(job.pcm.length - (job.pcm.length % 2));
      new Uint8Array(pcm).set(job.pcm.subarray(0, pcm.byteLength));
      thread.worker.postMessage({ id: job.id, pcm, abort: job.abort, bias: job.bias } satisfies DecodeJob, [
        pcm,
      ]);
    }
  }
}
