/**
 * A pool of remote OpenAI-compatible workers (ours in engine/, a Whisper
 * server on a GPU box, a hosted API). Policy (interface section 8):
 *
 * - every worker is health-checked (`GET /health`) in the background; a
 *   failed request also marks its worker down until the next good check;
 * - the primary is the healthy ("warm") worker with the fewest requests in
 *   flight (ties rotate); at most one fallback, the next one in that order
 *   (workers marked down are only tried when too few are up);
 * - each attempt has its own timeout (800 ms) and all attempts share one
 *   wall-clock budget (about 1.6 s); no attempt is ever repeated. A request
 *   may bring its own attempt timeout (`attemptTimeoutMs`, batch chunks whose
 *   audio is long); its budget is then that times the attempts;
 * - `workerId` pins a worker; by default a pinned request gets no fallback
 *   (`STT_PINNED_FALLBACK=true` allows one).
 *
 * 4xx answers other than 401/403/408/429 are the request's fault, not the
 * worker's: they end the request without a fallback. A worker that is full
 * (503 `engine_overloaded`, or 429) stays up and the fallback is tried; when
 * every worker tried was full the request ends in EngineBusyError, which the
 * planes answer 503 `engine_overloaded` with Retry-After.
 */
import type { Logger } from 'pino';
import { request, type Dispatcher } from 'undici';
import type { RemoteWorkerConfig, SpeechConfig } from '../config/speech.js';
import { wavHeader, pcmDurationSeconds } from '../audio/index.js';
import { attempts, measured, workerHealthy } from './metrics.js';
import { fromVerboseJson } from './formats.js';
import { multipartBody, type MultipartBody } from '../http/multipart.js';
import {
  EngineBusyError,
  SpeechError,
  type SpeechEngine,
  type TranscribeRequest,
  type TranscribeResult,
} from './types.js';

interface WorkerState extends RemoteWorkerConfig {
  healthy: boolean;
  inFlight: number;
  lastError?: string;
}

export interface WorkerStatus {
  id: string;
  url: string;
  healthy: boolean;
  inFlight: number;
  lastError?: string;
}

class AttemptError extends Error {
  constructor(
    message: string,
    /** False when the worker is fine but refused the request itself. */
    readonly workerFault: boolean,
    readonly code = 'transcription_failed',
    /** The worker is fine but cannot serve this request; another might (a language it lacks). */
    readonly tryElsewhere = false,
    /** The worker is up but behind (its 503 engine_overloaded or 429): another may be free. */
    readonly overloaded = false,
  ) {
    super(message);
  }
}

export class RemotePool implements SpeechEngine {
  private readonly workers: WorkerState[];
  private readonly timer: NodeJS.Timeout;
  private rotation = 0;
  private firstCheck: Promise<void>;

  constructor(
    private readonly cfg: SpeechConfig['remote'],
    private readonly log: Logger,
  ) {
    // Until the first health check answers, every worker counts as up.
    this.workers = cfg.workers.map((w) => ({ ...w, healthy: true, inFlight: 0 }));
    this.firstCheck = this.checkAll();
    this.timer = setInterval(() => void this.checkAll(), cfg.healthIntervalMs);
    this.timer.unref();
  }

  /** Resolves after the first round of health checks. */
  ready(): Promise<void> {
    return this.firstCheck;
  }

  workerIds(): string[] {
    return this.workers.map((w) => w.id);
  }

  status(): WorkerStatus[] {
    return this.workers.map(({ id, url, healthy, inFlight, lastError }) => ({
      id,
      url,
      healthy,
      inFlight,
      lastError,
    }));
  }

  languages(): string[] {
    return ['*'];
  }

  healthy(): Promise<boolean> {
    return Promise.resolve(this.workers.some((w) => w.healthy));
  }

  close(): Promise<void> {
    clearInterval(this.timer);
    return Promise.resolve();
  }

  /** Runs one round of health checks now. */
  async checkAll(): Promise<void> {
    await Promise.all(this.workers.map((w) => this.check(w)));
  }

