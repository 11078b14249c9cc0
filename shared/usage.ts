/**
 * Metered usage (billed audio seconds) per key, in Postgres. Each billable
 * unit (a segment request, a realtime session, a batch job) writes one row
 * keyed by (plane, ref_id), so a retried flush never bills twice.
 */
import type { Knex } from 'knex';
import { counter } from './metrics/index.js';

export type Plane = 'segment' | 'realtime' | 'batch';

export interface UsageRecord {
  keyId: string;
  plane: Plane;
  audioSeconds: number;
  /** Request id, session id or workflow id; unique per plane. */
  refId: string;
}

const billed = counter('stt_billed_audio_seconds_total', 'Audio seconds billed, by plane (each unit once).', [
  'plane',
]);

export async function recordUsage(db: Knex, rec: UsageRecord): Promise<void> {
  const seconds = Math.max(0, rec.audioSeconds);
  const inserted = await db('usage_events')
    .insert({ key_id: rec.keyId, plane: rec.plane, ref_id: rec.refId, audio_seconds: seconds })
    .onConflict(['plane', 'ref_id'])
    .ignore()
    .returning('ref_id');
  if (inserted.length > 0) billed.inc({ plane: rec.plane }, seconds);
}

/** Audio seconds billed to a key within the last `windowSeconds`. */
export async function windowUsage(db: Knex, keyId: string, windowSeconds: number): Promise<number> {
  const row = await db('usage_events')
    .where('key_id', keyId)
    .andWhere('created_at', '>', db.raw(`now() - make_interval(secs => ?)`, [windowSeconds]))
    .sum<{ total: string | null }>('audio_seconds as total')
    .first();
  return Number(row?.total ?? 0);
}
