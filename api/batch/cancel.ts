/**
 * Ending unfinished workflows early (issue 41): a tenant cancels its own
 * job, and revoking a key ends its jobs. They become `terminated` with the
 * reason in `error`: a queued one never starts (`acquire` takes only queued
 * and running ones), a run in this process is stopped at once and one
 * elsewhere at its next lease renewal; budget reservations are released.
 */
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { UsageBudget } from '../../shared/usage/budget.js';
import * as metrics from './metrics.js';

type Target = { id: string; ownerId: string } | { keyId: string };

export class Cancellation {
  private readonly budget: UsageBudget;

  constructor(
    private readonly db: Knex,
    usageWindowSeconds: number,
    /** Stops this process's run of a workflow, if it has one. */
    private readonly stopRun: (workflowId: string) => void,
    private readonly log: Logger,
  ) {
    this.budget = new UsageBudget(db, usageWindowSeconds);
  }

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
    const q = this.db('batch_workflows').whereIn('status', ['queued', 'running']);
    if ('keyId' in where) q.where({ key_id: where.keyId });
    else q.where({ id: where.id, owner_id: where.ownerId });
    const rows = await q
      .update({
        status: 'terminated',
        error: JSON.stringify(error),
        ended_at: this.db.fn.now(),
        updated_at: this.db.fn.now(),
        lease_owner: null,
        lease_until: null,
        poll_body: null,
        poll_rev: this.db.raw('poll_rev + 1'),
      })
      .returning<{ id: string }[]>('id');
    const ids = rows.map((r) => r.id);
    for (const id of ids) {
      this.stopRun(id);
      await this.budget.release('batch', id);
    }
    metrics.finished.inc({ status: 'terminated' }, ids.length);
    return ids;
  }
}
