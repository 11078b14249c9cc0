/**
 * GET /metrics on the API: Prometheus text, HTTP requests counted by route
 * template (never a raw path, id or key), the optional scrape token, and
 * METRICS_ENABLED=false.
 */
import { expect } from 'chai';
import request from 'supertest';
import { createTestApp, issueKey, type TestApp } from '../helpers/app.js';
import { labelValues, seriesValue } from '../helpers/metrics.js';

describe('platform: /metrics', function () {
  this.timeout(30_000);
  let t: TestApp;
  before(async () => {
    t = await createTestApp();
  });
  after(() => t?.close());

  const scrape = async (app = t) => {
    const res = await request(app.server).get('/metrics');
    expect(res.status).to.equal(200);
    expect(res.headers['content-type']).to.match(/^text\/plain; version=0\.0\.4/);
    return res.text;
  };

  it('counts requests by route template and status, with durations and process figures', async () => {
    const { key, id } = await issueKey(t);
    const before = await scrape();
    const plansRoute = { method: 'GET', route: '/v1/external-transcription/plans', status: '200' };
    const pollRoute = { method: 'GET', route: '/v1/audio/transcriptions/jobs/:workflowId' };
    const n0 = seriesValue(before, 'stt_http_requests_total', plansRoute);
    const unmatched0 = seriesValue(before, 'stt_http_requests_total', { route: 'unmatched', status: '404' });

    for (let i = 0; i < 3; i++) await request(t.server).get('/v1/external-transcription/plans').expect(200);
    const secret = `/no/such/${key}`;
    await request(t.server).get(secret).expect(404);
    await request(t.server)
      .get(`/v1/audio/transcriptions/jobs/cf_${'0'.repeat(64)}`)
      .set('Authorization', `Bearer ${key}`);

    const after = await scrape();
    expect(seriesValue(after, 'stt_http_requests_total', plansRoute)).to.equal(n0 + 3);
    expect(seriesValue(after, 'stt_http_requests_total', { route: 'unmatched', status: '404' })).to.equal(
      unmatched0 + 1,
    );
    expect(seriesValue(after, 'stt_http_request_duration_seconds_count', pollRoute)).to.be.greaterThan(0);
    // Buckets are cumulative: +Inf holds every observation, and no bucket holds more than a larger one.
    const plansTime = { method: 'GET', route: '/v1/external-transcription/plans' };
    const buckets = after
      .split('\n')
      .filter(
        (l) =>
          l.startsWith('stt_http_request_duration_seconds_bucket{') &&
          l.includes(`route="${plansTime.route}"`),
      )
      .map((l) => Number(l.split(' ')[1]));
    expect(buckets).to.have.length(16);
    expect(buckets).to.deep.equal([...buckets].sort((x, y) => x - y));
    expect(buckets.at(-1)).to.equal(seriesValue(after, 'stt_http_request_duration_seconds_count', plansTime));
    expect(seriesValue(after, 'stt_http_request_duration_seconds_count', plansTime)).to.be.at.least(3);
    expect(seriesValue(after, 'stt_process_resident_memory_bytes')).to.be.greaterThan(0);
    expect(after).to.match(/^stt_nodejs_eventloop_lag_p99_seconds /m);
    // No tenant data: raw paths, keys and ids never become label values.
    const values = labelValues(after);
    expect(values.filter((v) => v.includes('sk-') || v.includes(id) || v.includes('/no/such'))).to.deep.equal(
      [],
    );
    expect(after).not.to.include(key);
  });

  it('is described in /openapi.json', async () => {
    const doc = (await request(t.server).get('/openapi.json')).body;
    expect(doc.paths['/metrics'].get.responses['200'].content).to.have.key('text/plain');
  });

  it('asks for METRICS_TOKEN when one is set', async () => {
    const guarded = await createTestApp({ METRICS_TOKEN: 'scrape-secret-123' });
    try {
      const none = await request(guarded.server).get('/metrics');
      expect(none.status).to.equal(401);
      expect(none.body.error.code).to.equal('metrics_unauthorized');
      expect(none.headers['www-authenticate']).to.equal('Bearer');
      const wrong = await request(guarded.server)
        .get('/metrics')
        .set('Authorization', 'Bearer scrape-secret-12');
      expect(wrong.status).to.equal(401);
      const right = await request(guarded.server)
        .get('/metrics')
        .set('Authorization', 'Bearer scrape-secret-123');
      expect(right.status).to.equal(200);
      expect(right.text).to.include('stt_http_requests_total');
      expect(guarded.logs.text).not.to.include('scrape-secret-123');
    } finally {
      await guarded.close();
    }
  });

  it('is absent with METRICS_ENABLED=false', async () => {
    const off = await createTestApp({ METRICS_ENABLED: 'false' });
    try {
      const res = await request(off.server).get('/metrics');
      expect(res.status).to.equal(404);
      expect(res.body.error.code).to.equal('not_found');
    } finally {
      await off.close();
    }
  });
});
