/**
 * Realtime usage through the usage ledger: every `ledger.checkpointMs` (a third of REALTIME_LEASE_TTL_MS, at most 2 s) one
 * batched checkpoint of the instance's live sessions (their rows grow and
 * their leases are renewed, so the audio counts against the key's window
 * while the session runs, and a killed instance leaves its last checkpoint),
 * and one final record per session when it ends, whatever the reason, keyed
 * by the session id. Shutdown waits until every record is in Postgres or in
 * the ledger's spool.
 */
import type { UsageLedger } from '../shared/usage.js';
import type { UsageBudget } from '../shared/usage/budget.js';

export interface MeteredSession {
  readonly sessionId: string;
  readonly audioSeconds: number;
  readonly principal: { keyId: string };
}

export class UsageMeter {
  private readonly timer: NodeJS.Timeout;
  private checkpointing: Promise<void> | undefined;

  constructor(
    private readonly ledger: UsageLedger,
    /** Bills each ended session through its budget reservation (made at the upgrade, realtime/admission.ts). */
    private readonly budget: UsageBudget,
    private readonly live: () => Iterable<MeteredSession>,
    checkpointMs: number,
  ) {
    this.timer = setInterval(() => void this.checkpoint(), checkpointMs);
    this.timer.unref();
  }

  /**
   * Checkpoints every live session (skipped while the previous checkpoint is running): the rows grow
   * and their leases are renewed, also for sessions whose audio did not grow (or has not started: a
   * session killed before any audio still has its row, at 0 s, like one that closed).
   */
  checkpoint(): Promise<void> {
    this.checkpointing ??= (async () => {
      const units = [];
      for (const s of this.live()) {
        units.push({
          keyId: s.principal.keyId,
          plane: 'realtime' as const,
          refId: s.sessionId,
          audioSeconds: s.audioSeconds,
        });
      }
      await this.ledger.checkpoint(units);
    })().finally(() => (this.checkpointing = undefined));
    return this.checkpointing;
  }

  /** The session ended: its exact audio seconds, once; the bill ends the session's reservation. */
  record(keyId: string, sessionId: string, audioSeconds: number): void {
    void this.budget.reservation({ plane: 'realtime', refId: sessionId, keyId }).bill(audioSeconds);
  }

  /** Stops checkpointing; resolves when every record is in Postgres or in the spool. */
  async drain(): Promise<void> {
    clearInterval(this.timer);
    await this.checkpointing;
    await this.ledger.drain();
  }
}
