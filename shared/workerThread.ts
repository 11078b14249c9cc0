/**
 * Starts a worker thread from a module beside its caller, under tsx
 * (sources) or compiled (.js), with the young generation every thread of the
 * service gets: worker threads (decoders, VAD) allocate little on the
 * JavaScript heap, and V8's default lets each one's new space grow to 48 MiB
 * of resident memory (docs/decisions/realtime.md, "Young generation").
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { THREAD_YOUNG_GENERATION_MB } from './config/platform.js';

/**
 * `relative` without extension (e.g. `./pocketsphinx/thread`), resolved against `base`, the caller's
 * `import.meta.url`: the caller runs as .ts under tsx (the thread then needs tsx's loader too) or as .js.
 */
export function startThread(base: string, relative: string, workerData: unknown): Worker {
  const ts = base.endsWith('.ts');
  const url = new URL(`${relative}${ts ? '.ts' : '.js'}`, base);
  const options = { workerData, resourceLimits: { maxYoungGenerationSizeMb: THREAD_YOUNG_GENERATION_MB } };
  if (!ts) return new Worker(url, options);
  // (import.meta.resolve is not available under every loader; resolve through require.)
  const tsxDir = path.dirname(createRequire(import.meta.url).resolve('tsx/package.json'));
  const tsxApi = pathToFileURL(path.join(tsxDir, 'dist/esm/api/index.mjs')).href;
  const boot = `import(${JSON.stringify(tsxApi)}).then((m) => { m.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(boot, { ...options, eval: true });
}
