/**
 * The utterances of the open sessions queued for the engine, which admission
 * weighs, at a cost that does not grow with the sessions: walking every open
 * session on every upgrade made a fan-in of n sessions cost n² (issue 40).
 * One walk serves every upgrade for SNAPSHOT_MS. (Sessions per owner are
 * counted exactly by SessionLifecycle: a snapshot here counted a session that
 * had just ended, and refused a tenant reconnecting within 50 ms with none
 * open.)
 */
import type { RealtimeSession } from './session.js';

/** How long one walk over the open sessions answers admission. */
export const SNAPSHOT_MS = 50;

export class Occupancy {
  private takenAt = -Infinity;
  private queued = 0;

  constructor(private readonly sessions: ReadonlySet<RealtimeSession>) {}

  private fresh(): void {
    const now = performance.now();
    if (now - this.takenAt < SNAPSHOT_MS) return;
    this.takenAt = now;
    this.queued = 0;
    for (const s of this.sessions) this.queued += s.inFlight.utterances;
  }

  /** Utterances of the open sessions waiting for (or in) the engine, as of the last walk. */
  queuedUtterances(): number {
    this.fresh();
    return this.queued;
  }
}
