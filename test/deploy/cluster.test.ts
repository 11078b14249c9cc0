/**
 * The scaled deployment, run for real: `npm run cluster`'s topology (2 API,
 * 2 realtime and 2 engine processes from dist/, s3rver, this machine's
 * Postgres and Redis, HAProxy with docker/haproxy.cfg rendered for loopback),
 * exercised through the load balancer and then partly killed.
 */
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { Webhook } from 'standardwebhooks';
import { createDb } from '../../shared/db/index.js';
import { createArtifactStore, tenantStore } from '../../api/batch/storage/index.js';
import { loadConfig } from '../../shared/config/index.js';
import { createTestDatabase, TEST_REDIS_URL } from '../helpers/db.js';
import { REALTIME_ENV, stopProcess, waitHttpOk, type Cluster } from '../../scripts/cluster/index.js';
import { REALTIME_NODE_FLAGS } from '../../shared/config/realtime.js';
import { wer } from '../speech/helpers.js';
import {
  AUDIO_DIR,
  bearer,
  connect,
  eventually,
  readPcm,
  refs,
  refused,
  repoRoot,
  silence,
  words,
  type Client,
} from '../realtime/helpers.js';
import { startFileServer, type FileServer } from '../batch/helpers.js';
import { runK6Script } from '../load/k6/node-runner.js';
import {
  ADMIN_TOKEN,
  buildDist,
  counterSum,
  deployCluster,
  errorLines,
  SESSION_SECRET,
  WEBHOOK_SECRET,
  type DeployedCluster,
} from './helpers.js';

const KEYS = '/v1/external-transcription/keys';
/** test/.tmp (ignored by git): audio served to the cluster, data directories. */
const tmpRoot = () => {
  const dir = path.join(repoRoot, 'test/.tmp');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
};
const LEASE_TTL_MS = 3000;
const COMPLETED = 'conversation.item.input_audio_transcription.completed';
/** 3 s of speech: transcribed in time even when the shared machine's cores are busy. */
const SHORT_CLIP = 'librivox-austen-0880.wav';

/** What the test changes in every instance's environment (timings that make it fast). */
const TEST_ENV: Record<string, string> = {
  OUTBOUND_ALLOW: '127.0.0.1',
  // pg-boss's shortest heartbeat of a batch run's job (stale ones are looked for every 3 s).
  BATCH_HEARTBEAT_SECONDS: '10',
  // Connection leases renewed, and usage checkpointed, every third of it.
  REALTIME_LEASE_TTL_MS: String(LEASE_TTL_MS),
  WEBHOOK_BASE_DELAY_SECONDS: '1',
  // This test is about the deployment, not decoding speed: on a shared machine whose cores are
  // busy, PocketSphinx may run slower than real time, past the engines' default decode limit.
  STT_BUILTIN_TIMEOUT_BASE_MS: '60000',
};

