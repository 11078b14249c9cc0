/**
 * Postgres access for batch workflows. The poll response is presented in
 * poll.ts and kept on the workflow row (`poll_body`): every write here that
 * changes what a poll shows clears it and bumps `poll_rev` in the same
 * statement (`STALE_POLL`).
 */
import type { Knex } from 'knex';
import type { PollRow } from './poll.js';
import { effectiveStatus } from '../../shared/auth/keyStore.js';
import { chunkStep, STEPS, type StepRef } from './steps/order.js';
import type { StepStatus, WorkflowParams, WorkflowStatus } from './types.js';

export interface WorkflowRow {
  id: string;
  request_id: string;
  owner_id: string;
  key_id: string;
  status: WorkflowStatus;
  params: WorkflowParams;
  output: Record<string, unknown>;
  error: { name: string; message: string } | null;
  /** The run holding the workflow (see `acquire`); null when none does. */
  run_owner: string | null;
  /** The pg-boss job of its latest run (or the one sent to run it). */
  job_id: string | null;
  runs: number;
  /** Runs taken over by another run (their process died or hung holding it): see `acquire`. */
  lapses: number;
  created_at: Date;
  updated_at: Date;
  started_at: Date | null;
  ended_at: Date | null;
}

/**
 * The poll's step order: every chunk step sits at `transcribe_chunk`'s place
 * (ordered among themselves by index), the other steps at their own. Stored
 * places are `transcribe_chunk` + index, which from chunk 900 on would pass
 * `aggregate`'s place if rows were sorted by it alone.
 */
const STEP_ORDER_SQL = `CASE WHEN s.name LIKE 'transcribe\\_chunk\\_%' THEN ${chunkStep(0).seq} ELSE s.seq END, s.seq`;

/**
 * Each asked workflow of its tenant: the kept poll body or, when there is
 * none, what presenting it needs (its columns and its steps in order), read
 * in one statement so that all of it, and `poll_rev`, come from one snapshot.
 */
const POLL_ROWS = `
  SELECT q.i::int4 AS i, w.id, w.poll_body AS body, w.poll_rev AS rev, w.request_id, w.status,
         CASE WHEN w.poll_body IS NULL THEN w.error END AS error,
         CASE WHEN w.poll_body IS NULL AND w.status = 'complete' THEN w.output END AS output,
         CASE WHEN w.poll_body IS NULL THEN
           (SELECT COALESCE(json_agg(json_build_object('name', s.name, 'status', s.status, 'started_at', s.started_at,
                      'ended_at', s.ended_at, 'attempts', s.attempts) ORDER BY ${STEP_ORDER_SQL}), '[]'::json)
              FROM batch_steps s WHERE s.workflow_id = w.id)
         END AS steps
    FROM unnest(?::text[], ?::text[]) WITH ORDINALITY AS q(id, owner_id, i)
    JOIN batch_workflows w ON w.id = q.id AND w.owner_id = q.owner_id`;

/** Set by every write that changes what a poll of the workflow shows. */
const STALE_POLL = 'poll_body = NULL, poll_rev = poll_rev + 1';

/** A step write (`step`, returning workflow_id) and its workflow's poll marked stale, as one statement. */
const withStalePoll = (step: string) => `
  WITH changed AS (${step} RETURNING workflow_id)
  UPDATE batch_workflows SET ${STALE_POLL} WHERE id IN (SELECT workflow_id FROM changed)`;

export class WorkflowRepo {
  constructor(readonly db: Knex) {}