  private async check(w: WorkerState): Promise<void> {
    try {
      const res = await fetch(`${w.url}/health`, { signal: AbortSignal.timeout(this.cfg.healthTimeoutMs) });
      const body = (await res.json().catch(() => ({}))) as { ok?: unknown };
      const up = res.ok && body.ok !== false;
      if (up !== w.healthy) this.log.info({ worker: w.id, healthy: up }, 'speech worker health changed');
      w.healthy = up;
      workerHealthy.set({ worker: w.id }, up ? 1 : 0);
      if (up) w.lastError = undefined;
      else w.lastError = `health answered ${res.status}`;
    } catch (err) {
      if (w.healthy)
        this.log.warn({ worker: w.id, err: (err as Error).message }, 'speech worker health check failed');
      w.healthy = false;
      workerHealthy.set({ worker: w.id }, 0);
      w.lastError = (err as Error).message;
    }
  }

  /** Primary first, then fallbacks, at most maxAttempts. */
  private candidates(req: TranscribeRequest): WorkerState[] {
    // One turn per request, so that idle workers take turns being primary.
    const turn = this.rotation++;
    const byLoad = (list: WorkerState[]) => {
      const start = turn % Math.max(1, list.length);
      const rotated = [...list.slice(start), ...list.slice(0, start)];
      return rotated.sort((a, b) => a.inFlight - b.inFlight);
    };
    const ranked = [
      ...byLoad(this.workers.filter((w) => w.healthy)),
      ...byLoad(this.workers.filter((w) => !w.healthy)),
    ];
    if (req.workerId !== undefined) {
      const pinned = this.workers.find((w) => w.id === req.workerId);
      if (!pinned) {
        throw new SpeechError(
          `Unknown worker "${req.workerId}" (known: ${this.workerIds().join(', ')}).`,
          'unknown_worker',
          false,
        );
      }
      if (!this.cfg.pinnedFallback) return [pinned];
      return [pinned, ...ranked.filter((w) => w !== pinned)].slice(0, this.cfg.maxAttempts);
    }
    return ranked.slice(0, this.cfg.maxAttempts);
  }

  transcribe(req: TranscribeRequest): Promise<TranscribeResult> {
    return measured('remote', pcmDurationSeconds(req.pcm), () => this.tryWorkers(req));
  }

