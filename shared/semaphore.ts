/**
 * A counting semaphore whose waiters can be aborted (engine slots of the
 * process, and of one job).
 *
 * Kept here rather than taken from a library: a slot must stay taken until
 * the engine call in it settles, also when the caller's signal aborts, or
 * more decodes than decoders would run, while an aborted waiter leaves at
 * once. p-queue frees the slot as soon as the signal aborts and leaves the
 * call running (its readme, `signal`); p-limit and async-mutex can only
 * reject every waiter at once (docs/decisions.md, "Engine-slot semaphore").
 */
export class Semaphore {
  private waiters: (() => void)[] = [];
  private free: number;

  constructor(readonly size: number) {
    this.free = size;
  }

  async run<T>(signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else {
      await new Promise<void>((resolve, reject) => {
        const grant = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = () => {
          this.waiters = this.waiters.filter((w) => w !== grant);
          reject(asError(signal!.reason));
        };
        if (signal?.aborted) return reject(asError(signal.reason));
        signal?.addEventListener('abort', onAbort, { once: true });
        this.waiters.push(grant);
      });
    }
    try {
      return await fn();
    } finally {
      const next = this.waiters.shift();
      if (next) next();
      else this.free++;
    }
  }
}

/** An abort's reason as the Error a waiter is rejected with (AbortSignal reasons are usually Errors already). */
function asError(reason: unknown): Error {
  return reason instanceof Error ? reason : new Error(String(reason));
}