  /**
   * Inserts a queued workflow, or returns the tenant's unfinished workflow
   * for the same request_id (a resubmission while it runs is idempotent).
   */
  async createOrGetActive(
    row: Pick<WorkflowRow, 'id' | 'request_id' | 'owner_id' | 'key_id' | 'params'>,
  ): Promise<{ id: string; created: boolean }> {
    const inserted = await this.db.raw<{ rows: { id: string }[] }>(
      `INSERT INTO batch_workflows (id, request_id, owner_id, key_id, params)
       VALUES (?, ?, ?, ?, ?::jsonb)
       ON CONFLICT (owner_id, request_id) WHERE status IN ('queued', 'running') DO NOTHING
       RETURNING id`,
      [row.id, row.request_id, row.owner_id, row.key_id, JSON.stringify(row.params)],
    );
    if (inserted.rows.length) return { id: row.id, created: true };
    const existing = await this.db('batch_workflows')
      .where({ owner_id: row.owner_id, request_id: row.request_id })
      .whereIn('status', ['queued', 'running'])
      .first<{ id: string } | undefined>('id');
    if (existing) return { id: existing.id, created: false };
    // It finished between the two statements: try once more.
    return this.createOrGetActive(row);
  }

  /** The tenant's unfinished workflows (queued or running), counted up to `limit`. */
  async unfinished(ownerId: string, limit: number): Promise<number> {
    const { rows } = await this.db.raw<{ rows: { n: string }[] }>(
      `SELECT count(*) AS n FROM (SELECT 1 FROM batch_workflows
        WHERE owner_id = ? AND status IN ('queued', 'running') LIMIT ?) t`,
      [ownerId, limit],
    );
    return Number(rows[0]?.n ?? 0);
  }

  /** The tenant's unfinished workflow of this request_id, if any. */
  async activeFor(ownerId: string, requestId: string): Promise<string | undefined> {
    const row = await this.db('batch_workflows')
      .where({ owner_id: ownerId, request_id: requestId })
      .whereIn('status', ['queued', 'running'])
      .first<{ id: string } | undefined>('id');
    return row?.id;
  }

  /** How many unfinished workflows of the same tenant were submitted before this one (its place in its tenant's line). */
  async tenantBacklogAhead(id: string): Promise<number> {
    const { rows } = await this.db.raw<{ rows: { n: string }[] }>(
      `SELECT count(*) AS n FROM batch_workflows w JOIN batch_workflows me ON me.id = ?
        WHERE w.owner_id = me.owner_id AND w.status IN ('queued', 'running')
          AND (w.created_at, w.id) < (me.created_at, me.id)`,
      [id],
    );
    return Number(rows[0]?.n ?? 0);
  }

  async get(id: string): Promise<WorkflowRow | undefined> {
    return this.db<WorkflowRow>('batch_workflows').where({ id }).first();
  }

  /**
   * What polls show of the given workflows, each with its tenant in the same
   * join condition, in one query: undefined for an unknown id or another
   * tenant's workflow; the kept body, or the row to present.
   */
  async pollRows(ids: string[], owners: string[]): Promise<(PollRow | undefined)[]> {
    const { rows } = await this.db.raw<{ rows: (PollRow & { i: number })[] }>(POLL_ROWS, [ids, owners]);
    const found = new Array<PollRow | undefined>(ids.length);
    for (const { i, ...row } of rows) found[i - 1] = row;
    return found;
  }

  /** Keeps presented poll bodies, each only if its workflow has not changed since it was read (`rev`). */
  async keepPollBodies(bodies: { id: string; rev: number; body: string }[]): Promise<void> {
    await this.db.raw(
      `UPDATE batch_workflows w SET poll_body = v.body
         FROM unnest(?::text[], ?::int4[], ?::text[]) AS v(id, rev, body)
        WHERE w.id = v.id AND w.poll_rev = v.rev AND w.poll_body IS NULL`,
      [bodies.map((b) => b.id), bodies.map((b) => b.rev), bodies.map((b) => b.body)],
    );
  }

