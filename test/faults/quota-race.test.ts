/**
 * Faults: concurrent work racing the audio budget (issue 22). The plan's
 * rolling window (maxAudioSecondsPerWindow) used to be checked against what
 * was billed so far, reserving nothing for work in flight: a free key
 * (3,600 s) sent 6 concurrent 890 s uploads and all 6 were answered and
 * billed (5,340 s, 148 %). Now each unit of work reserves its seconds at
 * admission (shared/usage/budget.ts), atomically per key, on every plane
 * (batch jobs and segment uploads racing one window together included), and
 * gives it back once billed or failed. A key with nothing left is refused
 * before its upload is decoded.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import type { Knex } from 'knex';
import WebSocket from 'ws';
import request from 'supertest';
import { BUILTIN_PLANS } from '../../shared/plans.js';
import { createTestApp, issueKey, type TestApp } from '../helpers/app.js';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { createSpeechEngine } from '../../shared/stt/index.js';
import type { SpeechEngine } from '../../shared/stt/types.js';
import { connect, createRealtimeContext, type Client } from '../realtime/helpers.js';
import { tmpDir, waitFor } from './cluster.js';
import {
  audioDir,
  createBatchTestApp,
  pollJob,
  startFileServer,
  submitJob,
  type BatchTestApp,
  type FileServer,
} from '../batch/helpers.js';

/** A plan whose rolling window holds `seconds` of audio (otherwise pro's limits). */
const windowPlans = (plans: Record<string, number>) =>
  JSON.stringify(
    Object.fromEntries(
      Object.entries(plans).map(([name, seconds]) => [
        name,
        { ...BUILTIN_PLANS.pro, maxAudioSecondsPerWindow: seconds },
      ]),
    ),
  );

/** 2.99 s of speech (librivox-austen-0880.wav): three fit a 10 s window, four do not. */
const CLIP = 'librivox-austen-0880.wav';
const CLIP_SECONDS = 2.99;

type Job = { status: string; error: { name: string; message: string } | null };

/** The job's poll once it has ended (complete or errored). */
function jobEnded(t: TestApp, key: string, id: string, timeoutMs = 60_000): Promise<Job> {
  return waitFor(
    `job ${id} to end`,
    async () => {
      const { status, error } = await pollJob(t, key, id);
      return status === 'complete' || status === 'errored' ? { status, error } : undefined;
    },
    timeoutMs,
    200,
  );
}

/** A segment upload of test/audio's `file`: status, error code, Retry-After. */
async function upload(t: TestApp, key: string, file: string) {
  const res = await request(t.server)
    .post('/v1/audio/transcriptions')
    .set('authorization', `Bearer ${key}`)
    .attach('file', path.join(audioDir, file), 'clip.wav');
  return {
    status: res.status,
    code: (res.body as { error?: { code: string } }).error?.code,
    retryAfter: res.headers['retry-after'] as string | undefined,
  };
}

async function billed(t: TestApp, keyId: string): Promise<number> {
  const [{ total }] = await t.deps
    .db('usage_events')
    .where('key_id', keyId)
    .sum<{ total: string | null }[]>('audio_seconds as total');
  return Number(total ?? 0);
}

const reservationsOf = (db: Knex, keyId: string) =>
  db('usage_reservations').where('key_id', keyId).select('plane', 'ref_id', 'audio_seconds');

