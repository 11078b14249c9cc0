/**
 * A real realtime server for tests: its own database, real uWS, real auth and
 * limits (memory or Redis), a real speech engine (the built-in one, or real
 * engine/ worker processes through the remote pool, see upstream.ts), and a
 * real `ws` client that streams the clips of test/audio.
 */
import path from 'node:path';
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { fork, type ChildProcess } from 'node:child_process';
import { Writable } from 'node:stream';
import WebSocket from 'ws';
import { loadConfig, type Config, type ConfigOverrides } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import type { Knex } from 'knex';
import { Authenticator, KeyStore } from '../../shared/auth/index.js';
import type { LimitsDriver } from '../../shared/limits/index.js';
import type { SpeechEngine } from '../../shared/stt/types.js';
import { createSpeechEngine } from '../../shared/stt/index.js';
import { loadVad } from '../../realtime/vad/factory.js';
import type { Vad } from '../../realtime/vad/vad.js';
import { InlineVad, type VadService } from '../../realtime/vad/service.js';
import { startRealtime, type RunningRealtime } from '../../realtime/server.js';
import { createPlatform } from '../../shared/platform.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/db.js';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const AUDIO_DIR = path.resolve(repoRoot, 'test/audio');
export const SESSION_SECRET = 'rt-test-secret-' + randomBytes(6).toString('hex');

/** 16 kHz mono PCM16LE samples of a WAV clip (data chunk located by its header). */
export function readPcm(name: string): Buffer {
  const buf = fs.readFileSync(path.join(AUDIO_DIR, name));
  let off = 12;
  while (off + 8 <= buf.length) {
    const id = buf.toString('ascii', off, off + 4);
    const size = buf.readUInt32LE(off + 4);
    if (id === 'data') return buf.subarray(off + 8, off + 8 + size);
    off += 8 + size + (size % 2);
  }
  throw new Error(`no data chunk in ${name}`);
}

export const silence = (ms: number): Buffer => Buffer.alloc(Math.round((ms / 1000) * 16000) * 2);

export function refs(): Map<string, string> {
  const m = new Map<string, string>();
  const lines = fs.readFileSync(path.join(AUDIO_DIR, 'refs.tsv'), 'utf8').trim().split('\n').slice(1);
  for (const l of lines) {
    const [file, , text] = l.split('\t');
    m.set(file, text);
  }
  return m;
}

class Sink extends Writable {
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _e: string, cb: () => void): void {
    this.lines.push(...chunk.toString().split('\n').filter(Boolean));
    cb();
  }
}

/** The logs of this process's open realtime contexts: a client's 1006 is explained by how its server saw it end. */
const liveLogs = new Set<Sink>();

/** The server's `realtime session ended` record of a session, from an open context in this process, if any. */
function serverSideEnd(sessionId: unknown): string {
  if (typeof sessionId !== 'string') return '';
  for (const sink of liveLogs)
    for (const line of sink.lines)
      if (line.includes(sessionId) && line.includes('"realtime session ended"')) return ` (server: ${line})`;
  return '';
}

export interface RealtimeTestContext {
  rt: RunningRealtime;
  url: string;
  base: string;
  config: Config;
  db: Knex;
  testDb: TestDatabase;
  keys: KeyStore;
  auth: Authenticator;
  limits: LimitsDriver;
  logs: Sink;
  issueKey(plan?: string): Promise<{ key: string; id: string }>;
  close(): Promise<void>;
}

let sharedPool: Promise<Vad> | null = null;
/** One VAD model for the whole test run (silero instances cost ~40 ms each to create). */
export function testVadPool(config: Config): Promise<Vad> {
  sharedPool ??= loadVad({ modelPath: config.realtime.vad.modelPath, warm: 2, max: 64 });
  return sharedPool;
}

/** Segmentation in the test's own thread (no worker thread): deterministic tests. */
export async function testVad(config: Config): Promise<VadService> {
  const v = config.realtime.vad;
  return new InlineVad(await testVadPool(config), {
    gateDbfs: v.gateDbfs,
    releaseAfterMs: v.releaseAfterMs,
    holdDb: v.holdDb,
    quietDb: v.quietDb,
    candidateGapMs: v.candidateGapMs,
    maxSkip: v.maxSkip,
  });
}