describe('deployment: 2 API + 2 realtime + 2 engines behind HAProxy', function () {
  this.timeout(120_000);
  let d: DeployedCluster;
  let c: Cluster;
  let files: FileServer;
  const audio = fs.mkdtempSync(path.join(tmpRoot(), 'deploy-'));

  const issue = async (plan: string, owner = 'tenant-deploy') => {
    const res = await request(c.url)
      .post(KEYS)
      .set('authorization', `Bearer ${ADMIN_TOKEN}`)
      .send({ owner_id: owner, plan });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    return { key: res.body.data.key as string, id: res.body.data.id as string };
  };
  const proc = (name: string) => c.processes.get(name)!;
  const stats = async (name: string) =>
    (await fetch(`${proc(name).url}/stats`).then((r) => r.json())) as { sessions: number };
  const speechCalls = async () => {
    let n = 0;
    for (const name of ['api1', 'api2']) {
      const text = await fetch(`${proc(name).url}/metrics`).then((r) => r.text());
      n += counterSum(text, 'stt_speech_requests_total');
    }
    return n;
  };
  const poll = (key: string, id: string) =>
    request(c.url).get(`/v1/audio/transcriptions/jobs/${id}`).set('authorization', `Bearer ${key}`);
  const waitDone = async (key: string, id: string, ms = 90_000) =>
    eventually(
      async () => (await poll(key, id)).body,
      (b) => b.status === 'complete' || b.status === 'errored',
      ms,
    );
  /** A session through the load balancer that has said `session.created`. */
  const session = async (key: string): Promise<Client> => {
    const s = await connect(c.wsUrl, bearer(key));
    await s.next('session.created');
    return s;
  };

  before(async function () {
    this.timeout(300_000);
    // A long clip for the crash test (50 s): the test clips one after another.
    const clips = fs.readdirSync(AUDIO_DIR).filter((f) => f.endsWith('.wav'));
    execFileSync('sox', [...clips.map((f) => path.join(AUDIO_DIR, f)), path.join(audio, 'long.wav')]);
    fs.copyFileSync(path.join(AUDIO_DIR, SHORT_CLIP), path.join(audio, 'short.wav'));
    files = await startFileServer(audio);
    d = await deployCluster({ env: TEST_ENV });
    c = d.cluster;
  });
  after(async function () {
    this.timeout(60_000);
    await d?.close();
    await files?.close();
    fs.rmSync(audio, { recursive: true, force: true });
  });

  it('renders docker/haproxy.cfg for loopback, and HAProxy accepts it under an ordinary fd limit', () => {
    const cfg = fs.readFileSync(c.haproxyConfig, 'utf8');
    const source = fs.readFileSync(path.join(repoRoot, 'docker/haproxy.cfg'), 'utf8');
    // Only the bind and server lines differ from the images' file.
    const strip = (s: string) => s.split('\n').filter((l) => !/^\s*(bind|server)\s/.test(l));
    expect(strip(cfg)).to.deep.equal(strip(source));
    expect(cfg.match(/^\s*server /gm)).to.have.length(4);
    const out = execFileSync('bash', ['-c', `ulimit -n 1024 && haproxy -c -f ${c.haproxyConfig}`], {
      encoding: 'utf8',
    });
    expect(out).to.match(/Configuration file is valid/);
  });

  it('admin, plans and health through the load balancer', async () => {
    const plans = await request(c.url).get('/v1/external-transcription/plans').expect(200);
    expect(plans.body.ok).to.equal(true);
    const { id } = await issue('free');
    for (let i = 0; i < 4; i++) {
      const res = await request(c.url).get(`${KEYS}/${id}`).set('authorization', `Bearer ${ADMIN_TOKEN}`);
      expect(res.status).to.equal(200);
      expect(res.body.data.id).to.equal(id);
    }
    await request(c.url).get('/readyz').expect(200);
    // Prometheus scrapes instances directly; the public port does not expose it in any spelling
    // (issue 41: /metrics/, /METRICS and /Metrics answered 200 with 16 KB).
    for (const p of [
      '/metrics',
      '/metrics/',
      '/METRICS',
      '/Metrics',
      '//metrics',
      '/%6detrics',
      '/x/../metrics',
      '/metrics?x=1',
    ])
      expect((await request(c.url).get(p)).status, p).to.equal(404);
  });

  it('segment transcription through the load balancer', async () => {
    const { key } = await issue('pro');
    const res = await request(c.url)
      .post('/v1/audio/transcriptions')
      .set('authorization', `Bearer ${key}`)
      .attach('file', path.join(AUDIO_DIR, SHORT_CLIP), SHORT_CLIP)
      .field('response_format', 'json');
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.body.text.toLowerCase()).to.match(/young|man|disposed/);
  });

  it('a realtime session on each instance transcribes speech', async () => {
    const { key } = await issue('pro');
    const a = await session(key);
    const b = await session(key);
    expect([(await stats('realtime1')).sessions, (await stats('realtime2')).sessions]).to.deep.equal([1, 1]);
    const speech = Buffer.concat([readPcm(SHORT_CLIP), silence(1500)]);
    await Promise.all([a.stream(speech, { pace: 4 }), b.stream(speech, { pace: 4 })]);
    for (const s of [a, b]) {
      const done = await s.next('conversation.item.input_audio_transcription.completed', 60_000);
      expect(done.error ?? null).to.equal(null);
      s.ws.close(1000);
      await s.closed;
    }
  });

  it('realtime through the load balancer decodes while speech is spoken: jfk.wav has the whole-clip words', async function () {
    // A segment request and two streamed clips on a machine whose cores other jobs may hold.
    this.timeout(240_000);
    const { key } = await issue('pro', 'tenant-jfk');
    const ref = refs().get('jfk.wav')!;
    // The whole clip at once (segment endpoint: the API's remote engine workers).
    const seg = await request(c.url)
      .post('/v1/audio/transcriptions')
      .set('authorization', `Bearer ${key}`)
      .attach('file', path.join(AUDIO_DIR, 'jfk.wav'), 'jfk.wav')
      .field('response_format', 'json');
    expect(seg.status, JSON.stringify(seg.body)).to.equal(200);
    const whole = seg.body.text as string;
    // A session on each realtime instance: both decode with the built-in streaming engine.
    const sessions = [await session(key), await session(key)];
    expect([(await stats('realtime1')).sessions, (await stats('realtime2')).sessions]).to.deep.equal([1, 1]);
    const speech = Buffer.concat([silence(300), readPcm('jfk.wav'), silence(900)]);
    await Promise.all(sessions.map((s) => s.stream(speech, { pace: 2, frameBytes: 3200 })));
    for (const s of sessions) {
      await s.finals(90_000);
      s.ws.close(1000);
      await s.closed;
      const done = s.of(COMPLETED).sort((a, b) => a.utterance_index - b.utterance_index);
      for (const e of done) expect(e.error, JSON.stringify(e)).to.equal(undefined);
      const text = done.map((e) => e.text as string).join(' ');
      // The clip form through the engine workers lost the words at the cuts ("y que archive nintendo for you").
      expect(words(text).join(' '), text).to.include('what your country can do for you');
      expect(wer(ref, text), `realtime "${text}" vs whole clip "${whole}"`).to.be.at.most(
        wer(ref, whole) + 0.1,
      );
    }
    // Decoded while spoken: the realtime instances never ran the clip form (it is what counts
    // stt_speech_requests_total there; the streaming form does not).
    for (const name of ['realtime1', 'realtime2']) {
      const text = await fetch(`${proc(name).url}/metrics`).then((r) => r.text());
      expect(counterSum(text, 'stt_speech_requests_total'), name).to.equal(0);
    }
  });

  it('the realtime instances run the same speech engine and admission limits as docker/compose.yaml', () => {
    const compose = fs.readFileSync(path.join(repoRoot, 'docker/compose.yaml'), 'utf8');
    // The realtime service's environment block (YAML anchors: realtime1, realtime2 = *realtime).
    const block = /^ {2}realtime1: &realtime\n([\s\S]*?)^ {2}realtime2: \*realtime$/m.exec(compose);
    expect(block, 'realtime1 service in compose').to.not.equal(null);
    for (const [k, v] of Object.entries(REALTIME_ENV)) {
      expect(block![1], `${k}: '${v}' in compose's realtime environment`).to.match(
        new RegExp(`\\b${k}: '${v}'`),
      );
      for (const name of ['realtime1', 'realtime2'])
        expect(proc(name).env[k], `${name} ${k}`).to.equal(TEST_ENV[k] ?? v);
    }
    // The same Node flags: compose's command, and the running processes' own command lines.
    const command = ['node', ...REALTIME_NODE_FLAGS, 'dist/realtime/main.js'];
    expect(block![1]).to.include(`command: [${command.map((a) => `'${a}'`).join(', ')}]`);
    for (const name of ['realtime1', 'realtime2']) {
      const argv = fs.readFileSync(`/proc/${proc(name).child.pid}/cmdline`, 'utf8').split('\0');
      expect(argv.slice(1, -2), name).to.deep.equal(REALTIME_NODE_FLAGS);
    }
    // Segment and batch on the API keep the engine workers.
    for (const name of ['api1', 'api2']) expect(proc(name).env.STT_ENGINE).to.equal(undefined);
    expect(proc('api1').env.STT_WORKER_URLS).to.match(/^engine1=http/);
  });

  it('past the admission limit of the realtime instances new sessions get 503 + Retry-After; open ones keep transcribing', async () => {
    const { key } = await issue('pro', 'tenant-admission');
    // One tenant holds at most REALTIME_OWNER_SHARE (80 %) of an instance (issue 41): a pro key (20
    // connections allowed) asking for every place gets 4 of each instance's 5 ...
    const { key: other } = await issue('pro', 'tenant-admission-2');
    const perInstance = Number(REALTIME_ENV.REALTIME_MAX_SESSIONS);
    const open: Client[] = [];
    for (let i = 0; i < 2 * perInstance; i++) {
      const s = await session(key).catch(() => undefined);
      if (!s) break;
      open.push(s);
    }
    expect(open.length).to.equal(2 * Math.floor(perInstance * 0.8));
    // ... and another tenant gets the rest.
    while (open.length < 2 * perInstance) open.push(await session(other));
    expect([(await stats('realtime1')).sessions, (await stats('realtime2')).sessions]).to.deep.equal([
      perInstance,
      perInstance,
    ]);
    // Both instances are full: refused (before authentication, no quota spent), not queued or closed.
    for (let i = 0; i < 3; i++) {
      const r = await refused(c.wsUrl, bearer(key).headers);
      expect(r.status).to.equal(503);
      expect(r.body.error.code).to.equal('upstream_unavailable');
      expect(Number(r.headers['retry-after'])).to.be.at.least(1);
    }
    // The open sessions are all still there, and one of them transcribes.
    const speech = Buffer.concat([readPcm(SHORT_CLIP), silence(1500)]);
    await open[0].stream(speech, { pace: 4 });
    const done = await open[0].next(COMPLETED, 60_000);
    expect(done.error ?? null).to.equal(null);
    for (const s of open) expect(s.ws.readyState, 'open session still open').to.equal(s.ws.OPEN);
    for (const s of open) s.ws.close(1000);
    await Promise.all(open.map((s) => s.closed));
    // A slot is free again: the next session is accepted.
    await eventually(
      async () => (await stats('realtime1')).sessions + (await stats('realtime2')).sessions,
      (n) => n === 0,
      10_000,
    );
    const again = await session(key);
    again.ws.close(1000);
    await again.closed;
  });

  it("50 concurrent upgrades with made-up sk- keys take no real session's place (issue 36): at least 19 of 20 open", async () => {
    const bogus = () =>
      new Promise<void>((resolve) => {
        const ws = new WebSocket(c.wsUrl, {
          headers: { authorization: `Bearer sk-${randomBytes(20).toString('hex')}` },
        });
        ws.on('unexpected-response', (_req, res) => {
          res.resume();
          resolve();
        });
        ws.on('error', () => resolve());
        ws.on('open', () => {
          ws.close();
          resolve();
        });
      });
    let flooding = true;
    const loops = Array.from({ length: 50 }, async () => {
      while (flooding) await bogus();
    });
    const { key } = await issue('pro', 'tenant-flooded');
    let admitted = 0;
    for (let i = 0; i < 20; i++) {
      const s = await session(key).catch(() => undefined);
      if (!s) continue;
      admitted++;
      s.ws.close(1000);
      await s.closed;
    }
    flooding = false;
    await Promise.all(loops);
    expect(admitted).to.be.at.least(19);
  });

  it('tokens from either API are accepted by either realtime instance', async () => {
    const { key } = await issue('pro');
    for (const api of ['api1', 'api2']) {
      const tok = await request(proc(api).url)
        .post('/v1/audio/transcriptions/session-token')
        .set('authorization', `Bearer ${key}`)
        .expect(200);
      const token = tok.body.token as string;
      expect(token).to.match(/^rt_/);
      for (const rt of ['realtime1', 'realtime2']) {
        const url = `${proc(rt).url.replace('http', 'ws')}/v1/audio/transcriptions/stream?access_token=${token}`;
        const s = await connect(url);
        await s.next('session.created');
        s.ws.close(1000);
        await s.closed;
      }
    }
  });

  it('the k6 realtime script through the load balancer (Node runner): no failed utterances, no 1013 closes', async () => {
    const { key } = await issue('pro', 'tenant-k6');
    const result = await runK6Script(path.join(repoRoot, 'test/load/k6/realtime.js'), {
      URL: c.wsUrl,
      KEY: key,
      VUS: '2',
      DURATION_S: '8',
    });
    expect(result.metrics.rt_connect_ms.count).to.be.at.least(2);
    expect(result.metrics.rt_utterances.count).to.be.at.least(2);
    expect(result.metrics.rt_failed_utterances?.count ?? 0).to.equal(0);
    expect(result.metrics.rt_close_1013?.count ?? 0).to.equal(0);
    expect(result.metrics.rt_refused_connects?.count ?? 0).to.equal(0);
    const byMetric = Object.fromEntries(result.thresholds.map((t) => [t.metric, t]));
    for (const m of ['rt_connect_ms', 'rt_failed_utterances', 'rt_close_1013'])
      expect(byMetric[m].ok, m).to.equal(true);
  });

  it('plan limits are exact across instances (free: 12 requests a minute, 1 connection)', async () => {
    const { key } = await issue('free');
    const statuses: number[] = [];
    for (let i = 0; i < 14; i++) {
      const res = await request(c.url)
        .post('/v1/audio/transcriptions/session-token')
        .set('authorization', `Bearer ${key}`);
      statuses.push(res.status);
    }
    expect(statuses.filter((s) => s === 200)).to.have.length(12);
    expect(statuses.slice(12)).to.deep.equal([429, 429]);

    const { key: k2 } = await issue('free');
    const s = await session(k2);
    // The load balancer sends the second to the other instance (fewer connections): still refused.
    const r = await refused(c.wsUrl, bearer(k2).headers);
    expect(r.status).to.equal(429);
    expect(r.body.error.code).to.equal('too_many_connections');
    s.ws.close(1000);
    await s.closed;
  });

  it('/r2 artifacts, request_id reuse and one webhook secret from any instance', async () => {
    const { key } = await issue('pro', 'tenant-r2');
    const requestId = `deploy-r2-${Date.now()}`;
    const submit = () =>
      request(c.url)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({
          audio_url: `${files.url}/short.wav`,
          request_id: requestId,
          webhook_url: `${files.url}/hook`,
        });
    const first = await submit();
    expect(first.status, JSON.stringify(first.body)).to.equal(202);
    const done = await waitDone(key, first.body.workflow_id);
    expect(done.status, JSON.stringify(done.error)).to.equal('complete');
    // Every request through the load balancer (both API instances) sees the artifact.
    for (let i = 0; i < 4; i++) {
      const res = await request(c.url)
        .get(`/r2/transcription/${requestId}/result.json`)
        .set('authorization', `Bearer ${key}`);
      expect(res.status, `request ${i}`).to.equal(200);
    }
    // The same request_id again, on whichever instance: the checkpoints are reused, nothing is transcribed.
    const calls = await speechCalls();
    for (let i = 0; i < 2; i++) {
      const again = await submit();
      expect(again.status).to.equal(202);
      expect((await waitDone(key, again.body.workflow_id)).status).to.equal('complete');
    }
    expect(await speechCalls()).to.equal(calls);
    // Every delivery verifies with the tenant's key (from either instance), whichever instance sent it.
    const hooks = await eventually(
      async () => files.posts.filter((p) => p.path === '/hook'),
      (h) => h.length >= 3,
      30_000,
    );
    expect(hooks.length).to.be.at.least(3);
    const secrets = await Promise.all(
      [0, 1].map(
        async () =>
          (await request(c.url).get('/v1/webhooks/secret').set('authorization', `Bearer ${key}`)).body
            .secret as string,
      ),
    );
    expect(secrets[0])
      .to.match(/^whsec_/)
      .and.equal(secrets[1])
      .and.not.equal(WEBHOOK_SECRET);
    const wh = new Webhook(secrets[0]);
    for (const h of hooks) wh.verify(h.body, h.headers as Record<string, string>);
  });

  /** A 50 s batch job in 5 s pieces, once two of its pieces are checkpointed: and which API runs it. */
  const longJobRunning = async (owner: string) => {
    const { key } = await issue('pro', owner);
    const requestId = `deploy-${owner}-${Date.now()}`;
    const sub = await request(c.url)
      .post('/v1/audio/transcriptions/jobs')
      .set('authorization', `Bearer ${key}`)
      .send({
        audio_url: `${files.url}/long.wav`,
        request_id: requestId,
        segment_seconds: 5,
        concurrency: 2,
      });
    expect(sub.status).to.equal(202);
    const id = sub.body.workflow_id as string;
    const cfg = loadConfig({ ...proc('api1').env });
    const store = tenantStore(createArtifactStore(cfg.batch.storage), owner);
    const prefix = `transcription/${requestId}/`;
    await eventually(
      async () => (await store.list(prefix)).filter((k) => /chunk_\d+\.json$/.test(k)).length,
      (n) => n >= 2,
      120_000,
    );
    await store.close();
    const db = createDb(d.db.url, { poolMax: 1 });
    try {
      const row = await db('batch_workflows').where({ id }).first();
      const pid = Number(String(row.run_owner).split('-')[0]);
      const runner = [...c.processes.values()].find((p) => p.child.pid === pid)!.name;
      expect(runner).to.match(/^api[12]$/);
      return { key, id, runner };
    } finally {
      await db.destroy();
    }
  };

  it('a batch job resumes on the other API instance after its runner is SIGKILLed', async function () {
    this.timeout(360_000);
    const { key, id, runner } = await longJobRunning('tenant-crash');
    proc(runner).child.kill('SIGKILL');
    await proc(runner).exited;
    const done = await waitDone(key, id, 300_000);
    expect(done.status, JSON.stringify(done.error)).to.equal('complete');
    expect(done.output.result.metadata.chunk_count).to.be.at.least(5);
    await c.start(runner);
  });

  it('SIGTERM of the API running a batch job: it exits 0 within the grace period and hands the job back at once', async function () {
    this.timeout(360_000);
    const { key, id, runner } = await longJobRunning('tenant-term-batch');
    // Back in rotation however this case ends: the cases after it need both API instances.
    try {
      const t0 = Date.now();
      proc(runner).child.kill('SIGTERM');
      expect(await proc(runner).exited, `${runner} exit code`).to.equal(0);
      const exitMs = Date.now() - t0;
      // Handed back, not left to pg-boss finding its heartbeat stale: the other instance holds it within seconds.
      const db = createDb(d.db.url, { poolMax: 1 });
      try {
        const other = runner === 'api1' ? 'api2' : 'api1';
        const row = await eventually(
          () => db('batch_workflows').where({ id }).first(),
          (r) => Number(String(r.run_owner ?? '').split('-')[0]) === proc(other).child.pid,
          10_000,
        );
        // Held by the other instance; on a quick machine it may have finished the job already.
        expect(row.status).to.be.oneOf(['running', 'complete']);
      } finally {
        await db.destroy();
      }
      const resumedMs = Date.now() - t0;
      const done = await waitDone(key, id, 300_000);
      expect(done.status, JSON.stringify(done.error)).to.equal('complete');
      console.log(
        `    SIGTERM of ${runner}: exited in ${exitMs} ms; the job resumed on the other API ${resumedMs} ms after SIGTERM`,
      );
      expect(exitMs).to.be.below(15_000);
    } finally {
      await c.start(runner);
    }
  });

  it('SIGKILL of a realtime instance: its clients reconnect through the load balancer within 2 s', async () => {
    const { key } = await issue('pro', 'tenant-rtkill');
    const a = await session(key);
    const b = await session(key);
    const onKilled = (await stats('realtime1')).sessions === 1 ? 'realtime1' : 'realtime2';
    proc(onKilled).child.kill('SIGKILL');
    const killedAt = Date.now();
    // Exactly one of the two was on the killed instance; it sees the connection drop.
    const dropped = await Promise.race([a.closed.then(() => a), b.closed.then(() => b)]);
    expect(dropped.events[0].type).to.equal('session.created');
    const again = await session(key);
    expect(Date.now() - killedAt).to.be.below(2000);
    again.ws.close(1000);
    for (const s of [a, b]) if (s !== dropped) s.ws.close(1000);
    await c.start(onKilled);
  });

  it('SIGKILL of a realtime instance: the killed sessions are billed within one lease TTL (usage ledger)', async () => {
    const { key, id: keyId } = await issue('pro', 'tenant-rtbill');
    const a = await session(key);
    const b = await session(key);
    await Promise.all([a.stream(readPcm('jfk.wav'), { pace: 4 }), b.stream(readPcm('jfk.wav'), { pace: 4 })]);
    // Some audio has been counted by each instance's checkpoints before the kill.
    await new Promise((r) => setTimeout(r, 1500));
    const onKilled = (await stats('realtime1')).sessions >= 1 ? 'realtime1' : 'realtime2';
    const sessionIds = [a, b].map((s) => s.events[0].session_id as string);
    proc(onKilled).child.kill('SIGKILL');
    const dropped = await Promise.race([a.closed.then(() => a), b.closed.then(() => b)]);
    const killedId = dropped.events[0].session_id as string;
    expect(sessionIds).to.include(killedId);
    const db = createDb(d.db.url, { poolMax: 1 });
    try {
      // Billed: the session's ledger row is no longer `live` (its lease lapsed: `lapsed`, counted as usage).
      const rows = await eventually(
        () => db('usage_events').where({ key_id: keyId, plane: 'realtime', ref_id: killedId }),
        (r) => r.length > 0 && (r[0].status ?? 'final') !== 'live',
        LEASE_TTL_MS + 3000,
      );
      expect(rows, 'usage row of the killed session').to.have.length(1);
      expect(rows[0].status ?? 'final').not.to.equal('live');
      expect(rows[0].audio_seconds).to.be.above(0);
    } finally {
      await db.destroy();
      for (const s of [a, b]) if (s !== dropped) s.ws.close(1000);
      await c.start(onKilled);
    }
  });

  it('SIGKILL of an API instance: the load balancer routes around it within 2 s', async () => {
    proc('api1').child.kill('SIGKILL');
    const killedAt = Date.now();
    const failures: number[] = [];
    while (Date.now() - killedAt < 4000) {
      const res = await request(c.url).get('/v1/external-transcription/plans');
      if (res.status !== 200) failures.push(Date.now() - killedAt);
    }
    // Connections refused by the dead instance are redispatched: at worst failures in the first 2 s.
    expect(failures.filter((t) => t >= 2000)).to.deep.equal([]);
    await c.start('api1');
  });

  it('a rolling restart of the realtime tier (SIGTERM, one instance at a time) loses no utterance; clients are back within 2 s', async function () {
    this.timeout(240_000);
    const { key } = await issue('pro', 'tenant-rolling');
    const clip = Buffer.concat([readPcm(SHORT_CLIP), silence(800)]);
    let restarting = true;
    const started: string[] = [];
    const completed: string[] = [];
    const failed: string[] = [];
    const reconnectMs: number[] = [];
    const closeCodes: number[] = [];
    /** Streams the clip over and over at real-time pace; on 1001 connects again at once, as clients are told to. */
    const client = async (i: number) => {
      let closedAt = 0;
      let sessions = 0;
      while (restarting || sessions === 0) {
        const s = await session(key);
        if (closedAt) reconnectMs.push(Date.now() - closedAt);
        sessions++;
        const id = `${i}.${sessions}`;
        s.ws.on('message', (data, binary) => {
          if (binary) return;
          const e = JSON.parse(data.toString()) as { type: string; utterance_index: number; error?: unknown };
          if (e.type === 'input_audio_buffer.speech_started') started.push(`${id}.${e.utterance_index}`);
          if (e.type === COMPLETED) (e.error ? failed : completed).push(`${id}.${e.utterance_index}`);
        });
        let ended = false;
        void s.closed.then(() => (ended = true));
        // stream() returns at once on a closing socket: loop only while it is open, or the loop never yields.
        while (!ended && restarting && s.ws.readyState === WebSocket.OPEN) await s.stream(clip, { pace: 1 });
        // Leaving on its own, a client waits for the finals of what it said (a loaded machine may take a while).
        const mine = (list: string[]) => list.filter((u) => u.startsWith(`${id}.`)).length;
        const deadline = Date.now() + 20_000;
        while (!ended && mine(completed) + mine(failed) < mine(started) && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 50));
        }
        if (!ended) s.ws.close(1000);
        const { code } = await s.closed;
        closeCodes.push(code);
        closedAt = Date.now();
      }
    };
    // Two clients: what is tested is the drain, not the tier's capacity on a test machine shared with
    // other test files (four fell behind there while a container image was being built beside them).
    const clients = [0, 1].map(client);
    await new Promise((r) => setTimeout(r, 4000));
    for (const name of ['realtime1', 'realtime2']) {
      proc(name).child.kill('SIGTERM');
      const code = await proc(name).exited;
      expect(code, `${name} exit code; its last lines:\n${proc(name).lines.slice(-8).join('\n')}`).to.equal(
        0,
      );
      await c.start(name);
      await new Promise((r) => setTimeout(r, 3000));
    }
    restarting = false;
    await Promise.all(clients);
    const lost = started.filter((u) => !completed.includes(u));
    console.log(
      `    rolling restart: ${started.length} utterances, ${lost.length} lost, ${failed.length} failed; ` +
        `${reconnectMs.length} reconnections, slowest ${Math.max(0, ...reconnectMs)} ms`,
    );
    expect(lost, `failed: ${failed.join(' ')}`).to.deep.equal([]);
    expect(started.length).to.be.at.least(6);
    // Both restarts closed sessions with 1001 going_away (reconnect now), and each client came back in time.
    expect(closeCodes.filter((x) => x === 1001).length).to.be.at.least(2);
    expect(reconnectMs.length).to.be.at.least(2);
    expect(Math.max(...reconnectMs)).to.be.below(2000);
  });

  it('SIGTERM of each API and realtime instance drains without an error', async function () {
    this.timeout(180_000);
    const { key } = await issue('pro', 'tenant-term');
    for (const name of ['api1', 'api2', 'realtime1', 'realtime2']) {
      const p = proc(name);
      const isRealtime = name.startsWith('realtime');
      const before = p.lines.length;
      const open = isRealtime ? await session(key) : undefined;
      // Sessions land by connection count: make sure one is on the instance being stopped.
      const extra = isRealtime && (await stats(name)).sessions === 0 ? await session(key) : undefined;
      // Requests keep flowing through the load balancer while it drains.
      let stop = false;
      const traffic = (async () => {
        const bad: number[] = [];
        while (!stop) {
          const res = await request(c.url).get('/v1/external-transcription/plans');
          if (res.status !== 200) bad.push(res.status);
        }
        return bad;
      })();
      p.child.kill('SIGTERM');
      expect(await p.exited, `${name} exit code`).to.equal(0);
      stop = true;
      expect(await traffic).to.deep.equal([]);
      expect(errorLines(p.lines.slice(before)), `${name} error lines`).to.deep.equal([]);
      if (isRealtime) {
        const closes = await Promise.all(
          [open!, extra]
            .filter(Boolean)
            .map((s) => Promise.race([s!.closed, new Promise<null>((r) => setTimeout(r, 100, null))])),
        );
        expect(closes.filter(Boolean).map((x) => x!.code)).to.include(1001);
        // New sessions go to the instance that is still there.
        const s = await session(key);
        s.ws.close(1000);
        for (const o of [open, extra]) o?.ws.close(1000);
      }
      await c.start(name);
    }
  });
});