describe('faults: concurrent work racing the audio budget', function () {
  this.timeout(180_000);

  describe('segment uploads', () => {
    let t: TestApp;
    let server: http.Server;
    let url: string;
    const dir = tmpDir('stt-quota-');
    const clip = path.join(dir, 'silence-890.flac');

    before(async () => {
      execFileSync('ffmpeg', [
        '-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'anullsrc=r=16000:cl=mono',
        '-t', '890', '-c:a', 'flac', clip,
      ]); // prettier-ignore
      // jfk.wav is 11.000 s: one upload fills an 11 s window exactly.
      t = await createTestApp({ PLANS_JSON: windowPlans({ exact: 11 }) });
      server = http.createServer(t.server);
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
      url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
    });
    after(async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await t.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('6 concurrent 890 s uploads on a 3,600 s window: 4 answered, 2 refused 429, 3,560 s billed', async () => {
      const { key, id } = await issueKey(t, { plan: 'free' });
      const data = new Uint8Array(fs.readFileSync(clip));
      const send = async () => {
        const form = new FormData();
        form.append('file', new Blob([data]), 'clip.flac');
        const res = await fetch(`${url}/v1/audio/transcriptions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}` },
          body: form,
        });
        return { status: res.status, body: await res.text(), retryAfter: res.headers.get('retry-after') };
      };
      const answers = await Promise.all(Array.from({ length: 6 }, send));
      const ok = answers.filter((a) => a.status === 200);
      const refused = answers.filter((a) => a.status !== 200);
      expect(ok.length, JSON.stringify(answers.map((a) => a.status))).to.equal(4);
      for (const r of refused) {
        expect(r.status).to.equal(429);
        const { error } = JSON.parse(r.body) as { error: { code: string; message: string } };
        expect(error.code).to.equal('audio_quota_exhausted');
        // When the first upload's 890 s age out of the 86,400 s window (before: always 60), and what
        // is left said as such (before: "exhausted" with 40 s left).
        expect(Number(r.retryAfter)).to.be.within(86_000, 86_400);
        expect(error.message).to.match(/^This clip \(890(\.\d+)? s\) does not fit the 40(\.\d+)? s left/);
        expect(error.message).to.match(/It fits again in \d+ s\.$/);
      }
      const [{ total }] = await t.deps
        .db('usage_events')
        .where('key_id', id)
        .sum<{ total: string }[]>('audio_seconds as total');
      expect(Number(total)).to.be.closeTo(4 * 890, 1);
      // Every reservation was released once billed or refused.
      const held = await t.deps.db('usage_reservations').where('key_id', id);
      expect(held).to.deep.equal([]);
    });

    it('a key whose window is used up is refused 429 before its upload is decoded', async () => {
      const { key, id } = await issueKey(t, { plan: 'exact' });
      expect(await upload(t, key, 'jfk.wav')).to.include({ status: 200 });
      expect(await billed(t, id)).to.equal(11);
      // Not audio at all: decoded first it would be 400 invalid_audio. Refused before the decode, it
      // takes no decode slot (before: every upload of such a key was decoded, then refused).
      const res = await request(t.server)
        .post('/v1/audio/transcriptions')
        .set('authorization', `Bearer ${key}`)
        .attach('file', Buffer.from('not audio at all, and never decoded'), 'clip.wav');
      expect(res.status, JSON.stringify(res.body)).to.equal(429);
      expect(res.body.error.code).to.equal('audio_quota_exhausted');
      expect(Number(res.headers['retry-after'])).to.be.within(86_000, 86_400);
      expect(res.body.error.message).to.match(/^The audio budget of 11 s per window is used up\. It fits/);
      // A real clip too, and nothing more is billed.
      expect(await upload(t, key, CLIP)).to.include({ status: 429, code: 'audio_quota_exhausted' });
      expect(await billed(t, id)).to.equal(11);
    });
  });

  describe('batch jobs, alone and beside segment uploads, racing one window', () => {
    let t: BatchTestApp;
    let files: FileServer;
    const WINDOW = 10;

    before(async () => {
      files = await startFileServer(audioDir);
      // Enough workflow slots and per-tenant room for all of one key's jobs to probe at once.
      t = await createBatchTestApp(
        {
          PLANS_JSON: windowPlans({ tight: WINDOW }),
          BATCH_WORKFLOWS_PER_PROCESS: '6',
          BATCH_MAX_RUNNING_PER_TENANT: '6',
        },
        { start: true },
      );
    });
    after(async () => {
      await t?.close();
      await files?.close();
    });

    it('6 concurrent 3 s jobs on a 10 s window: 3 complete, 3 refused by the budget; within the window; nothing left reserved', async () => {
      const { key, id } = await issueKey(t, { plan: 'tight', ownerId: 'tenant-batch-race' });
      const ids = await Promise.all(
        Array.from({ length: 6 }, () => submitJob(t, key, `${files.url}/${CLIP}`)),
      );
      const jobs = await Promise.all(ids.map((j) => jobEnded(t, key, j)));
      const complete = jobs.filter((j) => j.status === 'complete');
      expect(complete.length, JSON.stringify(jobs)).to.equal(3);
      for (const j of jobs.filter((j) => j.status !== 'complete')) {
        expect(j.error!.name).to.equal('AudioQuotaExceededError');
      }
      expect(await billed(t, id)).to.be.closeTo(3 * CLIP_SECONDS, 0.01);
      // A complete job's reservation is released after its bill; a refused job never held one.
      expect(await reservationsOf(t.deps.db, id)).to.deep.equal([]);
    });

    it('3 jobs and 3 uploads of 3 s at once on a 10 s window: 3 served in all, the rest refused; within the window', async () => {
      const { key, id } = await issueKey(t, { plan: 'tight', ownerId: 'tenant-mixed-race' });
      const [ids, uploads] = await Promise.all([
        Promise.all(Array.from({ length: 3 }, () => submitJob(t, key, `${files.url}/${CLIP}`))),
        Promise.all(Array.from({ length: 3 }, () => upload(t, key, CLIP))),
      ]);
      const jobs = await Promise.all(ids.map((j) => jobEnded(t, key, j)));
      const served =
        jobs.filter((j) => j.status === 'complete').length + uploads.filter((u) => u.status === 200).length;
      expect(served, JSON.stringify({ jobs, uploads })).to.equal(3);
      for (const j of jobs.filter((j) => j.status !== 'complete'))
        expect(j.error!.name).to.equal('AudioQuotaExceededError');
      for (const u of uploads.filter((u) => u.status !== 200))
        expect(u).to.include({ status: 429, code: 'audio_quota_exhausted' });
      expect(await billed(t, id)).to.be.closeTo(3 * CLIP_SECONDS, 0.01);
      expect(await billed(t, id)).to.be.at.most(WINDOW);
      await waitFor(
        'reservations released',
        async () => (await reservationsOf(t.deps.db, id)).length === 0,
        2000,
        50,
      );
    });
  });

  describe('work that fails after reserving', () => {
    // A real engine failure: every decode may take 1 ms at most (the builtin engine's decode limit),
    // so each clip passes the budget, then fails in the engine.
    let t: BatchTestApp;
    let files: FileServer;

    before(async () => {
      files = await startFileServer(audioDir);
      t = await createBatchTestApp(
        {
          PLANS_JSON: windowPlans({ one: 5 }), // one 3 s clip at a time
          STT_BUILTIN_TIMEOUT_BASE_MS: '1',
          STT_BUILTIN_TIMEOUT_PER_AUDIO_SECOND_MS: '0',
        },
        { start: true },
      );
    });
    after(async () => {
      await t?.close();
      await files?.close();
    });

    it('a batch job that errors after its probe reserved releases the reservation: the next job passes the budget', async () => {
      const { key, id } = await issueKey(t, { plan: 'one', ownerId: 'tenant-batch-fails' });
      for (const round of [1, 2]) {
        const wf = await submitJob(t, key, `${files.url}/${CLIP}`);
        const job = await jobEnded(t, key, wf);
        // Failed in the engine, not refused by the budget: the earlier job's 3 s were given back.
        expect(job.status, `job ${round}`).to.equal('errored');
        expect(job.error!.name, `job ${round}: ${job.error!.message}`).to.equal('EngineBusyError');
        expect(job.error!.message).to.match(/Decoding took longer than 1 ms/);
        expect(await reservationsOf(t.deps.db, id), `job ${round}`).to.deep.equal([]);
      }
      expect(await billed(t, id)).to.equal(0);
    });

    it('a segment upload whose transcription fails releases its reservation: the next upload passes the budget', async () => {
      const { key, id } = await issueKey(t, { plan: 'one', ownerId: 'tenant-segment-fails' });
      for (const round of [1, 2, 3]) {
        // 503 engine_overloaded (the decode limit), never 429: the window is whole again each time.
        const res = await upload(t, key, CLIP);
        expect(res, `upload ${round}`).to.deep.equal({
          status: 503,
          code: 'engine_overloaded',
          retryAfter: '2',
        });
        await waitFor(
          'reservation released',
          async () => (await reservationsOf(t.deps.db, id)).length === 0,
          2000,
          50,
        );
      }
      expect(await billed(t, id)).to.equal(0);
    });
  });

  describe('the budget itself', () => {
    let t: TestApp;
    before(async () => (t = await createTestApp()));
    after(async () => t?.close());

    it('20 concurrent reservations of 890 s on a 3,600 s window: exactly 4 granted; a bill replaces its reservation', async () => {
      const { id } = await issueKey(t, { plan: 'free' });
      const { budget } = t.deps;
      const reservations = Array.from({ length: 20 }, (_, i) =>
        budget.reservation({ plane: 'segment', refId: `r${i}`, keyId: id }),
      );
      const decisions = await Promise.all(
        reservations.map((r) => r.reserve({ seconds: 890, limit: 3600, ttlSeconds: 60 })),
      );
      expect(decisions.filter((d) => d.ok).length).to.equal(4);
      expect(await budget.used(id)).to.be.closeTo(3560, 1e-6);
      // Billing one (as the ledger does) and then releasing it leaves the total as it was.
      const granted = decisions.findIndex((d) => d.ok);
      await t.deps.ledger.record({ keyId: id, plane: 'segment', refId: `r${granted}`, audioSeconds: 890 });
      expect(await budget.used(id)).to.be.closeTo(3560, 1e-6);
      await reservations[granted].release();
      expect(await budget.used(id)).to.be.closeTo(3560, 1e-6);
      // Without its reservations, only the bill counts.
      await t.deps.db('usage_reservations').where({ key_id: id }).delete();
      expect(await budget.used(id)).to.be.closeTo(890, 1e-6);
    });

    it('a reservation is billed once and ended once, however often bill and release are called', async () => {
      const { id } = await issueKey(t, { plan: 'free' });
      const r = t.deps.budget.reservation({ plane: 'segment', refId: `once-${id}`, keyId: id });
      expect(await r.reserve({ seconds: 100, limit: 3600, ttlSeconds: 60 })).to.include({ ok: true });
      // A release asked for while the bill is written waits for it: the window never counts neither.
      await Promise.all([r.bill(40), r.release(), r.bill(70)]);
      await r.release();
      expect(await t.deps.db('usage_reservations').where({ key_id: id })).to.deep.equal([]);
      const bills = await t.deps.db('usage_events').where({ key_id: id }).select('audio_seconds');
      expect(bills.map((b) => Number(b.audio_seconds))).to.deep.equal([40]);
      expect(await t.deps.budget.used(id)).to.be.closeTo(40, 1e-6);
    });
  });

  describe('realtime sessions', () => {
    let rt: Awaited<ReturnType<typeof createRealtimeContext>>;
    let engine: SpeechEngine;
    before(async () => {
      engine = createSpeechEngine(loadConfig({ STT_THREADS: '1' }), createLogger({ level: 'silent' }));
      rt = await createRealtimeContext({
        engine,
        env: {
          PLANS_JSON: JSON.stringify({
            small: {
              ...BUILTIN_PLANS.pro,
              maxAudioSecondsPerWindow: 100,
              maxAudioSecondsPerSession: 60,
            },
          }),
        },
      });
    });
    after(async () => {
      await rt?.close();
      await engine?.close();
    });

    it('concurrent sessions share the window: 60 s, then the 40 s left, then none (1008 audio_quota_exhausted)', async () => {
      const { key, id } = await rt.issueKey('small');
      const open = async (): Promise<Client> => {
        const c = await connect(rt.url, { headers: { authorization: `Bearer ${key}` } });
        await c.next('session.created');
        return c;
      };
      const [a, b] = await Promise.all([open(), open()]);
      const budgets = [a, b]
        .map((c) => (c.events[0].limits as { remaining_audio_seconds: number }).remaining_audio_seconds)
        .sort((x, y) => x - y);
      expect(budgets).to.deep.equal([40, 60]);
      const c = await connect(rt.url, { headers: { authorization: `Bearer ${key}` } });
      const closed = await c.closed;
      expect(closed).to.deep.equal({ code: 1008, reason: 'audio_quota_exhausted' });
      // A session that ends gives back what it did not use.
      a.ws.close();
      b.ws.close();
      await Promise.all([a.closed, b.closed]);
      // The ended sessions' reservations go once they are billed (a moment after they close).
      for (let i = 0; i < 100 && (await rt.db('usage_reservations').where('key_id', id)).length > 0; i++) {
        await new Promise((r) => setTimeout(r, 50));
      }
      const s = await connect(rt.url, { headers: { authorization: `Bearer ${key}` } });
      const created = await s.next('session.created');
      const again = {
        s,
        budget: (created.limits as { remaining_audio_seconds: number }).remaining_audio_seconds,
      };
      expect(again.budget).to.equal(60);
      again.s.ws.close();
    });

    it('an upgrade whose client leaves while its reservation is made gives the reservation back', async () => {
      const { key, id } = await rt.issueKey('small');
      const advisoryLocks = async (granted: boolean) => {
        const { rows } = await rt.db.raw<{ rows: { n: string }[] }>(
          `SELECT count(*) AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
            WHERE l.locktype = 'advisory' AND l.granted = ? AND d.datname = current_database()`,
          [granted],
        );
        return Number(rows[0].n);
      };
      // Another reservation of the key in progress (the budget's per-key lock held): the upgrade's own
      // reservation waits for it, and the client leaves meanwhile.
      const holder = await rt.db.transaction();
      try {
        await holder.raw('SELECT pg_advisory_xact_lock(hashtextextended(?, 0))', [`usage_budget:${id}`]);
        const ws = new WebSocket(rt.url, { headers: { authorization: `Bearer ${key}` } });
        ws.on('error', () => {});
        await waitFor(
          'the upgrade to wait for the budget',
          async () => (await advisoryLocks(false)) > 0,
          10_000,
          20,
        );
        ws.terminate();
        await new Promise((r) => setTimeout(r, 300)); // the server sees the client gone
      } finally {
        await holder.commit();
      }
      // The upgrade's reservation is made (its transaction over), then the server finds its client gone.
      await waitFor(
        'the reservation made',
        async () => (await advisoryLocks(true)) + (await advisoryLocks(false)) === 0,
        5000,
        20,
      );
      // Before: the reservation (60 s) stayed until its TTL (the plan's session length + 60 s), and
      // the key's next session was offered 40 s of its 100 s window instead of 60 s.
      await waitFor(
        'the reservation to go',
        async () => (await reservationsOf(rt.db, id)).length === 0,
        3000,
        50,
      );
      const s = await connect(rt.url, { headers: { authorization: `Bearer ${key}` } });
      const created = await s.next('session.created');
      expect((created.limits as { remaining_audio_seconds: number }).remaining_audio_seconds).to.equal(60);
      s.ws.close();
      await s.closed;
    });
  });
});