export async function createRealtimeContext(opts: {
  env?: Record<string, string>;
  /** Internal tuning (named constants in shared/config), e.g. `{ realtime: { tickMs: 100 } }`. */
  overrides?: ConfigOverrides;
  engine: SpeechEngine;
  redis?: boolean;
  testDb?: TestDatabase;
  redisPrefix?: string;
  /** Defaults to inline segmentation on the shared pool. */
  vad?: VadService;
  /** The server's log level (`info`; benches read `debug` records from `logs`). */
  logLevel?: string;
}): Promise<RealtimeTestContext> {
  const testDb = opts.testDb ?? (await createTestDatabase('stt_rt'));
  const config = loadConfig(
    {
      GATEWAY_SESSION_TOKEN_SECRET: SESSION_SECRET,
      DATABASE_URL: testDb.url,
      LOG_LEVEL: 'info',
      ...opts.env,
    },
    opts.overrides,
  );
  const logs = new Sink();
  liveLogs.add(logs);
  const logger = createLogger({ level: opts.logLevel ?? 'info' }, logs);
  // The realtime process's own kernel, with the test's engine and, for Redis limits, a prefix of its own.
  const platform = createPlatform(
    { ...config, dbPoolMax: 4, redisUrl: opts.redis ? TEST_REDIS_URL : undefined },
    logger,
    {
      speech: opts.engine,
      limitsPrefix: opts.redisPrefix ?? `rt-test-${randomBytes(4).toString('hex')}:`,
    },
  );
  const { db, keys, auth, limits } = platform;
  const rt = await startRealtime(
    { ...platform, engine: platform.speech },
    { port: 0, host: '127.0.0.1', vad: opts.vad ?? (await testVad(config)) },
  );
  const base = `http://127.0.0.1:${rt.port}`;
  return {
    rt,
    url: `ws://127.0.0.1:${rt.port}/v1/audio/transcriptions/stream`,
    base,
    config,
    db,
    testDb,
    keys,
    auth,
    limits,
    logs,
    async issueKey(plan = 'free') {
      const rec = await keys.issue({ ownerId: 'tenant-rt', plan });
      return { key: rec.key!, id: rec.id };
    },
    async close() {
      liveLogs.delete(logs);
      await rt.stop();
      await platform.close();
      if (!opts.testDb) await testDb.drop();
    },
  };
}

/** The realtime usage rows of one session. */
export async function usageRows(ctx: RealtimeTestContext, sessionId: string): Promise<Record<string, any>[]> {
  return ctx.db('usage_events').where({ plane: 'realtime', ref_id: sessionId });
}

/**
 * A session's usage once it is final. A checkpoint (a `live` row) may be written first with every
 * byte received so far, before the VAD has set dropped audio aside: only the final row is the bill.
 */
export async function finalUsage(
  ctx: RealtimeTestContext,
  sessionId: string,
): Promise<Record<string, any>[]> {
  return eventually(
    () => usageRows(ctx, sessionId),
    (r) => r.length > 0 && r.every((x) => x.status === 'final'),
  );
}

/** Waits until the server has counted `seconds` of a session's audio (every frame sent so far arrived). */
export async function audioReceived(
  ctx: RealtimeTestContext,
  sessionId: string,
  seconds: number,
): Promise<void> {
  const counted = () => [...ctx.rt.sessions].find((s) => s.sessionId === sessionId)?.audioSeconds ?? 0;
  const got = await eventually(
    async () => counted(),
    (v) => v >= seconds - 0.001,
    30_000,
  );
  if (got < seconds - 0.001) throw new Error(`the server counted ${got} s of ${sessionId}, not ${seconds} s`);
}

/** Polls `fn` until `ok` holds or `ms` have passed; returns the last value. */
export async function eventually<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 5000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() - t0 > ms) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface Client {
  ws: WebSocket;
  events: Record<string, any>[];
  closed: Promise<{ code: number; reason: string }>;
  next(type: string, timeoutMs?: number, from?: number): Promise<Record<string, any>>;
  waitFor(pred: (evs: Record<string, any>[]) => boolean, timeoutMs?: number): Promise<void>;
  of(type: string): Record<string, any>[];
  /**
   * Every utterance's final: each `speech_started` stopped, each `speech_stopped` answered by its
   * `completed`, and nothing new for `quietMs`. (Audio sent faster than real time can still be held back by the VAD while a pause is
   * judged on the words decoded so far, so more utterances may follow the first finals.)
   */
  finals(timeoutMs?: number, quietMs?: number, done?: (evs: Record<string, any>[]) => boolean): Promise<void>;
  send(obj: unknown): void;
  /** `base64`: as input_audio_buffer.append messages instead of binary frames. */
  stream(pcm: Buffer, o?: { frameBytes?: number; pace?: number; base64?: boolean }): Promise<void>;
}

