/**
 * One holder at a time across the test run's processes (mocha runs files in
 * parallel workers): for work on a shared output, such as tsc into dist/ or
 * building the image.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import lockfile from 'proper-lockfile';

export async function withLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const target = path.join(os.tmpdir(), `stt-test-${name}`);
  fs.writeFileSync(target, '', { flag: 'a' });
  // Waits as long as the longest holder (a cold image build); a holder that died leaves a stale lock, taken after 30 s.
  const release = await lockfile.lock(target, {
    stale: 30_000,
    update: 5_000,
    retries: { retries: 24 * 60, minTimeout: 500, maxTimeout: 1_000, factor: 1 },
  });
  try {
    return await fn();
  } finally {
    await release();
  }
}
