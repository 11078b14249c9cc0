/**
 * Standalone speech worker: the built-in PocketSphinx engine behind an
 * OpenAI-compatible HTTP API. Run several and list them in STT_WORKER_URLS.
 *
 *   ENGINE_PORT=9001 STT_THREADS=2 tsx engine/server.ts
 *
 * Prints one JSON line `{"msg":"engine listening","port":...}` when ready.
 * A declaration on the process shell (shared/process/runner.ts).
 */
import http from 'node:http';
import type { Config } from '../shared/config/index.js';
import type { Logger } from '../shared/logger.js';
import { runProcess, type Stoppable } from '../shared/process/runner.js';
import { BuiltinEngine } from '../shared/stt/builtin.js';
import { createEngineApp, ENGINE_SERVICE } from './app.js';
import { sweepDecodeSpool } from '../shared/transcribe/clip.js';

/** Loads the decoders and listens; its stop lets requests in flight get their answer, then unloads them. */
export async function startEngine(config: Config, logger: Logger): Promise<Stoppable & { port: number }> {
  await sweepDecodeSpool(logger);
  const engine = new BuiltinEngine(config.speech.builtin, logger);
  let stopping = false;
  const app = createEngineApp({
    engine,
    speech: config.speech,
    logger,
    metrics: config.metrics,
    draining: () => stopping,
  });
  const handle = app.callback();
  const server = http.createServer((req, res) => void handle(req, res));
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve) =>
    server.listen(config.speech.engineServer.port, config.speech.engineServer.host, resolve),
  );
  await engine.ready();
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.speech.engineServer.port;
  logger.info({ port, threads: config.speech.builtin.threads }, 'engine listening');
  return {
    port,
    async stop() {
      stopping = true;
      // Stop accepting, let requests in flight get their answer, then unload the decoders.
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      await closed;
      await engine.close();
    },
  };
}

await runProcess({
  name: ENGINE_SERVICE,
  start: ({ config, logger }) => startEngine(config, logger),
}).catch(() => undefined);
