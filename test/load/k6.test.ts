/**
 * The k6 script of test/load/k6 runs against a real realtime server with real
 * speech (PocketSphinx) through the Node runner (k6 itself cannot be
 * installed on these machines): it connects, streams, drains and reports.
 */
import { expect } from 'chai';
import path from 'node:path';
import { createLogger } from '../../shared/logger.js';
import { loadConfig } from '../../shared/config/index.js';
import { createSpeechEngine, type SpeechEngine } from '../../shared/stt/index.js';
import { createRealtimeContext, repoRoot, type RealtimeTestContext } from '../realtime/helpers.js';
import { runK6Script } from './k6/node-runner.js';

describe('load: the k6 realtime script (Node runner, real server and speech)', function () {
  this.timeout(120_000);
  let engine: SpeechEngine;
  let ctx: RealtimeTestContext;

  before(async () => {
    engine = createSpeechEngine(loadConfig({ STT_THREADS: '2' }), createLogger({ level: 'silent' }));
    ctx = await createRealtimeContext({ engine });
  });
  after(async () => {
    await ctx?.close();
    await engine?.close();
  });

  it('streams real speech from every VU and reports connect time, completions and thresholds', async () => {
    const { key } = await ctx.issueKey('pro');
    const result = await runK6Script(path.join(repoRoot, 'test/load/k6/realtime.js'), {
      URL: ctx.url,
      KEY: key,
      VUS: '2',
      DURATION_S: '8',
    });
    expect(result.iterations, 'one iteration per VU').to.equal(2);
    expect(result.metrics.rt_connect_ms.count).to.equal(2);
    // The JFK clip (11 s) in 8 s of real time, then a flush: at least one utterance each.
    expect(result.metrics.rt_utterances.count).to.be.at.least(2);
    expect(result.metrics.rt_completion_ms.count).to.equal(result.metrics.rt_utterances.count);
    expect(result.metrics.rt_failed_utterances?.count ?? 0).to.equal(0);
    const byMetric = Object.fromEntries(result.thresholds.map((t) => [t.metric, t]));
    expect(byMetric.rt_connect_ms.ok).to.equal(true);
    expect(byMetric.rt_failed_utterances.ok).to.equal(true);
    expect(byMetric.rt_completion_ms.value).to.be.greaterThan(0);
  });
});
