/**
 * Usage reports read from the metering table `usage_events` (key_id, plane,
 * ref_id, audio_seconds, created_at): audio seconds by plane and billable
 * units (segment requests, realtime sessions, batch jobs) per UTC day over a
 * date range, and each key's rolling billing window against its plan's
 * `maxAudioSecondsPerWindow`. Two SQL statements per report, whatever the
 * number of keys or days.
 */
import { billedInWindow } from '../../../shared/usage/budget.js';
import type { Knex } from 'knex';
import type { PlanCatalog } from '../../../shared/plans.js';
import type { Plane } from '../../../shared/usage.js';

const PLANES: Plane[] = ['segment', 'realtime', 'batch'];
/** What one row of each plane is, as a count. */
const UNIT: Record<Plane, 'requests' | 'sessions' | 'jobs'> = {
  segment: 'requests',
  realtime: 'sessions',
  batch: 'jobs',
};

export interface UsageFigures {
  audioSeconds: Record<Plane | 'total', number>;
  requests: number;
  sessions: number;
  jobs: number;
}

export interface UsageWindow {
  seconds: number;
  usedAudioSeconds: number;
  maxAudioSecondsPerWindow: number;
  remainingAudioSeconds: number;
}

export interface KeyUsage extends UsageFigures {
  keyId: string;
  ownerId: string;
  plan: string;
  label: string | null;
  window: UsageWindow;
}

export interface UsageReport {
  from: string;
  to: string;
  granularity: 'day';
  totals: UsageFigures;
  days: (UsageFigures & { date: string })[];
  keys: KeyUsage[];
}

export interface DateRange {
  /** First day, YYYY-MM-DD (UTC), inclusive. */
  from: string;
  /** Last day, YYYY-MM-DD (UTC), inclusive. */
  to: string;
}

const DAY_MS = 86_400_000;

function emptyFigures(): UsageFigures {
  return { audioSeconds: { segment: 0, realtime: 0, batch: 0, total: 0 }, requests: 0, sessions: 0, jobs: 0 };
}

function add(into: UsageFigures, plane: Plane, seconds: number, units: number): void {
  into.audioSeconds[plane] += seconds;
  into.audioSeconds.total += seconds;
  into[UNIT[plane]] += units;
}

/** Rounded for presentation: metering is in fractions of a second. */
function rounded(f: UsageFigures): UsageFigures {
  const r = (n: number) => Math.round(n * 1000) / 1000;
  return {
    ...f,
    audioSeconds: {
      segment: r(f.audioSeconds.segment),
      realtime: r(f.audioSeconds.realtime),
      batch: r(f.audioSeconds.batch),
      total: r(f.audioSeconds.total),
    },
  };
}

export function isoDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** The days of a range, oldest first. */
export function daysOf(range: DateRange): string[] {
  const out: string[] = [];
  const end = Date.parse(`${range.to}T00:00:00Z`);
  for (let d = Date.parse(`${range.from}T00:00:00Z`); d <= end; d += DAY_MS) out.push(isoDay(d));
  return out;
}

interface KeyInfo {
  id: string;
  owner_id: string;
  plan: string;
  label: string | null;
}

interface Row {
  key_id: string;
  day: string;
  plane: string;
  units: string | number;
  seconds: string | number | null;
}

/**
 * The report for some keys (all of one owner's, or one). `windowSeconds` is
 * the rolling billing window (USAGE_WINDOW_SECONDS).
 */
export async function usageReport(
  db: Knex,
  plans: PlanCatalog,
  keys: KeyInfo[],
  range: DateRange,
  windowSeconds: number,
): Promise<UsageReport> {
  const ids = keys.map((k) => k.id);
  const dayList = daysOf(range);
  const byDay = new Map(dayList.map((d) => [d, emptyFigures()]));
  const byKey = new Map(ids.map((id) => [id, emptyFigures()]));
  const totals = emptyFigures();
  const used = new Map<string, number>();

  if (ids.length > 0) {
    const [rows, windows] = await Promise.all([
      db('usage_events')
        .select(
          'key_id',
          db.raw(`to_char((created_at at time zone 'UTC')::date, 'YYYY-MM-DD') as day`),
          'plane',
          db.raw('count(distinct ref_id) as units'),
          db.raw('sum(audio_seconds) as seconds'),
        )
        .whereIn('key_id', ids)
        .andWhere('created_at', '>=', `${range.from}T00:00:00Z`)
        .andWhere('created_at', '<', new Date(Date.parse(`${range.to}T00:00:00Z`) + DAY_MS).toISOString())
        .groupByRaw('1, 2, 3') as Promise<Row[]>,
      billedInWindow(db, ids, windowSeconds),
    ]);
    for (const row of rows) {
      const plane = row.plane as Plane;
      if (!PLANES.includes(plane)) continue;
      const seconds = Number(row.seconds ?? 0);
      const units = Number(row.units);
      add(totals, plane, seconds, units);
      add(byDay.get(row.day)!, plane, seconds, units);
      add(byKey.get(row.key_id)!, plane, seconds, units);
    }
    for (const [keyId, seconds] of windows) used.set(keyId, seconds);
  }

  return {
    from: range.from,
    to: range.to,
    granularity: 'day',
    totals: rounded(totals),
    days: dayList.map((date) => ({ date, ...rounded(byDay.get(date)!) })),
    keys: keys.map((k) => {
      const max = plans.has(k.plan) ? plans.limits(k.plan).maxAudioSecondsPerWindow : 0;
      const usedSeconds = Math.round((used.get(k.id) ?? 0) * 1000) / 1000;
      return {
        keyId: k.id,
        ownerId: k.owner_id,
        plan: k.plan,
        label: k.label,
        ...rounded(byKey.get(k.id)!),
        window: {
          seconds: windowSeconds,
          usedAudioSeconds: usedSeconds,
          maxAudioSecondsPerWindow: max,
          remainingAudioSeconds: Math.max(0, Math.round((max - usedSeconds) * 1000) / 1000),
        },
      };
    }),
  };
}

/** Keys of one owner, or one key, for a report. */
export async function reportKeys(db: Knex, by: { ownerId: string } | { keyId: string }): Promise<KeyInfo[]> {
  const q = db<KeyInfo>('api_keys').select('id', 'owner_id', 'plan', 'label').orderBy('created_at', 'asc');
  if ('ownerId' in by) q.where('owner_id', by.ownerId);
  else q.where('id', by.keyId);
  return await q;
}
