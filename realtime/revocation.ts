/**
 * Revocation and expiry reach open sessions (issue 22). Authentication
 * happens once, at the upgrade; a key revoked afterwards (or reaching its
 * expiry) would otherwise keep its sessions transcribing, billed to it,
 * until the client left. Every `intervalMs` each realtime instance looks up
 * the keys of its own open sessions in Postgres (one query for all of them)
 * and ends those whose key is no longer active: 1008 `api_key_revoked` or
 * `api_key_expired`, after their utterances in flight are answered, metered
 * as every close is. Sessions opened with an `rt_` token carry the key that
 * minted it, so they end too. Each instance checks its own sessions, so the
 * revocation reaches every instance within one interval, with or without
 * Redis. While Postgres cannot be asked, sessions carry on (the next check
 * catches up).
 */
import type { Logger } from 'pino';
import type { KeyStore } from '../shared/auth/index.js';
import type { RealtimeSession } from './session.js';

export class RevocationWatch {
  private readonly timer: NodeJS.Timeout;
  private checking = false;

  constructor(
    private readonly sessions: Set<RealtimeSession>,
    private readonly keys: Pick<KeyStore, 'statuses'>,
    intervalMs: number,
    private readonly log: Logger,
  ) {
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  async check(): Promise<void> {
    if (this.checking || this.sessions.size === 0) return;
    this.checking = true;
    try {
      // Only the sessions asked about: one that opened while the query ran is checked next time (its key
      // is not in the answer, and a key missing from the answer is a deleted one).
      const asked = [...this.sessions];
      const statuses = await this.keys.statuses([...new Set(asked.map((s) => s.principal.keyId))]);
      for (const s of asked) {
        if (!this.sessions.has(s)) continue;
        const status = statuses.get(s.principal.keyId) ?? 'revoked';
        if (status === 'active') continue;
        this.log.info(
          { sessionId: s.sessionId, keyId: s.principal.keyId, status },
          'key no longer active; ending its session',
        );
        s.end(status === 'expired' ? 'keyExpired' : 'keyRevoked');
      }
    } catch (err) {
      this.log.warn({ err }, 'could not check the keys of open sessions; they carry on until the next check');
    } finally {
      this.checking = false;
    }
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
