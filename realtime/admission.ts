/**
 * Who may open a stream: the WebSocket upgrade checks, in the order of
 * interface 4.8: 426 websocket_required (answered by the endpoints),
 * 503 gateway_disabled, 503 upstream_unavailable (+ Retry-After) while the
 * breaker is open or the instance is at capacity, 503 usage_unavailable,
 * then authentication and quota. The per-key quota needs the key's identity,
 * so the credential is verified first (cached, cheap); a caller that fails
 * authentication consumes no quota.
 *
 * uWS upgrade handlers are synchronous: headers are read up front, the
 * async checks run after `onAborted` is attached, and the upgrade (or the
 * refusal) is written inside `cork` only if the client is still there.
 */
import type { Logger } from 'pino';
import type { HttpRequest, HttpResponse, us_socket_context_t } from 'uWebSockets.js';
import type { RealtimeConfig } from '../shared/config/realtime.js';
import { Authenticator, authFailure, type AuthResult, type Principal } from '../shared/auth/index.js';
import type { UsageLedger } from '../shared/usage.js';
import type { UsageBudget } from '../shared/usage/budget.js';
import * as metrics from './metrics.js';
import type { CircuitBreaker } from './breaker.js';
import type { ConnectionQuota } from './quota.js';
import { newRequestId, newSessionId, type RealtimeSession } from './session.js';
import { errorBody, writeJson } from './reply.js';
import { clientAddress } from '../shared/http/clientAddress.js';
import type { OpenAIConnect } from './openai.js';
import { Occupancy } from './occupancy.js';

/** What an admitted upgrade hands to its WebSocket (uWS user data). */
export interface SocketData {
  principal: Principal;
  sessionId: string;
  requestId: string;
  remainingWindowSeconds: number;
  /** Set on `/v1/realtime`: the session speaks OpenAI's protocol (realtime/openai.ts). */
  openai?: OpenAIConnect;
  session?: RealtimeSession;
  closed: boolean;
}

type Credential = { token?: string; failure?: ReturnType<typeof authFailure> & { message: string } };

/** Authorization header (sk- or rt_) or `?access_token=` / `?token=` (rt_ only: an sk- key never travels in a URL). */
export function realtimeCredential(authorization: string, query: string): Credential {
  const params = new URLSearchParams(query);
  const given = [...params.getAll('access_token'), ...params.getAll('token')].filter((v) => v !== '');
  const q = given[0] ?? null;
  // A key in a URL has leaked (logs, history, referrers): refuse it even next to a valid header,
  // whichever parameter or repetition carries it.
  if (given.some((v) => !v.startsWith('rt_'))) {
    return {
      failure: {
        ...authFailure('invalid_api_key'),
        message: 'Only rt_ session tokens may be sent in the URL; send sk- keys in the Authorization header.',
      },
    };
  }
  if (authorization) {
    const b = Authenticator.bearer(authorization);
    return b.failure ? { failure: b.failure } : { token: b.token };
  }
  if (q === null || q === '') return { failure: authFailure('missing_api_key') };
  return { token: q };
}

/** The browser form of OpenAI's clients: the key rides in a subprotocol next to `realtime`. */
const KEY_SUBPROTOCOL = 'openai-insecure-api-key.';

/**
 * Credentials on `/v1/realtime`: as on the stream (header, `rt_` in the query), or an `rt_` token in
 * the `openai-insecure-api-key.` subprotocol that browsers send (a subprotocol is as exposed as a URL:
 * an `sk-` key there is refused).
 */
export function openaiCredential(authorization: string, query: string, protocols: string): Credential {
  const offered = protocols.split(',').map((p) => p.trim());
  const sub = offered.find((p) => p.startsWith(KEY_SUBPROTOCOL))?.slice(KEY_SUBPROTOCOL.length);
  if (sub !== undefined && !sub.startsWith('rt_')) {
    return {
      failure: {
        ...authFailure('invalid_api_key'),
        message:
          'Only rt_ client secrets may be sent in a subprotocol; send sk- keys in the Authorization header.',
      },
    };
  }
  return realtimeCredential(authorization || (sub ? `Bearer ${sub}` : ''), query);
}

/** The subprotocol answered on `/v1/realtime`: `realtime` when offered (never the one carrying the key). */
export function openaiSubprotocol(protocols: string): string {
  return protocols
    .split(',')
    .map((p) => p.trim())
    .includes('realtime')
    ? 'realtime'
    : '';
}

export type Dialect = 'native' | 'openai';

export interface AdmissionDeps {
  rt: RealtimeConfig;
  auth: Authenticator;
  ledger: UsageLedger;
  /** The process's audio budget: each session reserves what it may use of its key's window. */
  budget: UsageBudget;
  breaker: CircuitBreaker;
  quota: ConnectionQuota;
  sessions: ReadonlySet<RealtimeSession>;
  /** Open sessions of an owner on this instance, exact (SessionLifecycle.openSessionsOf). */
  openSessionsOf: (ownerId: string) => number;
  /** False once the instance stops serving (shutdown, VAD failure). */
  serving: () => boolean;
  /** TRUST_PROXY: proxies in front that append to X-Forwarded-For (the client address for pre-auth bounds). */
  proxyHops: number;
  log: Logger;
}

