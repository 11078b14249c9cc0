/**
 * A run holds its workflow's lease and keeps renewing it (every third of
 * the lease); when a renewal finds the lease taken by another run, the run
 * is aborted with LeaseLostError. When a process dies its leases lapse and
 * the sweeper re-queues the workflows.
 */
import type { Logger } from 'pino';
import { LeaseLostError } from '../errors.js';
import type { WorkflowRepo } from '../repo.js';

export interface HeldLease {
  /** A renewal found the lease gone. */
  readonly lost: boolean;
  /** Stop renewing (the run is over; the lease is finished or released by the caller). */
  stop(): void;
}

export function keepLease(opts: {
  repo: WorkflowRepo;
  workflowId: string;
  runnerId: string;
  leaseSeconds: number;
  abort: AbortController;
  log: Logger;
}): HeldLease {
  const { repo, workflowId, runnerId, leaseSeconds, abort, log } = opts;
  let lost = false;
  const heartbeat = setInterval(
    () => {
      repo
        .renew(workflowId, runnerId, leaseSeconds)
        .then((ok) => {
          if (!ok && !lost) {
            lost = true;
            abort.abort(new LeaseLostError('lease lost'));
          }
        })
        .catch((err) => log.warn({ err }, 'lease renewal failed'));
    },
    Math.max(200, (leaseSeconds * 1000) / 3),
  );
  return {
    get lost() {
      return lost;
    },
    stop: () => clearInterval(heartbeat),
  };
}