  private async tryWorkers(req: TranscribeRequest): Promise<TranscribeResult> {
    const candidates = this.candidates(req);
    const attemptTimeoutMs = req.attemptTimeoutMs ?? this.cfg.attemptTimeoutMs;
    const budgetMs =
      req.attemptTimeoutMs !== undefined ? req.attemptTimeoutMs * this.cfg.maxAttempts : this.cfg.budgetMs;
    const deadline = Date.now() + budgetMs;
    const upload = this.uploadOf(req);
    const failures: string[] = [];
    let refusedLanguage: AttemptError | undefined;
    let refusals = 0;
    let overloads = 0;
    for (let i = 0; i < candidates.length; i++) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) break;
      if (req.signal?.aborted) throw new SpeechError('The request was aborted.', 'aborted', false);
      const worker = candidates[i];
      const started = performance.now();
      try {
        const transcript = await this.attempt(worker, upload, req, Math.min(attemptTimeoutMs, remaining));
        if (!transcript.duration) transcript.duration = pcmDurationSeconds(req.pcm);
        attempts.inc({ worker: worker.id, outcome: 'ok' });
        return {
          ...transcript,
          workerId: worker.id,
          fallbackUsed: i > 0,
          engineMs: performance.now() - started,
        };
      } catch (err) {
        // The caller went away: that says nothing about the worker.
        if (req.signal?.aborted) throw new SpeechError('The request was aborted.', 'aborted', false);
        const e = err as AttemptError;
        attempts.inc({
          worker: worker.id,
          outcome: e.overloaded
            ? 'overloaded'
            : e.workerFault === false || e.tryElsewhere
              ? 'refused'
              : 'failed',
        });
        failures.push(`${worker.id}: ${e.message}`);
        if (e.overloaded) {
          // Up but behind: it stays in rotation, the next worker may have room.
          overloads++;
          continue;
        }
        if (e.tryElsewhere) {
          refusedLanguage = e;
          refusals++;
          continue;
        }
        if (e.workerFault === false) {
          throw new SpeechError(e.message, e.code, false);
        }
        worker.healthy = false;
        worker.lastError = e.message;
        this.log.warn({ worker: worker.id, attempt: i + 1, err: e.message }, 'speech worker attempt failed');
      }
    }
    if (refusedLanguage && refusals === failures.length) {
      // Every worker tried refused the language itself: the request's fault, not an outage.
      const tried = candidates.map((w) => w.id).join(', ');
      throw new SpeechError(
        `${refusedLanguage.message} (refused by every worker tried: ${tried})`,
        refusedLanguage.code,
        false,
      );
    }
    if (overloads > 0 && overloads === failures.length) {
      // Every worker tried was up but full: overload (503 with Retry-After), not a failed transcription.
      throw new EngineBusyError(
        `Every speech worker tried is busy; try again shortly (${failures.join('; ')}).`,
        'engine_overloaded',
      );
    }
    throw new SpeechError(
      `All speech worker attempts failed (${failures.join('; ') || 'no worker available in time'}).`,
      'transcription_failed',
    );
  }

  /** The request's upload (OpenAI's form, the audio as WAV), built once for all its attempts. */
  private uploadOf(req: TranscribeRequest): MultipartBody {
    const fields: [string, string][] = [
      ['model', req.model ?? this.cfg.model],
      ['response_format', 'verbose_json'],
      ['timestamp_granularities[]', 'word'],
      ['timestamp_granularities[]', 'segment'],
    ];
    if (req.language) fields.push(['language', req.language]);
    if (req.prompt) fields.push(['prompt', req.prompt]);
    const data = [wavHeader(req.pcm.length), req.pcm];
    return multipartBody(fields, { name: 'file', filename: 'audio.wav', type: 'audio/wav', data });
  }

  private async attempt(worker: WorkerState, form: MultipartBody, req: TranscribeRequest, timeoutMs: number) {
    const timeout = AbortSignal.timeout(timeoutMs);
    worker.inFlight++;
    try {
      let res: Dispatcher.ResponseData;
      try {
        res = await request(`${worker.url}/v1/audio/transcriptions`, {
          method: 'POST',
          body: form.body,
          headers: {
            'content-type': form.contentType,
            ...(this.cfg.apiKey ? { authorization: `Bearer ${this.cfg.apiKey}` } : {}),
          },
          signal: req.signal ? AbortSignal.any([timeout, req.signal]) : timeout,
        });
      } catch (err) {
        const e = err as Error & { code?: string };
        const why = timeout.aborted ? `no answer within ${Math.round(timeoutMs)} ms` : (e.code ?? e.message);
        throw new AttemptError(why, true);
      }
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      const status = res.statusCode;
      const text = await res.body.text().catch(() => '');
      if (!ok) {
        let code = 'transcription_failed';
        let message = `HTTP ${status}`;
        try {
          const body = JSON.parse(text) as { error?: { code?: string; message?: string } };
          if (body.error?.message) message += `: ${body.error.message}`;
          if (body.error?.code === 'unsupported_language' || body.error?.code === 'engine_overloaded')
            code = body.error.code;
        } catch {
          /* not JSON */
        }
        // A worker without the language is healthy; the next one may have it.
        if (code === 'unsupported_language' && status < 500)
          throw new AttemptError(message, false, code, true);
        // Full (our engine's 503 engine_overloaded, or any 429): healthy, just behind.
        if (status === 429 || (status === 503 && code === 'engine_overloaded'))
          throw new AttemptError(message, false, 'engine_overloaded', true, true);
        // 401/403 mean this worker's credentials are wrong (a configuration fault of that worker).
        const workerFault = status >= 500 || [401, 403, 408, 429].includes(status);
        throw new AttemptError(message, workerFault, code);
      }
      try {
        return fromVerboseJson(JSON.parse(text), req.language ?? 'en');
      } catch (err) {
        throw new AttemptError(`unreadable answer: ${(err as Error).message}`, true);
      }
    } finally {
      worker.inFlight--;
    }
  }
}