export type UpgradeHandler = (res: HttpResponse, req: HttpRequest, context: us_socket_context_t) => void;

/** The `upgrade` handlers of the stream path (`native`) and of `/v1/realtime` (`openai`); one count of upgrades in progress. */
export function admission(deps: AdmissionDeps): (dialect?: Dialect) => UpgradeHandler {
  const { rt, breaker, quota, sessions, log } = deps;

  // Overload refuses new sessions early (before auth) so that open ones keep their utterances.
  // Authenticated upgrades between their check and their session's start count as sessions; upgrades
  // whose credential is still being checked do not (made-up keys took real tenants' places, issue 36):
  // they are bounded on their own, per instance and per client address.
  let admitting = 0;
  const occupancy = new Occupancy(sessions);
  /** Authenticated upgrades not yet sessions, by owner (they count toward the owner's share). */
  const admittingByOwner = new Map<string, number>();
  let authenticating = 0;
  const authenticatingBySource = new Map<string, number>();
  const leaveAuthenticating = (source: string) => {
    authenticating--;
    const n = (authenticatingBySource.get(source) ?? 1) - 1;
    if (n > 0) authenticatingBySource.set(source, n);
    else authenticatingBySource.delete(source);
  };
  const atCapacity = () => {
    const { maxSessions, maxQueuedUtterances } = rt.overload;
    if (maxSessions > 0 && sessions.size + admitting >= maxSessions) return true;
    if (maxQueuedUtterances <= 0) return false;
    return occupancy.queuedUtterances() >= maxQueuedUtterances;
  };

  // One owner holds at most its share of the instance (REALTIME_OWNER_SHARE), so that one tenant's
  // many connections cannot take every place while another tenant's are refused (issue 41).
  const ownerCap = () => {
    const { maxSessions, ownerSharePercent } = rt.overload;
    if (maxSessions <= 0 || ownerSharePercent >= 100) return Infinity;
    return Math.max(1, Math.floor((maxSessions * ownerSharePercent) / 100));
  };
  const overOwnerShare = (ownerId: string) => {
    const cap = ownerCap();
    if (cap === Infinity) return false;
    return (admittingByOwner.get(ownerId) ?? 0) + deps.openSessionsOf(ownerId) >= cap;
  };

  return (dialect = 'native') =>
    (res, req, context) => {
      const secKey = req.getHeader('sec-websocket-key');
      const offeredProtocols = req.getHeader('sec-websocket-protocol');
      const openai = dialect === 'openai';
      const secProtocol = openai ? openaiSubprotocol(offeredProtocols) : offeredProtocols;
      const openaiConnect: OpenAIConnect | undefined = openai
        ? {
            beta: /realtime=v1/.test(req.getHeader('openai-beta')),
            model: new URLSearchParams(req.getQuery() ?? '').get('model') ?? undefined,
          }
        : undefined;
      const secExtensions = req.getHeader('sec-websocket-extensions');
      const authorization = req.getHeader('authorization');
      const query = req.getQuery() ?? '';
      const source = clientAddress(
        req.getHeader('x-forwarded-for'),
        Buffer.from(res.getRemoteAddressAsText()).toString(),
        deps.proxyHops,
      );
      let aborted = false;
      res.onAborted(() => {
        aborted = true;
      });
      const refuse = (
        status: number,
        code: string,
        message: string,
        headers: Record<string, string> = {},
      ) => {
        metrics.upgrades.inc({ outcome: code });
        if (aborted) return;
        res.cork(() => writeJson(res, status, errorBody(code, message), headers));
      };

      if (!deps.serving() || !rt.enabled)
        return refuse(503, 'gateway_disabled', 'The realtime gateway is disabled.');
      if (breaker.isOpen) {
        const retry = Math.max(1, Math.ceil(breaker.retryAfterMs() / 1000));
        return refuse(503, 'upstream_unavailable', 'The speech upstream is unavailable; retry later.', {
          'retry-after': String(retry),
        });
      }
      if (atCapacity()) {
        return refuse(503, 'upstream_unavailable', 'This realtime instance is at capacity; retry later.', {
          'retry-after': String(rt.overload.retryAfterSeconds),
        });
      }
      if (!deps.ledger.accepting) {
        // Postgres has been unreachable so long that the usage spool is full: no unbilled sessions.
        return refuse(503, 'usage_unavailable', 'Usage cannot be recorded right now; retry later.', {
          'retry-after': '30',
        });
      }
      const cred = openai
        ? openaiCredential(authorization, query, offeredProtocols)
        : realtimeCredential(authorization, query);
      if (cred.failure) return refuse(cred.failure.status, cred.failure.code, cred.failure.message);
      const { maxAuthenticating, maxAuthenticatingPerSource } = rt.overload;
      if ((authenticatingBySource.get(source) ?? 0) >= maxAuthenticatingPerSource) {
        return refuse(
          429,
          'rate_limit_exceeded',
          'Too many upgrades from this address at once; retry later.',
          {
            'retry-after': '1',
          },
        );
      }
      if (authenticating >= maxAuthenticating) {
        return refuse(503, 'upstream_unavailable', 'This realtime instance is at capacity; retry later.', {
          'retry-after': String(rt.overload.retryAfterSeconds),
        });
      }

      authenticating++;
      authenticatingBySource.set(source, (authenticatingBySource.get(source) ?? 0) + 1);
      /** The owner whose place this upgrade holds once authenticated (released when it is a session or refused). */
      let counted: string | undefined;
      void (async () => {
        let auth: AuthResult;
        try {
          auth = await deps.auth.authenticate(cred.token!);
        } catch {
          auth = authFailure('auth_unavailable');
        } finally {
          leaveAuthenticating(source);
        }
        // A dependency refusal (the key store unreachable) says when to retry, as the API's does.
        if (!auth.ok)
          return refuse(
            auth.status,
            auth.code,
            auth.message,
            auth.status === 503 ? { 'retry-after': '2' } : undefined,
          );
        if (aborted) return;
        // Authenticated: from here the upgrade holds a session's place (checked again: others may
        // have been admitted while this one was being authenticated).
        if (atCapacity()) {
          return refuse(503, 'upstream_unavailable', 'This realtime instance is at capacity; retry later.', {
            'retry-after': String(rt.overload.retryAfterSeconds),
          });
        }
        const principal = auth.principal;
        const owner = principal.ownerId;
        if (overOwnerShare(owner)) {
          return refuse(
            503,
            'upstream_unavailable',
            "This realtime instance holds its share of this tenant's sessions; retry later.",
            { 'retry-after': String(rt.overload.retryAfterSeconds) },
          );
        }
        admitting++;
        admittingByOwner.set(owner, (admittingByOwner.get(owner) ?? 0) + 1);
        counted = owner;
        const sessionId = newSessionId();
        const admitted = await quota.admit(principal.keyId, principal.limits, sessionId);
        if (!admitted.ok) {
          return refuse(admitted.status, admitted.code, admitted.message, {
            'retry-after': String(admitted.retryAfterSeconds),
          });
        }
        // The session reserves what it may use of the window (its rest, at most the plan's audio per
        // session), so concurrent sessions cannot overspend it; the reservation ends once it is billed.
        const limits = principal.limits;
        let budget = Math.min(limits.maxAudioSecondsPerSession, limits.maxAudioSecondsPerWindow);
        const reservation = deps.budget.reservation({
          plane: 'realtime',
          refId: sessionId,
          keyId: principal.keyId,
        });
        let reserved = false;
        try {
          const decision = await reservation.reserveUpTo({
            seconds: budget,
            limit: limits.maxAudioSecondsPerWindow,
            ttlSeconds: limits.maxSessionSeconds + 60,
          });
          reserved = decision.ok;
          // Nothing left: admitted, and ended at once with 1008 audio_quota_exhausted (interface 7.3).
          budget = decision.ok ? decision.seconds : limits.maxAudioSecondsPerWindow - decision.used;
          // Audio is billed to the millisecond: less than one left (a sum of bills a float residue short
          // of the window) is nothing left, not a session held open until its first frame.
          budget = Math.max(0, Math.floor(budget * 1000 + 1e-6) / 1000);
        } catch (err) {
          log.warn({ err }, 'could not reserve window usage; admitting with the per-session audio limit');
        }
        if (aborted || !deps.serving()) {
          await quota.release(sessionId);
          // No session, no bill: nothing else would end the reservation before its TTL (the plan's
          // session length + 60 s), and the key's window would stay short by it until then.
          if (reserved) await reservation.release();
          return;
        }
        const data: SocketData = {
          principal,
          sessionId,
          requestId: newRequestId(),
          remainingWindowSeconds: budget,
          closed: false,
          ...(openaiConnect && { openai: openaiConnect }),
        };
        metrics.upgrades.inc({ outcome: 'accepted' });
        res.cork(() => res.upgrade(data, secKey, secProtocol, secExtensions, context));
        // Closed before res.cork returned: uWebSockets' cork bug (realtime/lifecycle.ts), not the client.
        if (data.closed)
          log.warn(
            { sessionId },
            'the connection closed inside its upgrade (uWebSockets async-upgrade cork bug); no session was created',
          );
      })()
        .catch((err) => {
          log.error({ err }, 'realtime upgrade failed');
          refuse(503, 'upstream_unavailable', 'Upgrade failed; retry later.', { 'retry-after': '1' });
        })
        .finally(() => {
          if (counted === undefined) return;
          admitting--;
          const n = (admittingByOwner.get(counted) ?? 1) - 1;
          if (n > 0) admittingByOwner.set(counted, n);
          else admittingByOwner.delete(counted);
        });
    };
}
