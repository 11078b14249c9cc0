/**
 * The k6 script of test/load/k6 runs against a real realtime server with real
 * speech (PocketSphinx) through the Node runner (k6 itself cannot be
 * installed on these machines): it connects, streams, drains and reports.
 */
import { expect } from 'chai';
import path from 'node:path';
import { realtimeWithBuiltinEngine, repoRoot, type RealtimeTestContext } from '../realtime/helpers.js';
import { runK6Script } from './k6/node-runner.js';
import { runLoad } from './realtime-load.js';

describe('load tools: the Node load generator and the k6 realtime script (real server and speech)', function () {
  this.timeout(120_000);
  const context = realtimeWithBuiltinEngine();
  let ctx: RealtimeTestContext;
  beforeEach(() => {
    ctx = context();
  });

  it('streams real speech from every VU and reports connect time, completions and thresholds', async () => {
    const { key } = await ctx.issueKey('pro');
    const result = await runK6Script(path.join(repoRoot, 'test/load/k6/realtime.js'), {
      URL: ctx.url,
      KEY: key,
      VUS: '2',
      DURATION_S: '8',
    });
    // One session per VU (an iteration may start after the streams end, and connects nothing); a
    // connection closed before its session.created is opened again (docs/realtime.md).
    const early = result.metrics.rt_early_closes?.count ?? 0;
    expect(result.metrics.rt_connect_ms.count).to.equal(2 + early);
    expect(result.metrics.rt_close_1000.count, 'closed by the VUs themselves').to.equal(2);
    expect(result.metrics.rt_server_closes?.count ?? 0).to.equal(0);
    expect(result.metrics.rt_refused_connects?.count ?? 0).to.equal(0);
    // The JFK clip (11 s) in 8 s of real time, then a flush: at least one utterance each.
    expect(result.metrics.rt_utterances.count).to.be.at.least(2);
    expect(result.metrics.rt_completion_ms.count).to.equal(result.metrics.rt_utterances.count);
    expect(result.metrics.rt_failed_utterances?.count ?? 0).to.equal(0);
    const byMetric = Object.fromEntries(result.thresholds.map((t) => [t.metric, t]));
    expect(byMetric.rt_connect_ms.ok).to.equal(true);
    expect(byMetric.rt_failed_utterances.ok).to.equal(true);
    expect(byMetric.rt_completion_ms.value).to.be.greaterThan(0);
  });

  it('the Node load generator streams real speech from N clients and reports connects, completions and closes', async () => {
    const { key } = await ctx.issueKey('pro');
    const r = await runLoad({
      url: ctx.url,
      headers: { authorization: `Bearer ${key}` },
      clients: 2,
      seconds: 6,
    });
    expect(r).to.include({ clients: 2, connected: 2, failedConnects: 0, failedUtterances: 0 });
    expect(r.framesSent).to.be.within(100, 140); // 2 clients x 6 s of 100 ms frames at real-time pace
    // At least one final per run (on a loaded machine the second client's may still be pending at the end).
    expect(r.utterances).to.be.at.least(1);
    expect(r.completionMs.n).to.equal(r.utterances);
    expect(r.connectMs.p99).to.be.greaterThan(0);
    expect(r.closes).to.deep.equal({ '1000': 2 });
  });
});
