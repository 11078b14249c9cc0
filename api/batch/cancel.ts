/**
 * Ending unfinished workflows early (issue 41): a tenant cancels its own
 * job, and revoking a key ends its jobs. They become `terminated` with the
 * reason in `error`: a queued one never starts (`acquire` takes only queued
 * and running ones, and its pg-boss job is cancelled), a run in this process
 * is stopped at once and one elsewhere when its job's next heartbeat finds
 * the job cancelled; budget reservations are released.
 * The chunks it had transcribed are billed (issue 41, third pass: cancel
 * and resubmit, or read the chunk checkpoints, had them transcribed free);
 * a later run of the same request_id reuses them without billing again.
 * A workflow that has its result (only its webhook left to deliver) is
 * finished work: it is not terminated, and the tenant's DELETE is 409.
 */
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { UsageBudget } from '../../shared/usage/budget.js';
import { round3 } from '../../shared/numbers.js';
import { artifactKeys } from './artifacts.js';
import { type ArtifactStore, tenantStore } from './storage/index.js';
import type { ChunkCheckpoint } from './types.js';
import * as metrics from './metrics.js';

type Target = { id: string; ownerId: string } | { keyId: string };
type Ended = { id: string; owner_id: string; key_id: string; request_id: string; job_id: string | null };

export class Cancellation {
  constructor(
    private readonly db: Knex,
    private readonly store: ArtifactStore,
    private readonly budget: UsageBudget,
    /** Stops this process's run of a workflow, if it has one. */
    private readonly stopRun: (workflowId: string) => void,
    /** Cancels the workflows' pg-boss jobs (a run elsewhere stops at its next heartbeat). */
    private readonly cancelJobs: (jobIds: string[]) => Promise<void>,
    private readonly log: Logger,
  ) {}

  /** The tenant's own workflow, cancelled; whether it was still unfinished. */
  async cancel(ownerId: string, workflowId: string): Promise<boolean> {
    const ended = await this.terminate(
      { id: workflowId, ownerId },
      { name: 'cancelled', message: 'The job was cancelled by its owner.' },
    );
    return ended.length > 0;
  }

  /** A revoked key's unfinished workflows: nothing more of them runs or is billed to it. */
  async revokedKey(keyId: string): Promise<number> {
    const ended = await this.terminate(
      { keyId },
      { name: 'key_revoked', message: 'The API key that submitted this job was revoked.' },
    );
    if (ended.length) this.log.info({ keyId, count: ended.length }, "revoked key's jobs terminated");
    return ended.length;
  }

  private async terminate(where: Target, error: { name: string; message: string }): Promise<string[]> {
    // A workflow with its result has done its work (transcribed, billed): only its webhook is left,
    // and it finishes as `complete`; cancelling it then hid a billed result and its webhook.
    const q = this.db('batch_workflows')
      .whereIn('status', ['queued', 'running'])
      .whereRaw("output -> 'result' IS NULL");
    if ('keyId' in where) q.where({ key_id: where.keyId });
    else q.where({ id: where.id, owner_id: where.ownerId });
    const rows = await q
      .update({
        status: 'terminated',
        error: JSON.stringify(error),
        ended_at: this.db.fn.now(),
        updated_at: this.db.fn.now(),
        run_owner: null,
        poll_body: null,
        poll_rev: this.db.raw('poll_rev + 1'),
      })
      .returning<Ended[]>(['id', 'owner_id', 'key_id', 'request_id', 'job_id']);
    await this.cancelJobs(rows.flatMap((w) => (w.job_id ? [w.job_id] : [])));
    for (const w of rows) {
      this.stopRun(w.id);
      const reservation = this.budget.reservation({ plane: 'batch', refId: w.id, keyId: w.key_id });
      const seconds = await this.transcribedSeconds(w);
      if (seconds > 0) await reservation.bill(round3(seconds));
      await reservation.release();
    }
    metrics.finished.inc({ status: 'terminated' }, rows.length);
    return rows.map((r) => r.id);
  }

  /** The seconds of the chunks the workflow itself transcribed (its checkpoints say whose they are). */
  private async transcribedSeconds(w: Ended): Promise<number> {
    const store = tenantStore(this.store, w.owner_id);
    const keys = artifactKeys(w.request_id);
    let seconds = 0;
    for (const key of await store.list(keys.prefix)) {
      if (!/\/chunk_\d+\.json$/.test(key)) continue;
      const cp = await store.getJson<ChunkCheckpoint>(key);
      if (cp?.workflow_id === w.id) seconds += cp.end - cp.start;
    }
    return seconds;
  }
}
