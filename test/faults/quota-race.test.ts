/**
 * Faults: concurrent work racing the audio budget (issue 22). The plan's
 * rolling window (maxAudioSecondsPerWindow) used to be checked against what
 * was billed so far, reserving nothing for work in flight: a free key
 * (3,600 s) sent 6 concurrent 890 s uploads and all 6 were answered and
 * billed (5,340 s, 148 %). Now each unit of work reserves its seconds at
 * admission (shared/usage/budget.ts), atomically per key.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import { BUILTIN_PLANS } from '../../shared/plans.js';
import { createTestApp, issueKey, type TestApp } from '../helpers/app.js';
import { loadConfig } from '../../shared/config/index.js';
import { createLogger } from '../../shared/logger.js';
import { createSpeechEngine } from '../../shared/stt/index.js';
import type { SpeechEngine } from '../../shared/stt/types.js';
import { connect, createRealtimeContext, type Client } from '../realtime/helpers.js';
import { UsageBudget } from '../../shared/usage/budget.js';
import { tmpDir } from './cluster.js';

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
      t = await createTestApp();
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
        expect(JSON.parse(r.body).error.code).to.equal('audio_quota_exhausted');
        expect(r.retryAfter).to.match(/^\d+$/);
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
  });

  describe('the budget itself', () => {
    let t: TestApp;
    before(async () => (t = await createTestApp()));
    after(async () => t?.close());

    it('20 concurrent reservations of 890 s on a 3,600 s window: exactly 4 granted; a bill replaces its reservation', async () => {
      const { id } = await issueKey(t, { plan: 'free' });
      const budget = new UsageBudget(t.deps.db, 3600);
      const decisions = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          budget.reserve({ plane: 'segment', refId: `r${i}`, keyId: id, seconds: 890, ttlSeconds: 60 }, 3600),
        ),
      );
      expect(decisions.filter((d) => d.ok).length).to.equal(4);
      expect(await budget.used(id)).to.be.closeTo(3560, 1e-6);
      // Billing one (as the ledger does) and then releasing it leaves the total as it was.
      const granted = decisions.findIndex((d) => d.ok);
      await t.deps.ledger.record({ keyId: id, plane: 'segment', refId: `r${granted}`, audioSeconds: 890 });
      expect(await budget.used(id)).to.be.closeTo(3560, 1e-6);
      await budget.release('segment', `r${granted}`);
      expect(await budget.used(id)).to.be.closeTo(3560, 1e-6);
      // Without its reservations, only the bill counts.
      await t.deps.db('usage_reservations').where({ key_id: id }).delete();
      expect(await budget.used(id)).to.be.closeTo(890, 1e-6);
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
  });
});
