/**
 * `npm test`'s global fixture (mocha `--require`, run once in the main
 * process before the parallel workers start): the two shared builds, `tsc`
 * into dist/ and the test image, are made here, one after the other, instead
 * of inside whichever test file asks first. The image build takes both cores
 * for minutes; run beside the files that measure a cluster under load, it was
 * what overloaded them. Each file still calls the same helpers, which find
 * the builds done. `npx mocha <file>` does not load this file.
 */
import { buildDist } from '../deploy/helpers.js';
import { ensureImage, podmanInstalled } from '../deploy/image/podman.js';
// Postgres and Redis of the suite's own when the machine has none (started as this module loads).
import * as services from './localServices.js';

export async function mochaGlobalSetup(): Promise<void> {
  const t0 = Date.now();
  await buildDist();
  console.log(`  global setup: dist/ built in ${Math.round((Date.now() - t0) / 1000)} s`);
  if (!podmanInstalled()) return;
  const t1 = Date.now();
  // A failed build is reported by the image tests themselves (they try again).
  await ensureImage().then(
    (tag) => console.log(`  global setup: image ${tag} ready in ${Math.round((Date.now() - t1) / 1000)} s`),
    (err: unknown) => console.log(`  global setup: image build failed: ${String(err).slice(0, 500)}`),
  );
}

export async function mochaGlobalTeardown(): Promise<void> {
  await services.mochaGlobalTeardown();
}