  /**
   * Takes the workflow for a run (`runner`: that run's own id) and returns
   * its row, or `deferred` when its tenant already runs `maxPerTenant`
   * workflows (any process): it waits its turn. Serialised per tenant
   * (advisory lock), so processes racing for one tenant's jobs cannot
   * overshoot the bound.
   *
   * Whether the run may work is pg-boss's to say: it hands a workflow's job
   * to one worker at a time (stately queue) and fails it, for a retry
   * elsewhere, when that worker's heartbeat stops. So this takes the
   * workflow over from any earlier run still named on it: that run neither
   * finished nor gave it back, so its process died or hung (or lost its
   * job), and `lapses` counts it.
   */
  async acquire(
    id: string,
    runner: string,
    jobId: string | null = null,
    maxPerTenant = Infinity,
  ): Promise<WorkflowRow | 'deferred' | undefined> {
    return this.db.transaction(async (tx) => {
      const found = await tx('batch_workflows')
        .where({ id })
        .first<{ owner_id: string; key_id: string; status: string } | undefined>(
          'owner_id',
          'key_id',
          'status',
        );
      if (!found) return undefined;
      // A key revoked (or expired) after its job was accepted, even while its body was still arriving
      // (revocation terminates the jobs it finds; this one was not there yet): it never runs.
      const key = await tx('api_keys')
        .where({ id: found.key_id })
        .first<{ status: string; revoked_at: Date | null; expires_at: Date | null } | undefined>(
          'status',
          'revoked_at',
          'expires_at',
        );
      if (
        key &&
        (found.status === 'queued' || found.status === 'running') &&
        effectiveStatus(key) !== 'active'
      ) {
        await tx('batch_workflows')
          .where({ id })
          .whereIn('status', ['queued', 'running'])
          .update({
            status: 'terminated',
            error: JSON.stringify({
              name: 'key_revoked',
              message: `The API key that submitted this job is ${effectiveStatus(key)}.`,
            }),
            ended_at: tx.fn.now(),
            updated_at: tx.fn.now(),
            run_owner: null,
            poll_body: null,
            poll_rev: tx.raw('poll_rev + 1'),
          });
        return undefined;
      }
      await tx.raw('SELECT pg_advisory_xact_lock(hashtextextended(?, 0))', [
        `batch_tenant:${found.owner_id}`,
      ]);
      if (Number.isFinite(maxPerTenant)) {
        // Held by a run (a dead run's workflow too, until pg-boss retries its job and that run takes it over).
        const [{ n }] = await tx('batch_workflows')
          .where({ owner_id: found.owner_id, status: 'running' })
          .whereNotNull('run_owner')
          .andWhereNot({ id })
          .count<{ n: string }[]>('* as n');
        if (Number(n) >= maxPerTenant) return 'deferred';
      }
      const res = await tx.raw<{ rows: WorkflowRow[] }>(
        `UPDATE batch_workflows
           SET run_owner = ?, status = 'running', job_id = coalesce(?, job_id),
               started_at = coalesce(started_at, now()), runs = runs + 1, updated_at = now(),
               lapses = lapses + CASE WHEN status = 'running' AND run_owner IS NOT NULL AND run_owner <> ?
                                      THEN 1 ELSE 0 END,
               ${STALE_POLL}
         WHERE id = ? AND status IN ('queued', 'running')
         RETURNING *`,
        [runner, jobId, runner, id],
      );
      return res.rows[0];
    });
  }

  /** Whether the run still holds the workflow (it was not finished, terminated or taken over). */
  async holds(id: string, runner: string): Promise<boolean> {
    const row = await this.db('batch_workflows')
      .where({ id, run_owner: runner, status: 'running' })
      .first<{ id: string } | undefined>('id');
    return row !== undefined;
  }

  /**
   * Keeps the id of the pg-boss job just sent for an unfinished workflow (`acquire` keeps the one
   * that runs it): cancelling the workflow cancels that job through pg-boss (BatchRuntime).
   */
  async noteJob(id: string, jobId: string): Promise<void> {
    await this.db('batch_workflows')
      .where({ id })
      .whereIn('status', ['queued', 'running'])
      .update({ job_id: jobId });
  }

