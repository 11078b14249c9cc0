/**
 * The speech plane: one factory chooses the engine every plane uses, the
 * built-in PocketSphinx pool (no STT_WORKER_URLS) or the remote worker pool.
 */
import type { Logger } from 'pino';
import type { Config } from '../config/index.js';
import { BuiltinEngine } from './builtin.js';
import { RemotePool } from './remote.js';
import type { SpeechEngine } from './types.js';

export * from './types.js';
export type { VocabularyEntry } from './bias/compile.js';
export { BuiltinEngine } from './builtin.js';
export { RemotePool } from './remote.js';
export { normalizeLanguage } from './language.js';
export { RESPONSE_FORMATS, isResponseFormat, renderTranscript, type ResponseFormat } from './formats.js';

export function createSpeechEngine(
  config: Pick<Config, 'speech'>,
  logger: Logger,
): SpeechEngine & {
  ready(): Promise<void>;
  workerIds(): string[];
} {
  const log = logger.child({ component: 'speech' });
  if (config.speech.engine === 'remote') return new RemotePool(config.speech.remote, log);
  return new BuiltinEngine(config.speech.builtin, log);
}
