/**
 * Realtime usage: one row per session, written once when the session ends
 * (whatever the reason), keyed by the session id so a retried write never
 * bills twice. Failed writes are retried with backoff; shutdown waits for them.
 */
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { recordUsage } from '../shared/usage.js';

const RETRY_DELAYS_MS = [200, 1000, 5000, 15_000];

export class UsageMeter {
  private readonly inFlight = new Set<Promise<void>>();
  private flushed = 0;

  constructor(
    private readonly db: Knex,
    private readonly logger: Logger,
  ) {}

  get written(): number {
    return this.flushed;
  }

  record(keyId: string, sessionId: string, audioSeconds: number): void {
    const p = this.write(keyId, sessionId, audioSeconds).finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  private async write(keyId: string, refId: string, audioSeconds: number): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await recordUsage(this.db, { keyId, plane: 'realtime', audioSeconds, refId });
        this.flushed++;
        return;
      } catch (err) {
        if (attempt >= RETRY_DELAYS_MS.length) {
          this.logger.error(
            { err, sessionId: refId, keyId, audioSeconds },
            'realtime usage could not be recorded',
          );
          return;
        }
        await new Promise((r) => setTimeout(r, RETRY_DELAYS_MS[attempt]));
      }
    }
  }

  /** Resolves when every pending write has finished. */
  async drain(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }
}
