/**
 * The realtime process of realtime/main.ts with internal tuning (named
 * constants of shared/config) laid over its configuration: argv[2] is a JSON
 * `ConfigOverrides`, e.g. `{"realtime":{"vad":{"poolWarm":200}}}`. For the
 * benchmarks in run.ts; operators set only the environment.
 */
import { loadConfig, type ConfigOverrides } from '../../../shared/config/index.js';
import { runRealtimeProcess } from '../../../realtime/main.js';

await runRealtimeProcess(loadConfig(process.env, JSON.parse(process.argv[2] ?? '{}') as ConfigOverrides));
