/**
 * Circuit breaker over the speech upstream. Closed: calls pass; after
 * `failureThreshold` consecutive failures it opens for `openMs` (new sessions
 * get 503 upstream_unavailable with Retry-After, open ones close 1013). Then
 * half-open: calls pass; the first success closes it, the first failure re-opens it.
 * Per instance: each realtime process judges the upstream it reaches itself.
 */
import { EngineBusyError } from '../shared/stt/types.js';

/**
 * Whether a failed transcription counts against the upstream. Engine failures count, waiting does
 * not: our own timeout, and an engine that says it is behind (EngineBusyError: its decode limit
 * passed on busy cores), measure queueing behind other sessions (overload, refused at admission),
 * not a broken engine (the speech client's attempt timeouts report a hung one). A session that went
 * away aborts its own requests, and an upstream that refuses one request (unsupported language:
 * retryable=false) is up.
 */
export function countsAgainstUpstream(err: unknown, aborted: boolean): boolean {
  return (
    !aborted && (err as { retryable?: boolean }).retryable !== false && !(err instanceof EngineBusyError)
  );
}

export type BreakerState = 'closed' | 'open' | 'half_open';

export class CircuitBreaker {
  private failures = 0;
  private openedAt = 0;
  private state_: BreakerState = 'closed';
  private readonly listeners: ((s: BreakerState) => void)[] = [];

  constructor(
    private readonly opts: { failureThreshold: number; openMs: number },
    private readonly now: () => number = Date.now,
  ) {}

  get state(): BreakerState {
    if (this.state_ === 'open' && this.now() - this.openedAt >= this.opts.openMs) this.state_ = 'half_open';
    return this.state_;
  }

  get isOpen(): boolean {
    return this.state === 'open';
  }

  /** Milliseconds until a probe is allowed again (0 unless open). */
  retryAfterMs(): number {
    return this.state === 'open' ? Math.max(0, this.opts.openMs - (this.now() - this.openedAt)) : 0;
  }

  onChange(fn: (s: BreakerState) => void): void {
    this.listeners.push(fn);
  }

  success(): void {
    const was = this.state;
    this.failures = 0;
    if (was !== 'closed') this.set('closed');
  }

  failure(): void {
    const was = this.state;
    this.failures++;
    if (was === 'half_open' || (was === 'closed' && this.failures >= this.opts.failureThreshold)) {
      this.openedAt = this.now();
      this.set('open');
    }
  }

  /** Forces the breaker open (readiness probe found the upstream down). */
  trip(): void {
    this.openedAt = this.now();
    if (this.state_ !== 'open') this.set('open');
  }

  private set(s: BreakerState): void {
    this.state_ = s;
    for (const fn of this.listeners) fn(s);
  }
}
