/**
 * The disk floor (DISK_FLOOR_MB, issue 36): while free space under the data
 * or temp directory is below it, new work that writes to disk (segment
 * uploads, batch submissions) is refused 507 `insufficient_storage` with
 * Retry-After before its body is read, and /readyz reports `disk: false`.
 * Polls, reports and everything that writes nothing go on.
 */
import type { Middleware } from 'koa';
import { DISK_RETRY_AFTER_SECONDS, type DiskFloor } from '../../shared/disk.js';
import { JOBS_PATH } from '../routes/jobs/index.js';
import { ApiError } from './errors.js';

/** POST paths that take new work: the segment upload (and its deprecated JSON job form) and job submission. */
const WORK_PATHS = new Set(['/v1/audio/transcriptions', JOBS_PATH, '/']);

export function diskFloorGuard(floor: DiskFloor): Middleware {
  return async (ctx, next) => {
    if (ctx.method !== 'POST' || !WORK_PATHS.has(ctx.path) || !(await floor.below())) {
      await next();
      return;
    }
    ctx.state.plane = ctx.path === '/v1/audio/transcriptions' && !ctx.is('json') ? 'api' : 'batch';
    throw new ApiError(
      507,
      'insufficient_storage',
      'The server is low on disk space and takes no new work for now; try again shortly.',
      { retryable: true, headers: { 'Retry-After': String(DISK_RETRY_AFTER_SECONDS) } },
    );
  };
}
