/**
 * Structured logging (pino). Secrets never reach a log line: known secret
 * fields are redacted by path, and every string is scrubbed of anything that
 * looks like an API key (sk-…), a session token (rt_…) or a bearer credential.
 */
import pino, { type Logger, type DestinationStream } from 'pino';

export type { Logger };

const SECRET_PATTERN = /\b(sk-[A-Za-z0-9_-]{6,}|rt_[A-Za-z0-9._-]{6,})|(Bearer\s+)[^\s"']+/g;

const MARKERS = /sk-|rt_|Bearer/i;

export function scrubSecrets(text: string): string {
  if (!MARKERS.test(text)) return text;
  return text.replace(SECRET_PATTERN, (_m, tok: string | undefined, bearer: string | undefined) =>
    bearer ? `${bearer}[redacted]` : `${tok!.slice(0, 3)}[redacted]`,
  );
}

function scrubDeep(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return scrubSecrets(value);
  if (depth > 6 || value === null || typeof value !== 'object') return value;
  if (depth === 0 && isFlatAndClean(value as Record<string, unknown>)) return value;
  if (Array.isArray(value)) return value.map((v) => scrubDeep(v, depth + 1));
  if (value instanceof Error) {
    return { type: value.name, message: scrubSecrets(value.message), stack: scrubSecrets(value.stack ?? '') };
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = scrubDeep(v, depth + 1);
  return out;
}

/** The common case (an access-log line): flat primitives, no secret markers. Checked without copying. */
function isFlatAndClean(obj: Record<string, unknown>): boolean {
  for (const k in obj) {
    const v = obj[k];
    if (typeof v === 'string') {
      if (MARKERS.test(v)) return false;
    } else if (v !== null && typeof v === 'object') {
      return false;
    }
  }
  return true;
}

export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'authorization',
  'key',
  'token',
  'secret',
  'adminToken',
  'sessionTokenSecret',
  'password',
];

export function createLogger(
  opts: { level?: string; name?: string } = {},
  destination?: DestinationStream,
): Logger {
  return pino(
    {
      level: opts.level ?? 'info',
      name: opts.name,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      formatters: {
        log: (obj) => scrubDeep(obj) as Record<string, unknown>,
      },
      hooks: {
        logMethod(args, method) {
          const scrubbed = args.map((a) => (typeof a === 'string' ? scrubSecrets(a) : a));
          return method.apply(this, scrubbed as Parameters<typeof method>);
        },
      },
      serializers: { err: (e: Error) => scrubDeep(e) },
    },
    destination ?? stdoutDestination(),
  );
}

/**
 * stdout, shared by every logger of a process: pino's own destination
 * (sonic-boom), buffered: lines are written in batches of at least 4 KiB,
 * and whatever is buffered at least every 250 ms, instead of one write
 * system call per line (at thousands of requests a second that is the
 * largest cost of an access log). Each batch is written synchronously,
 * pino's default for stdout (measured cheaper than its asynchronous mode,
 * which hands every write to libuv's thread pool and back), so a stdout
 * that blocks slows the process rather than growing memory. What is still
 * buffered is written when the process exits, also after a crash.
 */
let stdout: ReturnType<typeof pino.destination> | undefined;

function stdoutDestination(): DestinationStream {
  if (stdout) return stdout;
  const out = (stdout = pino.destination({ dest: 1, minLength: 4096, sync: true, periodicFlush: 250 }));
  process.once('exit', () => {
    try {
      out.flushSync();
    } catch {
      // stdout already closed: nothing more can be written
    }
  });
  return out;
}