/** Every turn that started has stopped, and every stopped turn has its `completed`. */
function everyTurnAnswered(evs: Record<string, any>[]): boolean {
  const count = (type: string) => evs.filter((e) => e.type === type).length;
  const stopped = count('input_audio_buffer.speech_stopped');
  return (
    stopped > 0 &&
    count('input_audio_buffer.speech_started') === stopped &&
    count('conversation.item.input_audio_transcription.completed') === stopped
  );
}

/**
 * A client of the stream path once the server has sent its first event (or closed). A connection that
 * ends 1006 before any event is opened again, up to twice, as any robust client would: the server sends
 * session.created only once its upgrade call has returned, because uWebSockets.js 20.57 can close a
 * socket inside an asynchronous upgrade (realtime/lifecycle.ts); no session existed on that connection.
 */
export async function connect(url: string, opts: { headers?: Record<string, string> } = {}): Promise<Client> {
  for (let attempt = 1; ; attempt++) {
    const c = await connectOnce(url, opts);
    // Resolves on the first event; rejects when the connection closed first (or on the timeout).
    const closedFirst = await c
      .waitFor((evs) => evs.length > 0, 20_000)
      .then(
        () => false,
        (err: Error) => err.message.startsWith('closed'),
      );
    if (!closedFirst || (await c.closed).code !== 1006 || attempt === 3) return c;
    console.error(
      `    (realtime test client: connection closed 1006 before session.created; opening it again)`,
    );
  }
}

function connectOnce(url: string, opts: { headers?: Record<string, string> }): Promise<Client> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: opts.headers });
    const events: Record<string, any>[] = [];
    const waiters = new Set<() => void>();
    let closeInfo: { code: number; reason: string } | undefined;
    // An error the client itself found (a frame it could not read) closes it 1006 without a reason: keep it to name the cause.
    let clientError: Error | undefined;
    ws.on('error', (err) => (clientError ??= err));
    // What the TCP socket itself saw, for a 1006 neither side chose: the peer's FIN, a reset (ECONNRESET),
    // a write after the peer went (EPIPE), or a descriptor closed under it (EBADF).
    const tcp: string[] = [];
    ws.on('upgrade', (res) => {
      const sock = res.socket;
      sock.on('end', () => tcp.push(`FIN after ${sock.bytesRead} B read, ${sock.bytesWritten} B written`));
      sock.on('error', (e: NodeJS.ErrnoException) => tcp.push(`socket ${e.code ?? e.message}`));
    });
    const closed = new Promise<{ code: number; reason: string }>((r) =>
      ws.on('close', (code, reason) => {
        closeInfo = {
          code,
          reason:
            reason.toString() ||
            [
              clientError ? `(client error: ${clientError.message})` : '',
              code === 1006 ? `(tcp: ${tcp.join('; ') || 'nothing seen'})` : '',
            ]
              .filter(Boolean)
              .join(' '),
        };
        r(closeInfo);
        for (const w of waiters) w();
      }),
    );
    ws.on('message', (data, isBinary) => {
      if (!isBinary) events.push(JSON.parse(data.toString()));
      for (const w of waiters) w();
    });
    const client: Client = {
      ws,
      events,
      closed,
      of: (type) => events.filter((e) => e.type === type),
      waitFor(pred, timeoutMs = 20_000) {
        return new Promise((res, rej) => {
          const check = () => {
            if (pred(events)) {
              cleanup();
              res();
            } else if (closeInfo) {
              cleanup();
              rej(
                new Error(
                  `closed ${closeInfo.code} ${closeInfo.reason} before condition; events: ${events.map((e) => e.type).join(',')}` +
                    serverSideEnd(events.find((e) => e.type === 'session.created')?.session_id),
                ),
              );
            }
          };
          const t = setTimeout(() => {
            cleanup();
            rej(new Error(`timeout; events: ${JSON.stringify(events.map((e) => e.type))}`));
          }, timeoutMs);
          const cleanup = () => {
            clearTimeout(t);
            waiters.delete(check);
          };
          waiters.add(check);
          check();
        });
      },
      async finals(timeoutMs = 120_000, quietMs = 1000, done = everyTurnAnswered) {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          await client.waitFor(done, Math.max(1, deadline - Date.now()));
          const seen = events.length;
          await new Promise((r) => setTimeout(r, quietMs));
          if (events.length === seen || closeInfo) return;
        }
      },
      async next(type, timeoutMs = 20_000, from = 0) {
        await client.waitFor((evs) => evs.slice(from).some((e) => e.type === type), timeoutMs);
        return events.slice(from).find((e) => e.type === type)!;
      },
      send(obj) {
        ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj));
      },
      async stream(pcm, o = {}) {
        const frame = o.frameBytes ?? 3200;
        const pace = o.pace ?? 0; // 0 = as fast as possible, 1 = real time, 4 = four times real time
        const t0 = Date.now();
        for (let off = 0; off < pcm.length; off += frame) {
          // Yield to the event loop even then: a caller looping on stream() must let the close arrive.
          if (ws.readyState !== WebSocket.OPEN) return new Promise((r) => setImmediate(r));
          const piece = pcm.subarray(off, Math.min(pcm.length, off + frame));
          if (o.base64)
            ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: piece.toString('base64') }));
          else ws.send(piece);
          if (pace > 0) {
            const due = t0 + (off + frame) / 32 / pace;
            const wait = due - Date.now();
            if (wait > 0) await new Promise((r) => setTimeout(r, wait));
          } else if ((off / frame) % 50 === 49) {
            await new Promise((r) => setImmediate(r));
          }
        }
      },
    };
    ws.once('open', () => resolve(client));
    ws.once('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => {
        req.destroy();
        reject(
          Object.assign(new Error(`HTTP ${res.statusCode}`), {
            status: res.statusCode,
            headers: res.headers,
            body,
          }),
        );
      });
    });
    ws.once('error', reject);
  });
}

