/**
 * Made-up keys must not take real tenants' places (issue 36). Upgrades
 * still being authenticated counted toward the instance's sessions: during
 * a flood of upgrades with random `sk-` keys, most real sessions were
 * refused 503 at capacity. Only authenticated upgrades count now; pre-auth
 * work is bounded on its own, per instance and per client address (here
 * behind one proxy hop, as HAProxy forwards them).
 */
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import WebSocket from 'ws';
import { connect, createRealtimeContext, type RealtimeTestContext } from './helpers.js';
import { startSpeechUpstream, type SpeechUpstream } from './upstream.js';

const ATTACKER = '203.0.113.66';

describe('realtime: a flood of made-up keys', function () {
  this.timeout(120_000);
  let ctx: RealtimeTestContext;
  let upstream: SpeechUpstream;
  before(async () => {
    upstream = await startSpeechUpstream();
    ctx = await createRealtimeContext({
      engine: upstream.engine,
      env: { REALTIME_MAX_SESSIONS: '5', TRUST_PROXY: '1' },
    });
  });
  after(async () => {
    await ctx?.close();
    await upstream?.close();
  });

  /** One upgrade with a random sk- key; resolves with its HTTP status once refused. */
  const bogus = () =>
    new Promise<number>((resolve) => {
      const ws = new WebSocket(ctx.url, {
        headers: {
          authorization: `Bearer sk-${randomBytes(20).toString('hex')}`,
          'x-forwarded-for': ATTACKER,
        },
      });
      ws.on('unexpected-response', (_req, res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      ws.on('error', () => resolve(0));
      ws.on('open', () => {
        ws.close();
        resolve(101);
      });
    });

  it('50 concurrent made-up-key upgrades: at least 95 % of 20 real sessions are admitted, none of the fakes', async () => {
    let flooding = true;
    const fakes: number[] = [];
    const loops = Array.from({ length: 50 }, async () => {
      while (flooding) fakes.push(await bogus());
    });
    const { key } = await ctx.issueKey('pro');
    let admitted = 0;
    const refusals: string[] = [];
    for (let i = 0; i < 20; i++) {
      try {
        const c = await connect(ctx.url, {
          headers: { authorization: `Bearer ${key}`, 'x-forwarded-for': `198.51.100.${i + 1}` },
        });
        await c.next('session.created');
        admitted++;
        c.ws.close(1000);
        await c.closed;
      } catch (err) {
        refusals.push(String((err as { status?: number }).status ?? err));
      }
    }
    flooding = false;
    await Promise.all(loops);
    expect(admitted, `refused: ${refusals.join(', ')}`).to.be.at.least(19);
    expect(fakes.length).to.be.greaterThan(50);
    expect(fakes.filter((s) => s === 101)).to.deep.equal([]);
    // Every fake was refused as such (401), or held back per address (429), never counted as a session.
    expect(fakes.filter((s) => s !== 401 && s !== 429)).to.deep.equal([]);
  });
});