  /** The pg-boss job id kept on the workflow (see `noteJob`), if any. */
  async jobId(id: string): Promise<string | null> {
    const row = await this.db('batch_workflows')
      .where({ id })
      .first<{ job_id: string | null } | undefined>('job_id');
    return row?.job_id ?? null;
  }

  /** The run gives the workflow back (shutdown): the next run of it takes it over without counting a crash. */
  async release(id: string, runner: string): Promise<void> {
    await this.db('batch_workflows').where({ id, run_owner: runner }).update({ run_owner: null });
  }

  /** Merges step outputs into the workflow's output. */
  async saveOutput(id: string, patch: Record<string, unknown>): Promise<void> {
    await this.db('batch_workflows')
      .where({ id })
      .update({
        output: this.db.raw('output || ?::jsonb', [JSON.stringify(patch)]),
        updated_at: this.db.fn.now(),
        ...this.stalePoll(),
      });
  }

  async finish(
    id: string,
    owner: string,
    status: 'complete' | 'errored',
    error?: { name: string; message: string },
  ): Promise<boolean> {
    const n = await this.db('batch_workflows')
      .where({ id, run_owner: owner, status: 'running' })
      .update({
        status,
        error: error ? JSON.stringify(error) : null,
        ended_at: this.db.fn.now(),
        updated_at: this.db.fn.now(),
        run_owner: null,
        ...this.stalePoll(),
      });
    return n > 0;
  }

  /** The columns of STALE_POLL, for knex updates. */
  private stalePoll() {
    return { poll_body: null, poll_rev: this.db.raw('poll_rev + 1') };
  }

  async stepStart(id: string, { name, seq }: StepRef): Promise<void> {
    await this.db.raw(
      withStalePoll(`INSERT INTO batch_steps (workflow_id, name, seq, status, started_at, attempts)
       VALUES (?, ?, ?, 'running', now(), 1)
       ON CONFLICT (workflow_id, name) DO UPDATE
         SET status = 'running', started_at = now(), ended_at = NULL, error = NULL, attempts = batch_steps.attempts + 1`),
      [id, name, seq],
    );
  }

  async stepSet(id: string, { name, seq }: StepRef, status: StepStatus, error?: string): Promise<void> {
    const ended = status === 'complete' || status === 'errored' || status === 'skipped';
    await this.db.raw(
      withStalePoll(`INSERT INTO batch_steps (workflow_id, name, seq, status, started_at, ended_at, attempts, error)
       VALUES (?, ?, ?, ?, now(), ${ended ? 'now()' : 'NULL'}, 0, ?)
       ON CONFLICT (workflow_id, name) DO UPDATE
         SET status = EXCLUDED.status, ended_at = ${ended ? 'now()' : 'NULL'}, error = EXCLUDED.error`),
      [id, name, seq, status, error ?? null],
    );
  }

  /** A step satisfied by earlier work (a checkpoint): shown complete with no attempt, an earlier row is kept as it is. */
  async stepReused(id: string, { name, seq }: StepRef): Promise<void> {
    await this.db.raw(
      withStalePoll(`INSERT INTO batch_steps (workflow_id, name, seq, status, started_at, ended_at, attempts)
       VALUES (?, ?, ?, 'complete', now(), now(), 0)
       ON CONFLICT (workflow_id, name) DO UPDATE SET status = 'complete', ended_at = coalesce(batch_steps.ended_at, now())
       WHERE batch_steps.status <> 'complete'`),
      [id, name, seq],
    );
  }

  /**
   * Ends an unfinished workflow that pg-boss gave up on (its job failed
   * every attempt and went to the dead-letter queue), whoever last ran it.
   * False when it had already ended.
   */
  async abandon(id: string, error: { name: string; message: string }): Promise<boolean> {
    const n = await this.db('batch_workflows')
      .where({ id })
      .whereIn('status', ['queued', 'running'])
      .update({
        status: 'errored',
        error: JSON.stringify(error),
        ended_at: this.db.fn.now(),
        updated_at: this.db.fn.now(),
        run_owner: null,
        ...this.stalePoll(),
      });
    return n > 0;
  }

