/**
 * Standalone speech worker: the built-in PocketSphinx engine behind an
 * OpenAI-compatible HTTP API. Run several and list them in STT_WORKER_URLS.
 *
 *   ENGINE_PORT=9001 STT_THREADS=2 tsx engine/server.ts
 *
 * Prints one JSON line `{"msg":"engine listening","port":...}` when ready.
 */
import http from 'node:http';
import { loadConfig } from '../shared/config/index.js';
import { createLogger } from '../shared/logger.js';
import { BuiltinEngine } from '../shared/stt/builtin.js';
import { createEngineApp, ENGINE_SERVICE } from './app.js';
import { installFailurePolicy } from '../shared/process/index.js';

async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger({ level: config.logLevel, name: ENGINE_SERVICE });
  installFailurePolicy(logger);
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

  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'engine stopping');
    const force = setTimeout(() => process.exit(1), config.http.shutdownGraceMs);
    force.unref();
    // Stop accepting, let requests in flight get their answer, then unload the decoders.
    server.close(() => {
      void engine.close().then(() => process.exit(0));
    });
    server.closeIdleConnections();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
