/**
 * A session's transcripts in flight: the utterances that ended and wait for
 * the speech engine (a streaming decoder's end, or the clip form), each
 * answered with exactly one `completed` (interface 6.1), with a timeout, the
 * breaker told of every upstream outcome, and the bytes in flight counted
 * for the backpressure bounds. The segmentation that feeds it is
 * ./utterances.ts.
 *
 * Failure policy (decisions.md): when the upstream fails, or the session
 * closes first, the completed event carries `text: ""` and
 * `error: {code, message}`, preceded by an `error` event with the same
 * `utterance_index` and code `transcription_failed`.
 */
import { PCM_BYTES_PER_SECOND, PCM_SAMPLE_RATE } from '../shared/audio/pcm.js';
import type { StreamingUtterance, TranscribeResult } from '../shared/stt/types.js';
import { countsAgainstUpstream } from './breaker.js';
import { events } from './protocol.js';
import type { CompletedBase } from './wire.js';
import type { UtteranceDeps, UtteranceHost } from './utterances.js';

/** An ended utterance as it goes upstream. */
export interface EndedUtterance {
  index: number;
  pcm: Buffer;
  /** Where it starts in the session's audio (samples from its first one). */
  startSample: number;
  speechMs: number;
  stoppedAt: number;
  language: string;
  prompt: string | undefined;
  /** Fed to a streaming decoder as it was spoken: only its end is left. */
  streaming: StreamingUtterance | null;
}

interface Pending {
  index: number;
  bytes: number;
  abort: AbortController;
  stoppedAt: number;
  /** Fields of the completed event known before the upstream answers. */
  base: CompletedBase;
}

export class Transcripts {
  private readonly pending = new Map<number, Pending>();
  private inFlightBytes = 0;

  constructor(
    private readonly host: UtteranceHost,
    private readonly deps: UtteranceDeps,
    /** One left the flight (the session may be able to close now). */
    private readonly onSettled: () => void,
  ) {}

  get count(): number {
    return this.pending.size;
  }

  get bytes(): number {
    return this.inFlightBytes;
  }

  /** Sends an ended utterance upstream; its `completed` follows. */
  send(u: EndedUtterance): void {
    const cfg = this.deps.config;
    const audioMs = Math.round((u.pcm.length / PCM_BYTES_PER_SECOND) * 1000);
    const abort = new AbortController();
    const base = events.completedBase(u.index, u.language === 'auto' ? '' : u.language, audioMs, u.speechMs);
    const p: Pending = { index: u.index, bytes: u.pcm.length, abort, stoppedAt: u.stoppedAt, base };
    this.pending.set(u.index, p);
    this.inFlightBytes += u.pcm.length;
    if (this.inFlightBytes > cfg.upstreamHardBytes) {
      u.streaming?.cancel();
      this.host.end('upstreamBackpressure');
      return;
    }
    const timer = setTimeout(
      () => abort.abort(new Error('transcription timed out')),
      cfg.transcribeTimeoutMs,
    );
    const language = u.language === 'auto' ? undefined : u.language;
    const result: Promise<TranscribeResult> = u.streaming
      ? u.streaming.finish(abort.signal)
      : this.deps.engine.transcribe({
          pcm: u.pcm,
          streamPosition: u.startSample,
          language,
          prompt: u.prompt,
          vocabulary: this.host.principal.vocabulary,
          model: this.host.settings.sttModel,
          signal: abort.signal,
        });
    result
      .then(
        (r) => {
          this.deps.breaker.success();
          if (!this.settle(p)) return;
          const latency = this.host.now() - u.stoppedAt;
          // Word times on the session's audio (seconds from its first sample), as verbose_json gives them.
          const at = u.startSample / PCM_SAMPLE_RATE;
          this.host.emit(
            events.completed(base, r, { at, latencyMs: Math.round(latency), language: u.language }),
          );
          this.deps.onCompleted?.(latency, r.engineMs);
          this.deps.onUtterance?.('completed');
        },
        (err: unknown) => {
          const e = err as { code?: string; message?: string };
          if (countsAgainstUpstream(err, abort.signal.aborted)) this.deps.breaker.failure();
          if (!this.settle(p)) return;
          this.deps.logger.warn(
            { err, sessionId: this.host.sessionId, index: u.index },
            'utterance transcription failed',
          );
          const message = e.message ?? 'transcription failed';
          this.fail(u.index, base, u.stoppedAt, e.code ?? 'transcription_failed', message);
          if (this.deps.breaker.isOpen && this.host.state === 'open') this.host.end('upstreamUnavailable');
        },
      )
      .finally(() => clearTimeout(timer));
  }

  /** Reports an utterance as failed: `error`, then its `completed` with the error. */
  fail(index: number, base: CompletedBase, stoppedAt: number, upstreamCode: string, message: string): void {
    this.host.emit(events.transcriptionFailed(index, message, upstreamCode));
    this.host.emit(events.failedCompleted(base, Math.round(this.host.now() - stoppedAt), message));
    this.deps.onUtterance?.('failed');
  }

  /** Removes a finished utterance; false when the session already reported it. */
  private settle(p: Pending): boolean {
    if (!this.pending.delete(p.index)) return false;
    this.inFlightBytes -= p.bytes;
    this.onSettled();
    return this.host.state !== 'closed';
  }

  /** The session is closing for good (events still writable): each one in flight is reported failed. */
  failAll(closeCode: number, closeReason: string): void {
    for (const p of [...this.pending.values()]) {
      p.abort.abort(new Error('session closed'));
      this.pending.delete(p.index);
      this.inFlightBytes -= p.bytes;
      const why = `session closed (${closeReason || closeCode}) before the transcription finished`;
      this.fail(p.index, p.base, p.stoppedAt, 'session_closed', why);
    }
  }

  /** The client went away: all in flight are abandoned (nothing can be reported). */
  abandon(): void {
    for (const p of this.pending.values()) p.abort.abort(new Error('client went away'));
    this.pending.clear();
    this.inFlightBytes = 0;
  }
}