describe('deployment: 5 API instances starting together on an empty database', function () {
  this.timeout(240_000);

  it('all five migrate, start pg-boss and become ready without a crash', async () => {
    await buildDist();
    const db = await createTestDatabase('stt_deploy_first');
    // An empty database: drop what the helper migrated.
    const admin = createDb(db.url, { poolMax: 1 });
    await admin.raw(
      'DROP SCHEMA public CASCADE; CREATE SCHEMA public; DROP SCHEMA IF EXISTS pgboss CASCADE; DROP SCHEMA IF EXISTS pgboss_v12 CASCADE',
    );
    await admin.destroy();
    const dataDir = fs.mkdtempSync(path.join(tmpRoot(), 'first-start-'));
    const children = await Promise.all(
      Array.from({ length: 5 }, async (_, i) => {
        // Each instance binds a port of its own choosing (PORT=0) and logs it: ports picked here
        // beforehand could be taken meanwhile by another process's outgoing connections.
        const child = spawn(process.execPath, [path.join(repoRoot, 'dist/api/main.js')], {
          env: {
            PATH: process.env.PATH,
            DATABASE_URL: db.url,
            REDIS_URL: TEST_REDIS_URL,
            GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
            GATEWAY_SESSION_TOKEN_SECRET: SESSION_SECRET,
            WEBHOOK_SECRET,
            HOST: '127.0.0.1',
            PORT: '0',
            DATA_DIR: path.join(dataDir, String(i)),
            MIGRATE_ON_START: 'true',
            STT_THREADS: '1',
            LOG_LEVEL: 'info',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        let listening: (port: number) => void = () => {};
        const port = new Promise<number>((r) => (listening = r));
        child.stdout!.on('data', (b: Buffer) => {
          out += b;
          const m = /"port":(\d+)[^\n]*"msg":"api listening"/.exec(out);
          if (m) listening(Number(m[1]));
        });
        child.stderr!.on('data', (b: Buffer) => (out += b));
        const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
        return { child, port, exited, output: () => out };
      }),
    );
    try {
      await Promise.all(
        children.map(async (ch) => {
          const port = await Promise.race([
            ch.port,
            ch.exited.then((code) => {
              throw new Error(`exited ${code} before listening\n${ch.output()}`);
            }),
          ]);
          await waitHttpOk(`http://127.0.0.1:${port}/health`, 180_000, ch.exited).catch((err: Error) => {
            throw new Error(`${err.message}\n${ch.output()}`);
          });
        }),
      );
      for (const ch of children) {
        expect(ch.child.exitCode, ch.output()).to.equal(null);
        expect(ch.output()).not.to.match(/deadlock/i);
      }
    } finally {
      await Promise.all(children.map((ch) => stopProcess(ch.child, 20_000)));
      await db.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
    for (const ch of children) expect(await ch.exited, ch.output()).to.equal(0);
  });
});
