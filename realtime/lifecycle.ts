/**
 * The life of admitted streams: a `RealtimeSession` per WebSocket (open,
 * messages, close), the housekeeping tick, usage and lease release when a
 * session ends, and the graceful shutdown that drains them all.
 */
import type { Logger } from 'pino';
import type { WebSocket, WebSocketBehavior } from 'uWebSockets.js';
import type { RealtimeConfig } from '../shared/config/realtime.js';
import * as metrics from './metrics.js';
import type { SocketData } from './admission.js';
import type { UsageMeter } from './metering.js';
import type { ConnectionQuota } from './quota.js';
import { OpenAIProtocol } from './openai.js';
import { RealtimeSession, type CloseKind, type SessionDeps, type Transport } from './session.js';

export interface LifecycleDeps {
  rt: RealtimeConfig;
  session: SessionDeps;
  quota: ConnectionQuota;
  meter: UsageMeter;
  log: Logger;
}

export class SessionLifecycle {
  private stopping = false;
  private readonly tick: NodeJS.Timeout;
  /**
   * Open connections by owner, exact: counted when a session opens, no longer once its connection
   * closes or it ends, whichever comes first (admission's owner share, issue 41).
   */
  private readonly byOwner = new Map<string, number>();
  private readonly counted = new WeakSet<RealtimeSession>();

  constructor(
    /** The open sessions (shared with admission, endpoints and the meter). */
    readonly sessions: Set<RealtimeSession>,
    private readonly deps: LifecycleDeps,
  ) {
    this.tick = setInterval(() => {
      for (const s of sessions) s.tick();
    }, deps.rt.tickMs);
    this.tick.unref();
  }

  /** False once the instance stops serving: shutdown or `stopServing`. */
  get serving(): boolean {
    return !this.stopping;
  }

  /** No new sessions from now on (admission refuses, /readyz turns 503). */
  stopServing(): void {
    this.stopping = true;
  }

  endAll(kind: CloseKind): void {
    for (const s of [...this.sessions]) s.end(kind);
  }

  /** Sessions of `owner` whose connection is open on this instance. */
  openSessionsOf(owner: string): number {
    return this.byOwner.get(owner) ?? 0;
  }

  private uncount(s: RealtimeSession): void {
    if (!this.counted.has(s)) return;
    this.counted.delete(s);
    const owner = s.principal.ownerId;
    const n = (this.byOwner.get(owner) ?? 1) - 1;
    if (n > 0) this.byOwner.set(owner, n);
    else this.byOwner.delete(owner);
  }

  /** The stream path's WebSocket handlers. */
  handlers(): Pick<WebSocketBehavior<SocketData>, 'open' | 'message' | 'close'> {
    return {
      open: (ws) => this.open(ws),
      message: (ws, message, isBinary) => {
        const s = ws.getUserData().session;
        if (!s) return;
        try {
          if (isBinary) s.onBinary(message);
          else s.onText(new Uint8Array(message));
        } catch (err) {
          this.deps.log.error({ err, sessionId: s.sessionId }, 'unexpected error handling a client message');
          s.end('clientError');
        }
      },
      close: (ws, code, message) => {
        const data = ws.getUserData();
        data.closed = true;
        if (data.session) this.uncount(data.session);
        data.session?.onTransportClosed(code, Buffer.from(message).toString('utf8'));
      },
    };
  }

  private open(ws: WebSocket<SocketData>): void {
    const { quota, meter, log } = this.deps;
    const data = ws.getUserData();
    const transport: Transport = {
      send: (text) => {
        if (!data.closed) ws.cork(() => ws.send(text, false));
      },
      bufferedAmount: () => (data.closed ? 0 : ws.getBufferedAmount()),
      close: (code, reason) => {
        if (data.closed) return;
        data.closed = true;
        ws.cork(() => ws.end(code, reason));
      },
    };
    const session = new RealtimeSession(
      data.principal,
      data.remainingWindowSeconds,
      transport,
      this.deps.session,
      {
        sessionId: data.sessionId,
        requestId: data.requestId,
      },
      data.openai ? new OpenAIProtocol(data.openai) : undefined,
    );
    data.session = session;
    this.sessions.add(session);
    this.counted.add(session);
    const owner = session.principal.ownerId;
    this.byOwner.set(owner, (this.byOwner.get(owner) ?? 0) + 1);
    metrics.sessionsOpen.inc();
    session.onEnded = (s) => {
      this.uncount(session);
      this.sessions.delete(session);
      metrics.sessionsOpen.dec();
      metrics.sessionsClosed.inc({ reason: metrics.closeLabel(s.closeCode, s.closeReason) });
      metrics.audioSeconds.inc(s.audioSeconds);
      void quota.release(s.sessionId);
      meter.record(s.keyId, s.sessionId, s.audioSeconds);
      log.info(
        {
          sessionId: s.sessionId,
          keyId: s.keyId,
          audioSeconds: s.audioSeconds,
          code: s.closeCode,
          reason: s.closeReason,
        },
        'realtime session ended',
      );
    };
    // session.created goes out once the upgrade call has returned, not inside it: uWebSockets.js 20.57's
    // HttpResponse.cork() can close a socket upgraded inside it (it misreads the new WebSocket's memory
    // as the HTTP response's state; uNetworking/uWebSockets#1929, fixed upstream, in no npm build yet).
    // A client then sees the connection end before any session existed, never a session cut short.
    queueMicrotask(() => {
      if (!data.closed) session.start();
    });
  }

  /**
   * Stops serving and drains: sessions finish their open utterance and get the transcripts
   * in flight (bounded by closeDrainMs), then close 1001.
   */
  async drain(): Promise<void> {
    this.stopping = true;
    clearInterval(this.tick);
    this.endAll('goingAway');
    const drainedBy = Date.now() + this.deps.rt.closeDrainMs + 1000;
    while (this.sessions.size > 0 && Date.now() < drainedBy) await new Promise((r) => setTimeout(r, 20));
  }
}
