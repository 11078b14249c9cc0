/**
 * Work of this process shared fairly between keys (issue 41): at most `size`
 * units at once, one key at most `perKey` of them; with `borrow`, a key alone
 * may take the rest while no other key holds or waits for one. When a unit frees it goes to the waiting key that
 * holds fewest (in turn among equals), so a key's backlog waits in its own
 * line and another key's work is next. A waiter whose signal aborts leaves
 * its line at once. Used for segment clips (per API key) and batch engine
 * calls (per tenant).
 */
export class FairShare {
  private free: number;
  private readonly running = new Map<string, number>();
  /** Keys with clips waiting, in turn order, and each key's waiters. */
  private readonly lines = new Map<string, (() => void)[]>();

  constructor(
    readonly size: number,
    readonly perKey: number,
    /**
     * Whether a key alone may borrow the slots beyond its share (work-conserving:
     * another key then waits for one of its units to end). Off, the rest stays
     * free for other keys whatever happens (a newcomer starts at once).
     */
    private readonly borrow = true,
  ) {
    this.free = size;
  }

  /** The key waits only because it holds its share (there are free slots it may not take). */
  overShare(key: string): boolean {
    return this.free > 0 && !this.mayTake(key);
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
    if (!this.borrow) return false;
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
