/**
 * Retention (BATCH_RETENTION_DAYS, issue 41): finished workflows are deleted
 * this long after they ended, their steps and deliveries with them, and the
 * artifacts of a request_id when no later run of it shares the prefix. Run
 * by the batch sweeper at most once a minute, 100 workflows at a time.
 */
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { artifactKeys } from './artifacts.js';
import { type ArtifactStore, tenantStore } from './storage/index.js';

interface Expired {
  id: string;
  owner_id: string;
  request_id: string;
  /** No later workflow of the tenant shares its request_id (its artifacts are the prefix's). */
  latest: boolean;
}

export class Retention {
  private last = 0;

  constructor(
    private readonly db: Knex,
    private readonly store: ArtifactStore,
    /** 0 keeps everything. */
    private readonly seconds: number,
    private readonly log: Logger,
  ) {}

  /** Deletes what is past retention (when a minute has passed since the last time, or `force`); how many workflows. */
  async expire(force = false): Promise<number> {
    if (!this.seconds || (!force && Date.now() - this.last < 60_000)) return 0;
    this.last = Date.now();
    const expired = await this.expired(100);
    for (const w of expired.filter((e) => e.latest)) {
      const store = tenantStore(this.store, w.owner_id);
      for (const key of await store.list(artifactKeys(w.request_id).prefix)) await store.delete(key);
    }
    const ids = expired.map((e) => e.id);
    if (ids.length) await this.db('batch_workflows').whereIn('id', ids).delete();
    if (ids.length) this.log.info({ count: ids.length }, 'finished workflows past retention deleted');
    return ids.length;
  }

  /** Finished workflows that ended more than `seconds` ago, oldest first. */
  private async expired(limit: number): Promise<Expired[]> {
    const { rows } = await this.db.raw<{ rows: Expired[] }>(
      `SELECT w.id, w.owner_id, w.request_id,
              NOT EXISTS (SELECT 1 FROM batch_workflows n
                           WHERE n.owner_id = w.owner_id AND n.request_id = w.request_id
                             AND n.id <> w.id AND n.created_at >= w.created_at) AS latest
         FROM batch_workflows w
        WHERE w.status NOT IN ('queued', 'running') AND w.ended_at < now() - make_interval(secs => ?)
        ORDER BY w.ended_at
        LIMIT ?`,
      [this.seconds, limit],
    );
    return rows;
  }
}
