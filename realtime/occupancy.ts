/**
 * What admission needs to know of the open sessions (utterances queued for
 * the engine, sessions per owner) at a cost that does not grow with them:
 * walking every open session on every upgrade made a fan-in of n sessions
 * cost n² (issue 40). One walk serves every upgrade for SNAPSHOT_MS; the
 * sessions admitted since it are counted on top, so an owner's share is never
 * overrun (a session that ended since still counts until the next walk: the
 * error is on the side of refusing).
 */
import type { RealtimeSession } from './session.js';

/** How long one walk over the open sessions answers admission. */
export const SNAPSHOT_MS = 50;

export class Occupancy {
  private takenAt = -Infinity;
  private queued = 0;
  private byOwner = new Map<string, number>();
  /** Sessions admitted (upgraded) since the last walk, by owner. */
  private readonly since = new Map<string, number>();

  constructor(private readonly sessions: ReadonlySet<RealtimeSession>) {}

  private fresh(): void {
    const now = performance.now();
    if (now - this.takenAt < SNAPSHOT_MS) return;
    this.takenAt = now;
    this.queued = 0;
    this.byOwner = new Map();
    this.since.clear();
    for (const s of this.sessions) {
      this.queued += s.inFlight.utterances;
      if (s.isClosed) continue;
      const owner = s.principal.ownerId;
      this.byOwner.set(owner, (this.byOwner.get(owner) ?? 0) + 1);
    }
  }

  /** Utterances of the open sessions waiting for (or in) the engine, as of the last walk. */
  queuedUtterances(): number {
    this.fresh();
    return this.queued;
  }

  /** Open sessions of `owner`, counting those admitted since the last walk. */
  sessionsOf(owner: string): number {
    this.fresh();
    return (this.byOwner.get(owner) ?? 0) + (this.since.get(owner) ?? 0);
  }

  /** An upgrade of `owner` was accepted: its session counts from now on. */
  admitted(owner: string): void {
    this.since.set(owner, (this.since.get(owner) ?? 0) + 1);
  }
}
