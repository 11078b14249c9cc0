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

/**
 * One access-log line: what `logger.info({reqId, method, path, status, ms,
 * keyId, sample}, 'request')` writes. `sample` (the share of such requests
 * logged, when below 1) lets a reader scale counts; omitted at 1.
 */
export type AccessLogWriter = (
  reqId: string,
  method: string,
  path: string,
  status: number,
  ms: number,
  keyId: string | undefined,
  sample?: number,
) => void;

/** Printable ASCII without `"` or `\`: a JSON string as it is. */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/** A scrubbed string as JSON; JSON.stringify only when something needs escaping (it costs ten times more). */
function jsonString(s: string): string {
  const clean = scrubSecrets(s);
  return PLAIN.test(clean) ? `"${clean}"` : JSON.stringify(clean);
}

/**
 * The access log's line, written once per request, built by concatenation
 * into exactly the JSON that `logger.info({reqId, method, path, status, ms,
 * keyId}, 'request')` writes, to the same stream, with the logger's own level
 * prefix, time and bindings (`pino.symbols`). pino's general path (hooks,
 * formatters, per-key serialisation) costs several times more, on every
 * request. Strings are scrubbed of secrets like every logged string (the
 * request id and path come from the client). Undefined when `info` is off;
 * falls back to `logger.info` when the logger's internals are not as
 * expected (another pino version, a multistream destination).
 */
export function accessLogWriter(logger: Logger): AccessLogWriter | undefined {
  if (!logger.isLevelEnabled('info')) return undefined;
  const fallback: AccessLogWriter = (reqId, method, path, status, ms, keyId, sample) =>
    logger.info(
      {
        reqId,
        method,
        path,
        status,
        ms,
        keyId,
        sample: sample !== undefined && sample < 1 ? sample : undefined,
      },
      'request',
    );
  const l = logger as unknown as Record<symbol, unknown>;
  const sym = pino.symbols as unknown as Record<string, symbol>;
  const prefix = (l[pino.symbols.lsCacheSym] as Record<number, string> | undefined)?.[
    logger.levels.values.info
  ];
  const time = l[pino.symbols.timeSym];
  const bindings = l[pino.symbols.chindingsSym];
  const end = l[pino.symbols.endSym];
  const stream = l[pino.symbols.streamSym] as (DestinationStream & Record<symbol, unknown>) | undefined;
  const plain =
    typeof prefix === 'string' &&
    typeof time === 'function' &&
    typeof bindings === 'string' &&
    typeof end === 'string' &&
    typeof stream?.write === 'function' &&
    !stream[pino.symbols.needsMetadataGsym] &&
    !l[pino.symbols.mixinSym] &&
    !l[sym.msgPrefixSym] &&
    l[pino.symbols.messageKeySym] === 'msg';
  if (!plain) return fallback;
  const now = time as () => string;
  return (reqId, method, path, status, ms, keyId, sample) => {
    const key = keyId === undefined ? '' : `,"keyId":${jsonString(keyId)}`;
    const sampled = sample !== undefined && sample < 1 ? `,"sample":${sample}` : '';
    stream.write(
      `${prefix}${now()}${bindings},"reqId":${jsonString(reqId)},"method":${jsonString(method)},"path":${jsonString(path)},"status":${status},"ms":${ms}${key}${sampled},"msg":"request"${end}`,
    );
  };
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
 * Log lines are buffered and written to stdout in batches of about 4 KiB
 * (or every 250 ms) instead of one write system call per line: at thousands
 * of requests per second that is the largest cost of an access log. The lines
 * are joined here and handed to pino's sonic-boom destination a batch at a
 * time (handed each line, sonic-boom measures the UTF-8 length of its whole
 * pending buffer on every write, which cost more than formatting the line),
 * and sonic-boom writes each batch synchronously, pino's default for stdout:
 * one write system call per batch, without a hand-off to libuv's thread pool
 * and back. All loggers of a process share one stdout destination. Buffered
 * lines are written at exit.
 */
class BatchedStdout implements DestinationStream {
  private lines: string[] = [];
  private size = 0;

  constructor(
    private readonly sink: ReturnType<typeof pino.destination>,
    private readonly batchChars: number,
  ) {}

  write(line: string): void {
    this.lines.push(line);
    this.size += line.length;
    if (this.size >= this.batchChars) this.drain();
  }

  /** Hands buffered lines to sonic-boom, which writes them when its previous write has finished. */
  drain(): void {
    if (this.size === 0) return;
    const chunk = this.lines.length === 1 ? this.lines[0] : this.lines.join('');
    this.lines = [];
    this.size = 0;
    this.sink.write(chunk);
  }

  /** pino's `logger.flush(cb)`. */
  flush(cb?: (err?: Error) => void): void {
    this.drain();
    if (cb) this.sink.flush(cb);
  }

  flushSync(): void {
    this.drain();
    this.sink.flushSync();
  }
}

let stdout: BatchedStdout | undefined;

function stdoutDestination(): DestinationStream {
  if (stdout) return stdout;
  const out = (stdout = new BatchedStdout(pino.destination({ dest: 1, sync: true }), 4096));
  setInterval(() => out.drain(), 250).unref();
  process.once('exit', () => {
    try {
      out.flushSync();
    } catch {
      // stdout already closed: nothing more can be written
    }
  });
  return out;
}
