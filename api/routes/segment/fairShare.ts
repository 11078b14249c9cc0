/**
 * Clip work (decode and engine) of this process shared fairly between keys
 * (issue 41: one key holding 20 uploads in flight took another tenant's
 * 11 s clip from 2.9 s to 15.6–29.5 s). At most `size` clips are worked on
 * at once. One key holds at most `perKey` of them while another key holds
 * or waits for one; alone, it may borrow the rest (a lone tenant keeps the
 * whole engine). When a slot frees it goes to the waiting key that holds
 * fewest (in turn among equals), so a key's backlog waits in its own line
 * and another key's clip is next. A waiter whose signal aborts (its
 * wait ran out, its client left) leaves its line at once.
 */
import { DECODE_QUEUE_MS } from '../../../shared/transcribe/clip.js';
import { HttpRefusal } from '../../../shared/http/refusal.js';

export class FairShare {
  private free: number;
  private readonly running = new Map<string, number>();
  /** Keys with clips waiting, in turn order, and each key's waiters. */
  private readonly lines = new Map<string, (() => void)[]>();

  constructor(
    readonly size: number,
    readonly perKey: number,
  ) {
    this.free = size;
  }

  /** Clips of `key` being worked on now. */
  held(key: string): number {
    return this.running.get(key) ?? 0;
  }

  async run<T>(key: string, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    if (signal?.aborted) throw asError(signal.reason);
    if (this.free > 0 && this.mayTake(key) && !this.lines.has(key)) this.take(key);
    else await this.wait(key, signal);
    try {
      return await fn();
    } finally {
      this.free++;
      const left = this.held(key) - 1;
      if (left > 0) this.running.set(key, left);
      else this.running.delete(key);
      this.dispatch();
    }
  }

  /** Under its share, or no other key holds or waits for a slot (it borrows what would stand idle). */
  private mayTake(key: string): boolean {
    if (this.held(key) < this.perKey) return true;
    for (const k of this.running.keys()) if (k !== key) return false;
    for (const k of this.lines.keys()) if (k !== key) return false;
    return true;
  }

  private take(key: string): void {
    this.free--;
    this.running.set(key, this.held(key) + 1);
  }

  private wait(key: string, signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        const line = this.lines.get(key);
        const rest = line?.filter((g) => g !== grant) ?? [];
        if (rest.length) this.lines.set(key, rest);
        else this.lines.delete(key);
        reject(asError(signal!.reason));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const line = this.lines.get(key);
      if (line) line.push(grant);
      else this.lines.set(key, [grant]);
      this.dispatch();
    });
  }

  /**
   * Hands free slots to waiting keys: the one holding fewest slots first,
   * ties in turn order (a served key goes to the back of it).
   */
  private dispatch(): void {
    for (;;) {
      if (this.free <= 0) return;
      let key: string | undefined;
      for (const k of this.lines.keys())
        if (this.mayTake(k) && (key === undefined || this.held(k) < this.held(key))) key = k;
      if (key === undefined) return;
      const line = this.lines.get(key)!;
      const grant = line.shift()!;
      this.lines.delete(key);
      if (line.length) this.lines.set(key, line); // re-inserted: now last in turn
      this.take(key);
      grant();
    }
  }
}

function asError(reason: unknown): Error {
  return reason instanceof Error ? reason : new Error(String(reason));
}

/**
 * Runs `fn` in `key`'s turn, waiting at most DECODE_QUEUE_MS for it (then
 * 503 `engine_overloaded` with Retry-After, as for a decoder that does not
 * become free); the client leaving ends the wait at once.
 */
export async function inTurn<T>(
  share: FairShare,
  key: string,
  signal: AbortSignal,
  fn: () => Promise<T>,
): Promise<T> {
  const wait = new AbortController();
  const timer = setTimeout(
    () => wait.abort(new DOMException('clip slot wait timed out', 'TimeoutError')),
    DECODE_QUEUE_MS,
  );
  const onClientGone = () => wait.abort(signal.reason);
  signal.addEventListener('abort', onClientGone, { once: true });
  const stopWaiting = () => {
    clearTimeout(timer);
    signal.removeEventListener('abort', onClientGone);
  };
  let started = false;
  try {
    return await share.run(key, wait.signal, () => {
      started = true;
      stopWaiting();
      return fn();
    });
  } catch (err) {
    if (!started && err === wait.signal.reason && !signal.aborted)
      throw new HttpRefusal(
        503,
        'engine_overloaded',
        `No transcription slot became free within ${DECODE_QUEUE_MS} ms (one key holds at most ${share.perKey} of this server's ${share.size} at once).`,
        { retryable: true, headers: { 'Retry-After': '2' } },
      );
    throw err;
  } finally {
    stopWaiting();
  }
}
