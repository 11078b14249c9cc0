/**
 * A realtime instance's threads side by side (issue 40, decisions/deployment.md
 * "One core per realtime instance"): `npm run cluster`'s topology on its
 * defaults, the realtime instances with one streaming thread and the VAD in
 * the WebSocket thread (`one`, REALTIME_ENV) or with two streaming threads
 * and a VAD thread (`two`, the settings before), in the order given. Two
 * tenants stream the test clips at real-time pace through HAProxy, 4 clients
 * each (what the owner share admits of the two instances' 10 sessions), for
 * --seconds; prints utterances answered and completion p50 / p99 per tenant.
 *
 *   npx tsx test/bench/deploy/threads.ts [--seconds 30] one two one two
 */
import { parseArgs } from 'node:util';
import request from 'supertest';
import { bearer } from '../../realtime/helpers.js';
import { runLoad } from '../../load/realtime-load.js';
import { ADMIN_TOKEN, deployCluster } from '../../deploy/helpers.js';

const SETTINGS: Record<string, Record<string, string>> = {
  one: { STT_STREAM_THREADS: '1', REALTIME_VAD_THREADS: '0' },
  two: { STT_STREAM_THREADS: '2', REALTIME_VAD_THREADS: '1' },
};

const { values, positionals } = parseArgs({
  options: { seconds: { type: 'string', default: '30' } },
  allowPositionals: true,
});
const order = positionals.length > 0 ? positionals : ['one', 'two', 'one', 'two'];
for (const name of order) if (!SETTINGS[name]) throw new Error(`unknown setting ${name} (one, two)`);

console.log('| setting | tenant | connected | answered / cut | completion p50 | p99 |');
console.log('|---|---|---|---|---|---|');
for (const name of order) {
  const d = await deployCluster({ env: { LOG_LEVEL: 'warn', ...SETTINGS[name] } });
  try {
    const keys: string[] = [];
    for (const owner of ['tenant-a', 'tenant-b']) {
      const res = await request(d.cluster.url)
        .post('/v1/external-transcription/keys')
        .set('authorization', `Bearer ${ADMIN_TOKEN}`)
        .send({ owner_id: owner, plan: 'pro' });
      keys.push(res.body.data.key as string);
    }
    const results = await Promise.all(
      keys.map((key) =>
        runLoad({
          url: d.cluster.wsUrl,
          headers: bearer(key).headers,
          clients: 4,
          seconds: Number(values.seconds),
          rampMs: 1000,
        }),
      ),
    );
    results.forEach((r, i) =>
      console.log(
        `| ${name} | ${i + 1} | ${r.connected} | ${r.utterances} / ${r.stopped} | ${r.completionMs.p50} ms | ${r.completionMs.p99} ms |`,
      ),
    );
  } finally {
    await d.close();
  }
}
process.exit(0);
