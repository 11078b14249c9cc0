/**
 * A SpeechEngine whose work happens in a worker thread (engineThread.ts),
 * built from the same configuration. Used by the realtime process for the
 * remote worker pool, so request encoding and response parsing never run on
 * the WebSocket loop. Utterance audio is transferred, not copied.
 */
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import {
  SpeechError,
  type SpeechEngine,
  type TranscribeRequest,
  type TranscribeResult,
} from '../shared/stt/types.js';
import type { FromEngine, ToEngine } from './engineThread.js';

const RUNNING_TS = import.meta.url.endsWith('.ts');
const THREAD_URL = new URL(`./engineThread${RUNNING_TS ? '.ts' : '.js'}`, import.meta.url);

function startThread(env: NodeJS.ProcessEnv): Worker {
  if (!RUNNING_TS) return new Worker(THREAD_URL, { env });
  const tsxDir = path.dirname(createRequire(import.meta.url).resolve('tsx/package.json'));
  const api = pathToFileURL(path.join(tsxDir, 'dist/esm/api/index.mjs')).href;
  const boot = `import(${JSON.stringify(api)}).then((m) => { m.register(); return import(${JSON.stringify(THREAD_URL.href)}); })`;
  return new Worker(boot, { eval: true, env });
}

export class ThreadedEngine implements SpeechEngine {
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  private langs: string[] = ['*'];
  private dead: Error | null = null;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (m: FromEngine) => {
      if (m.t === 'ready') return;
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.t === 'health') return w.resolve(m.healthy);
      if (m.error) w.reject(new SpeechError(m.error.message, m.error.code, m.error.retryable));
      else w.resolve(m.result);
    });
    const die = (err: Error) => {
      this.dead ??= err;
      for (const w of this.waiting.values()) w.reject(new SpeechError(err.message, 'transcription_failed'));
      this.waiting.clear();
    };
    worker.on('error', die);
    worker.on('exit', (code) => die(new Error(`speech engine thread exited (${code})`)));
  }

  /** `env` is the environment the thread's configuration is read from (default: this process's). */
  static async start(env: NodeJS.ProcessEnv = process.env): Promise<ThreadedEngine> {
    const worker = startThread(env);
    const e = new ThreadedEngine(worker);
    await new Promise<void>((resolve, reject) => {
      worker.once('error', reject);
      const onReady = (m: FromEngine) => {
        if (m.t !== 'ready') return;
        worker.off('message', onReady);
        e.langs = m.languages;
        resolve();
      };
      worker.on('message', onReady);
    });
    return e;
  }

  private call<T>(msg: ToEngine, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.dead) return Promise.reject(new SpeechError(this.dead.message, 'transcription_failed'));
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(msg.id, { resolve, reject });
      this.worker.postMessage(msg, transfer);
    });
  }

  transcribe(req: TranscribeRequest): Promise<TranscribeResult> {
    const id = this.nextId++;
    // A private copy that can be transferred (the caller keeps its buffer).
    const pcm = new Uint8Array(req.pcm.length);
    pcm.set(req.pcm);
    const p = this.call<TranscribeResult>(
      {
        t: 'tx',
        id,
        pcm,
        language: req.language,
        prompt: req.prompt,
        model: req.model,
        workerId: req.workerId,
      },
      [pcm.buffer],
    );
    if (req.signal) {
      const onAbort = () => this.worker.postMessage({ t: 'abort', id } satisfies ToEngine);
      if (req.signal.aborted) onAbort();
      else req.signal.addEventListener('abort', onAbort, { once: true });
      void p.finally(() => req.signal?.removeEventListener('abort', onAbort)).catch(() => {});
    }
    return p;
  }

  languages(): string[] {
    return this.langs;
  }

  healthy(): Promise<boolean> {
    if (this.dead) return Promise.resolve(false);
    return this.call<boolean>({ t: 'health', id: this.nextId++ });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}