export const bearer = (key: string) => ({ headers: { authorization: `Bearer ${key}` } });

export function words(s: string): string[] {
  return s
    .toLowerCase()
    .replace(/[^a-z' ]/g, ' ')
    .split(/\s+/)
    .filter(Boolean);
}

/** An upgrade that must be refused: its status, headers and JSON body (throws if it was accepted). */
export async function refused(url: string, headers: Record<string, string> = {}) {
  try {
    const c = await connect(url, { headers });
    c.ws.close();
    throw new Error('upgrade was accepted');
  } catch (err) {
    const e = err as { status?: number; headers?: Record<string, string>; body?: string };
    if (e.status === undefined) throw err;
    return { status: e.status, headers: e.headers ?? {}, body: JSON.parse(e.body || '{}') };
  }
}

/**
 * Mocha hooks for a suite that needs a realtime server with the built-in
 * speech engine (two decoder threads): returns a getter for its context.
 */
export function realtimeWithBuiltinEngine(): () => RealtimeTestContext {
  let engine: SpeechEngine | undefined;
  let ctx: RealtimeTestContext | undefined;
  before(async () => {
    engine = createSpeechEngine(loadConfig({ STT_THREADS: '2' }), createLogger({ level: 'silent' }));
    ctx = await createRealtimeContext({ engine });
  });
  after(async () => {
    await ctx?.close();
    await engine?.close();
  });
  return () => ctx!;
}

export interface RealtimeChild {
  child: ChildProcess;
  port: number;
  url: string;
  /** SIGKILL (when still running) and wait for the exit. */
  kill(): Promise<void>;
}

/**
 * `realtime/main.ts` as a real child process (built-in engine, one decoder
 * thread) on the given database and environment; resolves once it listens.
 */
export async function forkRealtime(
  databaseUrl: string,
  env: Record<string, string> = {},
): Promise<RealtimeChild> {
  const child: ChildProcess = fork(path.join(repoRoot, 'realtime/main.ts'), [], {
    execArgv: ['--import', 'tsx'],
    cwd: repoRoot,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      REDIS_URL: TEST_REDIS_URL,
      REALTIME_PORT: '0',
      REALTIME_HOST: '127.0.0.1',
      MIGRATE_ON_START: 'false',
      GATEWAY_SESSION_TOKEN_SECRET: SESSION_SECRET,
      STT_ENGINE: 'builtin',
      STT_WORKER_URLS: '',
      STT_THREADS: '1',
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  try {
    const port = await new Promise<number>((resolve, reject) => {
      child.on(
        'message',
        (m: { type?: string; port?: number }) => m.type === 'realtime.listening' && resolve(m.port!),
      );
      child.once('exit', (code) => reject(new Error(`child exited ${code}`)));
      setTimeout(() => reject(new Error('child did not start')), 30_000);
    });
    return { child, port, url: `ws://127.0.0.1:${port}/v1/audio/transcriptions/stream`, kill };
  } catch (err) {
    await kill();
    throw err;
  }
}
