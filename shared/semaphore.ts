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

/**
 * A budget of bytes held at once (batch chunks read into memory, issue 41:
 * one job of 3600 s chunks at concurrency 4 took a worker past 900 MB).
 * `run` waits, in order of arrival, until its bytes fit beside what is held;
 * a request larger than the whole budget runs alone. An aborted waiter
 * leaves at once.
 */
export class ByteBudget {
  private held = 0;
  private waiters: { bytes: number; grant: () => void }[] = [];

  constructor(readonly capacity: number) {}

  async run<T>(bytes: number, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    const need = Math.min(bytes, this.capacity);
    if (this.waiters.length || this.held + need > this.capacity) {
      await new Promise<void>((resolve, reject) => {
        const waiter = {
          bytes: need,
          grant: () => {
            signal?.removeEventListener('abort', onAbort);
            resolve();
          },
        };
        const onAbort = () => {
          this.waiters = this.waiters.filter((w) => w !== waiter);
          reject(asError(signal!.reason));
          this.dispatch();
        };
        if (signal?.aborted) return reject(asError(signal.reason));
        signal?.addEventListener('abort', onAbort, { once: true });
        this.waiters.push(waiter);
      });
    } else this.held += need;
    try {
      return await fn();
    } finally {
      this.held -= need;
      this.dispatch();
    }
  }

  private dispatch(): void {
    while (this.waiters.length && this.held + this.waiters[0].bytes <= this.capacity) {
      const w = this.waiters.shift()!;
      this.held += w.bytes;
      w.grant();
    }
  }
}
