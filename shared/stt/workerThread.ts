/** Starts a worker thread from a sibling module, under tsx (sources) or compiled (.js). */
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';

// Under tsx the sources run as .ts and the thread needs tsx's loader too; compiled, as .js.
const RUNNING_TS = import.meta.url.endsWith('.ts');

/** `relative` without extension, e.g. `./pocketsphinx/thread`, resolved beside this module. */
export function startThread(relative: string, workerData: unknown): Worker {
  const url = new URL(`${relative}${RUNNING_TS ? '.ts' : '.js'}`, import.meta.url);
  if (!RUNNING_TS) return new Worker(url, { workerData });
  // Register tsx inside the thread, then load the TypeScript entry.
  const tsxDir = path.dirname(createRequire(import.meta.url).resolve('tsx/package.json'));
  const tsxApi = pathToFileURL(path.join(tsxDir, 'dist/esm/api/index.mjs')).href;
  const boot = `import(${JSON.stringify(tsxApi)}).then((m) => { m.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(boot, { eval: true, workerData });
}
