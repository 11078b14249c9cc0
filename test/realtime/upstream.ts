/**
 * The speech upstream of the realtime tests: a real engine/ worker process
 * (PocketSphinx) reached through the remote pool, as in the scaled
 * deployment, with a loopback HTTP proxy between the two.
 *
 * Nothing in the chain is simulated. The proxy forwards every request to the
 * worker unchanged and records what reached it (so tests can see the language
 * and prompt the realtime tier sent, and how many utterances it sent); it can
 * also refuse connections, as an unreachable worker does. Faults of the
 * worker itself are real signals: `pause()` stops the process (SIGSTOP, a hung
 * worker: requests wait and health checks time out), `resume()` continues it,
 * `killWorker()` SIGKILLs it and `restartWorker()` starts a fresh one.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { RemotePool } from '../../shared/stt/remote.js';
import { startEngine, type EngineProcess } from '../speech/helpers.js';

export interface UpstreamRequest {
  method: string;
  path: string;
  /** Text fields of a multipart body (`language`, `prompt`, `model`, ...); files appear as `<file N bytes>`. */
  fields: Record<string, string>;
}

export interface SpeechUpstream {
  /** The remote pool over the proxy: the engine the realtime tier under test uses. */
  engine: RemotePool;
  /** What reached the worker, oldest first (health checks included). */
  requests: UpstreamRequest[];
  /** The transcription requests among them. */
  transcriptions(): UpstreamRequest[];
  /** While true, the proxy resets every connection (an unreachable worker). */
  refuse: boolean;
  pause(): void;
  resume(): void;
  /** Runs `fn` with the worker stopped: utterances sent meanwhile stay in flight until it returns. */
  whilePaused<T>(fn: () => Promise<T>): Promise<T>;
  killWorker(): Promise<void>;
  restartWorker(): Promise<void>;
  close(): Promise<void>;
}

const TRANSCRIPTIONS = '/v1/audio/transcriptions';

async function formFields(headers: http.IncomingHttpHeaders, body: Buffer): Promise<Record<string, string>> {
  const type = headers['content-type'] ?? '';
  if (!type.startsWith('multipart/form-data')) return {};
  const form = await new Request('http://proxy.invalid/', {
    method: 'POST',
    headers: { 'content-type': type },
    body: new Uint8Array(body),
  }).formData();
  const fields: Record<string, string> = {};
  for (const [name, value] of form)
    fields[name] = typeof value === 'string' ? value : `<file ${value.size} bytes>`;
  return fields;
}

/**
 * Starts one engine worker (`threads` decoders) and the proxy, and a remote
 * pool with time limits suited to PocketSphinx on a busy 2-core machine (the
 * interface's 800 ms per attempt is exercised in test/speech/pool.test.ts).
 */
export async function startSpeechUpstream(opts: { threads?: number } = {}): Promise<SpeechUpstream> {
  const workerEnv = { STT_THREADS: String(opts.threads ?? 1) };
  let worker: EngineProcess = await startEngine(workerEnv);
  // The worker is a separate process: it must not outlive this one, however this one ends.
  const reap = () => void worker.child.kill('SIGKILL');
  process.on('exit', reap);

  const requests: UpstreamRequest[] = [];
  let refuse = false;

  const proxy = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (refuse) return req.socket.destroy();
      const body = Buffer.concat(chunks);
      void formFields(req.headers, body)
        .catch(() => ({}))
        .then((fields) => {
          requests.push({ method: req.method ?? '', path: req.url ?? '', fields });
          const out = http.request(
            {
              host: '127.0.0.1',
              port: worker.port,
              method: req.method,
              path: req.url,
              headers: req.headers,
              agent: false,
            },
            (answer) => {
              res.writeHead(answer.statusCode ?? 502, answer.headers);
              answer.pipe(res);
            },
          );
          // The worker went away: so does the connection, as with a plain TCP path to it.
          out.on('error', () => req.socket.destroy());
          // The client gave up (timeout, aborted utterance): the worker sees its connection close.
          res.on('close', () => !res.writableFinished && out.destroy());
          out.end(body);
        });
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;

  const config = loadConfig(
    { STT_WORKER_URLS: `engine=${url}`, STT_ATTEMPT_TIMEOUT_MS: '20000', STT_BUDGET_MS: '20000' },
    { speech: { remote: { healthIntervalMs: 250, healthTimeoutMs: 1000 } } },
  );
  const engine = new RemotePool(config.speech.remote, createLogger({ level: 'silent' }));
  await engine.ready();

  const upstream: SpeechUpstream = {
    engine,
    requests,
    transcriptions: () => requests.filter((r) => r.method === 'POST' && r.path === TRANSCRIPTIONS),
    get refuse() {
      return refuse;
    },
    set refuse(on: boolean) {
      refuse = on;
    },
    pause: () => void worker.child.kill('SIGSTOP'),
    resume: () => void worker.child.kill('SIGCONT'),
    async whilePaused(fn) {
      upstream.pause();
      try {
        return await fn();
      } finally {
        upstream.resume();
      }
    },
    killWorker: () => worker.kill(),
    async restartWorker() {
      await worker.kill();
      worker = await startEngine(workerEnv);
    },
    async close() {
      await engine.close();
      proxy.closeAllConnections();
      await new Promise((r) => proxy.close(r));
      await worker.kill();
      process.off('exit', reap);
    },
  };
  return upstream;
}