  /** Whether the unfinished workflows were queued in this pg-boss schema already (BatchRuntime.handOff). */
  async handedOff(schema: string): Promise<boolean> {
    return (await this.db('batch_pgboss_handoffs').where({ schema }).first()) !== undefined;
  }

  async recordHandOff(schema: string, workflows: number): Promise<void> {
    await this.db('batch_pgboss_handoffs').insert({ schema, workflows }).onConflict('schema').ignore();
  }

  /** Whoever ran it last gives the workflow back (its queue job was not carried over): no crash is counted. */
  async giveBack(id: string): Promise<void> {
    await this.db('batch_workflows').where({ id }).update({ run_owner: null });
  }

  /** Unfinished workflows (queued or running) after `afterId`, by id: the ones a new pg-boss schema is handed. */
  async unfinishedIds(afterId = '', limit = 1000): Promise<string[]> {
    const rows = await this.db('batch_workflows')
      .whereIn('status', ['queued', 'running'])
      .andWhere('id', '>', afterId)
      .orderBy('id')
      .limit(limit)
      .select<{ id: string }[]>('id');
    return rows.map((r) => r.id);
  }

  /**
   * Webhook deliveries that are due but lost: finished workflows whose
   * webhook step still waits, with no attempt recorded `graceSeconds` after
   * the end, or whose last failed attempt's retry is `graceSeconds` overdue
   * with no later attempt. Returns the attempt number to send next.
   */
  async lostWebhooks(graceSeconds: number, limit = 100): Promise<{ id: string; attempt: number }[]> {
    const { rows } = await this.db.raw<{ rows: { id: string; attempt: string | number }[] }>(
      `SELECT w.id, COALESCE(last.attempt, 0) + 1 AS attempt
         FROM batch_workflows w
         JOIN batch_steps s ON s.workflow_id = w.id AND s.name = ? AND s.status = 'waiting'
         LEFT JOIN LATERAL (
           SELECT d.attempt, d.outcome, d.next_attempt_at FROM batch_webhook_deliveries d
            WHERE d.workflow_id = w.id ORDER BY d.attempt DESC LIMIT 1
         ) last ON true
        WHERE w.status IN ('complete', 'errored')
          AND (
            (last.attempt IS NULL AND w.ended_at < now() - make_interval(secs => ?))
            OR (last.outcome = 'failed' AND last.next_attempt_at < now() - make_interval(secs => ?))
          )
        ORDER BY w.ended_at
        LIMIT ?`,
      [STEPS.webhook.name, graceSeconds, graceSeconds, limit],
    );
    return rows.map((r) => ({
      id: r.id,
      attempt: Number(r.attempt),
    }));
  }

  /** The highest delivery attempt recorded for a workflow (0 when none). */
  async lastDeliveryAttempt(workflowId: string): Promise<number> {
    const row = await this.db('batch_webhook_deliveries')
      .where({ workflow_id: workflowId })
      .max('attempt as attempt')
      .first();
    return Number(row?.attempt ?? 0);
  }

  async recordDelivery(d: {
    workflow_id: string;
    message_id: string;
    attempt: number;
    url: string;
    outcome: 'delivered' | 'failed' | 'gone' | 'abandoned';
    status_code: number | null;
    error: string | null;
    duration_ms: number;
    next_attempt_at: Date | null;
  }): Promise<void> {
    await this.db('batch_webhook_deliveries').insert(d);
  }

  async deliveries(workflowId: string): Promise<Record<string, unknown>[]> {
    return this.db('batch_webhook_deliveries').where({ workflow_id: workflowId }).orderBy('attempt');
  }
}
