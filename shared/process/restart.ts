/**
 * Restart with backoff: waits `baseMs`, doubling up to `maxMs`, between
 * attempts; a child that stayed up for `stableMs` starts again from `baseMs`.
 *
 *   const backoff = new Backoff({ baseMs: 500, maxMs: 30_000 });
 *   child.on('exit', () => setTimeout(restart, backoff.next()));
 */
export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
  /** Up this long: the next failure is a first failure again (default 60 s). */
  stableMs?: number;
}

export class Backoff {
  private attempt = 0;
  private startedAt = Date.now();

  constructor(private readonly opts: BackoffOptions) {}

  /** Call when the child is up. */
  started(): void {
    this.startedAt = Date.now();
  }

  /** The wait before the next attempt. */
  next(): number {
    if (Date.now() - this.startedAt >= (this.opts.stableMs ?? 60_000)) this.attempt = 0;
    const ms = Math.min(this.opts.maxMs, this.opts.baseMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    return ms;
  }
}
