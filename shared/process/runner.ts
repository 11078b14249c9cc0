/**
 * The process shell every entry point runs on (API, realtime, engine worker,
 * `npm start`): one place owns what a process does around its work.
 *
 * - its logger and the failure policy (installFailurePolicy: a fatal
 *   exception stops the process gracefully, then exits 70);
 * - start: the role's `start` builds and starts what the process serves;
 *   a failure to start is printed and exits 1;
 * - stop, once, on SIGTERM, SIGINT, or the parent going away (a forked
 *   child): the role's `stop` drains and closes in its own order, then the
 *   process exits 0; a stop that outlasts `forceQuitMs` exits 1.
 *
 *   await runProcess({ name: 'api', start: ({ config, logger }) => startApi(config, logger) });
 */
import { loadConfig, type Config } from '../config/index.js';
import { createLogger, type Logger } from '../logger.js';
import { installFailurePolicy } from './index.js';

/** What a started role hands back: how to stop it (drain, then close what it opened). */
export interface Stoppable {
  stop(): Promise<void>;
}

export interface ProcessRole<R extends Stoppable> {
  /** The logger's name (`api`, `realtime`, `stt-engine`, `stt`). */
  name: string;
  /** Default: the environment's configuration. */
  config?: Config;
  /** Default: a logger named `name` at the configuration's level. */
  logger?: Logger;
  start(ctx: { config: Config; logger: Logger }): Promise<R>;
  /** How long a stop may take before the process quits anyway (default: shutdown grace + drain + 5 s). */
  forceQuitMs?: number;
  /** What is printed when start fails (default: the error itself). */
  describeStartError?(err: unknown): unknown;
  /** Exit when stopped (default true; tests that run a role in-process say false). */
  exit?: boolean;
}

export async function runProcess<R extends Stoppable>(role: ProcessRole<R>): Promise<R> {
  const config = role.config ?? loadConfig();
  const logger = role.logger ?? createLogger({ level: config.logLevel, name: role.name });
  const exit = (code: number) => (role.exit === false ? undefined : process.exit(code));
  const holder: { running?: R } = {};
  installFailurePolicy(logger, { onFatal: () => holder.running?.stop() });
  try {
    holder.running = await role.start({ config, logger });
  } catch (err) {
    logger.fatal({ err }, `${role.name} did not start`);
    console.error(role.describeStartError?.(err) ?? err);
    exit(1);
    throw err;
  }
  const running = holder.running;
  const forceQuitMs = role.forceQuitMs ?? config.http.shutdownGraceMs + config.http.drainDelayMs + 5000;
  let stopping = false;
  const stop = (reason: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ reason }, `${role.name} stopping`);
    setTimeout(() => {
      logger.error({ forceQuitMs }, `${role.name} did not stop in time; quitting`);
      exit(1);
    }, forceQuitMs).unref();
    running.stop().then(
      () => exit(0),
      (err: unknown) => {
        logger.error({ err }, `${role.name} stop failed`);
        exit(1);
      },
    );
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => stop(sig));
  // Forked by a parent (the embedded start): when the parent goes away, so do we.
  if (process.send) process.on('disconnect', () => stop('parent gone'));
  return running;
}
