/**
 * The process-wide failure policy, installed the same way by every process
 * (API, realtime, engine worker, embedded start):
 *
 * - An unhandled promise rejection is a bug somewhere, never a reason to
 *   stop serving every other tenant: it is logged (error level, once per
 *   distinct message per minute) and counted, and the process carries on.
 * - An uncaught exception that is a dependency's failure (a Postgres or
 *   Redis socket dropping, a refused connection) is logged and survived:
 *   the pools reconnect by themselves when the dependency returns.
 * - Any other uncaught exception leaves the process in an unknown state: it
 *   is logged as fatal and the process exits with code 70, after a bounded
 *   graceful stop, so its supervisor (the embedded start, systemd,
 *   Kubernetes, compose) starts a clean one.
 *
 *   installFailurePolicy(logger, { onFatal: () => api.stop() });
 */
import type { Logger } from 'pino';
import { isDiskFull } from '../disk.js';

/** Socket and Postgres error codes that mean "the dependency is not reachable right now". */
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'EPIPE',
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '53300', // too_many_connections
  '08000',
  '08006',
  '08001',
  '08003',
]);

const UNAVAILABLE_MESSAGES =
  /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect|Connection is closed|Client has encountered a connection error|the database system is (starting up|shutting down)|terminating connection due to administrator command|MaxRetriesPerRequest|Stream isn't writeable|Query read timeout/i;

/** True for errors that mean a dependency (Postgres, Redis, S3, an engine) could not be reached. */
export function isDependencyUnavailable(err: unknown, depth = 0): boolean {
  const e = err as { code?: unknown; name?: string; message?: string; errors?: unknown[]; cause?: unknown };
  if (!e || typeof e !== 'object' || depth > 4) return false;
  if (typeof e.code === 'string' && UNAVAILABLE_CODES.has(e.code)) return true;
  if (e.name === 'KnexTimeoutError' || e.name === 'MaxRetriesPerRequestError') return true;
  // Our own disk full (ENOSPC, EDQUOT): a condition of the machine, not of the input; it passes.
  if (isDiskFull(e)) return true;
  if (Array.isArray(e.errors) && e.errors.some((x) => isDependencyUnavailable(x, depth + 1))) return true;
  if (e.cause && isDependencyUnavailable(e.cause, depth + 1)) return true;
  return UNAVAILABLE_MESSAGES.test(typeof e.message === 'string' ? e.message : '');
}

export interface FailurePolicyOptions {
  /** Graceful stop before a fatal exit (bounded by `fatalGraceMs`). */
  onFatal?: () => unknown;
  fatalGraceMs?: number;
  /** Tests: what happens instead of process.exit. */
  exit?: (code: number) => void;
}

export interface FailurePolicy {
  /** Rejections and survived exceptions seen so far (for /metrics and tests). */
  readonly counts: { unhandledRejections: number; survivedExceptions: number };
  uninstall(): void;
}

/** Exit code of a process stopped by an unexpected exception (EX_SOFTWARE). */
export const FATAL_EXIT_CODE = 70;

let installed: FailurePolicy | undefined;

export function installFailurePolicy(logger: Logger, opts: FailurePolicyOptions = {}): FailurePolicy {
  installed?.uninstall();
  const exit = opts.exit ?? ((code: number) => process.exit(code));
  const counts = { unhandledRejections: 0, survivedExceptions: 0 };
  // One line per distinct failure per minute: a failing dependency must not flood the log.
  const lastLogged = new Map<string, number>();
  const shouldLog = (key: string) => {
    const now = Date.now();
    if ((lastLogged.get(key) ?? 0) > now - 60_000) return false;
    if (lastLogged.size > 1000) lastLogged.clear();
    lastLogged.set(key, now);
    return true;
  };
  const keyOf = (err: unknown) =>
    `${(err as Error)?.name ?? typeof err}:${String((err as Error)?.message ?? err).slice(0, 200)}`;

  const onRejection = (reason: unknown) => {
    counts.unhandledRejections++;
    if (!shouldLog(keyOf(reason))) return;
    if (isDependencyUnavailable(reason))
      logger.warn({ err: reason }, 'unhandled rejection: dependency unavailable');
    else logger.error({ err: reason }, 'unhandled rejection (the process continues)');
  };
  let dying = false;
  const onException = (err: unknown) => {
    if (isDependencyUnavailable(err)) {
      counts.survivedExceptions++;
      if (shouldLog(keyOf(err))) logger.warn({ err }, 'dependency connection failed; continuing');
      return;
    }
    logger.fatal({ err }, 'uncaught exception: the process stops so its supervisor starts a clean one');
    if (dying) return;
    dying = true;
    const grace = new Promise((r) => setTimeout(r, opts.fatalGraceMs ?? 5000).unref());
    void Promise.race([Promise.resolve().then(() => opts.onFatal?.()), grace])
      .catch(() => {})
      .finally(() => exit(FATAL_EXIT_CODE));
  };
  process.on('unhandledRejection', onRejection);
  process.on('uncaughtException', onException);
  const policy: FailurePolicy = {
    counts,
    uninstall() {
      process.off('unhandledRejection', onRejection);
      process.off('uncaughtException', onException);
      if (installed === policy) installed = undefined;
    },
  };
  installed = policy;
  return policy;
}
