/**
 * Realtime usage through the usage ledger: every USAGE_CHECKPOINT_MS one
 * batched checkpoint of the instance's live sessions whose audio grew (their
 * rows grow and hold a lease, so the audio counts against the key's window
 * while the session runs, and a killed instance leaves its last checkpoint),
 * and one final record per session when it ends, whatever the reason, keyed
 * by the session id. Shutdown waits until every record is in Postgres or in
 * the ledger's spool.
 */
import type { UsageLedger } from '../shared/usage.js';

export interface MeteredSession {
  readonly sessionId: string;
  readonly audioSeconds: number;
  readonly principal: { keyId: string };
}

export class UsageMeter {
  /** Audio seconds last checkpointed, per live session. */
  private readonly checkpointed = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private checkpointing: Promise<void> | undefined;

  constructor(
    private readonly ledger: UsageLedger,
    private readonly live: () => Iterable<MeteredSession>,
    checkpointMs: number,
  ) {
    this.timer = setInterval(() => void this.checkpoint(), checkpointMs);
    this.timer.unref();
  }

  /** Checkpoints the live sessions whose audio grew since their last checkpoint (skipped while one is running). */
  checkpoint(): Promise<void> {
    this.checkpointing ??= (async () => {
      const units = [];
      for (const s of this.live()) {
        const seconds = s.audioSeconds;
        if (seconds <= (this.checkpointed.get(s.sessionId) ?? 0)) continue;
        this.checkpointed.set(s.sessionId, seconds);
        units.push({
          keyId: s.principal.keyId,
          plane: 'realtime' as const,
          refId: s.sessionId,
          audioSeconds: seconds,
        });
      }
      await this.ledger.checkpoint(units);
    })().finally(() => (this.checkpointing = undefined));
    return this.checkpointing;
  }

  /** The session ended: its exact audio seconds, once. */
  record(keyId: string, sessionId: string, audioSeconds: number): void {
    this.checkpointed.delete(sessionId);
    void this.ledger.record({ keyId, plane: 'realtime', refId: sessionId, audioSeconds });
  }

  /** Stops checkpointing; resolves when every record is in Postgres or in the spool. */
  async drain(): Promise<void> {
    clearInterval(this.timer);
    await this.checkpointing;
    await this.ledger.drain();
  }
}
