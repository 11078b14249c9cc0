/**
 * The upgrade (interface 4.8 and 5): check order, credentials, quotas,
 * breaker, health endpoints, the native-uWS guard and the embedded proxy.
 * The speech upstream is a real engine/ worker process; the breaker sees it
 * crash (SIGKILL) and come back, readiness sees it hang (SIGSTOP).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { issueSessionToken } from '../../shared/auth/index.js';
import { isNativeUws, loadUws } from '../../realtime/uws.js';
import { loadablePath, needsGlibcShim, privateDir, rebindC23 } from '../../realtime/uwsGlibc.js';
import { startApi } from '../../api/server.js';
import { createTestApp } from '../helpers/app.js';
import { loadConfig } from '../../shared/config/index.js';
import { ThreadedVad } from '../../realtime/vad/service.js';
import {
  createRealtimeContext,
  connect,
  refused,
  bearer,
  readPcm,
  repoRoot,
  SESSION_SECRET,
  eventually,
  usageRows,
  type RealtimeTestContext,
} from './helpers.js';
import { startSpeechUpstream, type SpeechUpstream } from './upstream.js';
import { seriesValue } from '../helpers/metrics.js';
import { freePort, ServiceProcess } from '../faults/cluster.js';
import type { us_listen_socket } from 'uWebSockets.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';

describe('realtime upgrade', function () {
  this.timeout(60_000);
  let ctx: RealtimeTestContext;
  let upstream: SpeechUpstream;
  before(async () => {
    upstream = await startSpeechUpstream();
    ctx = await createRealtimeContext({
      engine: upstream.engine,
      overrides: { realtime: { breaker: { failureThreshold: 2, openMs: 1500 } } },
    });
  });
  after(async () => {
    await ctx?.close();
    await upstream?.close();
  });

  it('answers a plain GET on the stream path with 426 websocket_required', async () => {
    const res = await fetch(`${ctx.base}/v1/audio/transcriptions/stream`);
    expect(res.status).to.equal(426);
    expect((await res.json()).error.code).to.equal('websocket_required');
  });

  it('holds its port alone: the process does not start on a port another uWebSockets.js app listens on', async function () {
    this.timeout(60_000);
    // uSockets' default listen sets SO_REUSEPORT: with it the realtime process bound this port too, and the
    // kernel handed the other listener part of its new connections.
    const uws = loadUws();
    const port = await freePort();
    const sock = await new Promise<us_listen_socket | false>((r) => uws.App().listen('127.0.0.1', port, r));
    expect(sock, 'the other listener').to.not.equal(false);
    const proc = ServiceProcess.spawn('realtime/main.ts', {
      DATABASE_URL: ctx.testDb.url,
      REALTIME_HOST: '127.0.0.1',
      REALTIME_PORT: String(port),
      MIGRATE_ON_START: 'false',
      STT_THREADS: '1',
      LOG_LEVEL: 'info',
    });
    try {
      // It either listens (the port shared) or exits saying why.
      const listening = await proc
        .waitForOutput(/"msg":"realtime listening"/, 45_000)
        .then(() => true)
        .catch(() => false);
      expect(listening, 'the realtime process listened on a shared port').to.equal(false);
      // Its output read to the end (the exit can come before the last lines).
      await new Promise((r) =>
        proc.child.stdout!.readableEnded && proc.child.stderr!.readableEnded
          ? r(null)
          : proc.child.once('close', r),
      );
      expect(proc.alive, 'the realtime process still runs').to.equal(false);
      expect(proc.output).to.include(`could not listen on 127.0.0.1:${port} (is it in use?)`);
    } finally {
      await proc.stop();
      if (sock) uws.us_listen_socket_close(sock);
    }
  });

  it('serves /health and /readyz', async () => {
    const h = await fetch(`${ctx.base}/health`);
    expect(h.status).to.equal(200);
    expect(await h.json()).to.deep.equal({ ok: true, service: 'realtime' });
    const r = await fetch(`${ctx.base}/readyz`);
    expect(r.status).to.equal(200);
    expect((await r.json()).ok).to.equal(true);
  });

  it('serves /metrics: upgrades by outcome, sessions open and closed by reason, utterances and their latency', async () => {
    const scrape = async () => {
      const res = await fetch(`${ctx.base}/metrics`);
      expect(res.status).to.equal(200);
      expect(res.headers.get('content-type')).to.match(/^text\/plain; version=0\.0\.4/);
      return res.text();
    };
    const before = await scrape();
    const stats = async () => (await (await fetch(`${ctx.base}/stats`)).json()) as Record<string, any>;
    const statsBefore = await stats();
    const v = (text: string, name: string, labels: Record<string, string> = {}) =>
      seriesValue(text, name, labels);
    await refused(ctx.url);
    const { key, id } = await ctx.issueKey('pro');
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    const during = await scrape();
    expect(v(during, 'stt_realtime_sessions_open') - v(before, 'stt_realtime_sessions_open')).to.equal(1);
    expect(v(during, 'stt_realtime_upgrades_total', { outcome: 'accepted' })).to.equal(
      v(before, 'stt_realtime_upgrades_total', { outcome: 'accepted' }) + 1,
    );
    expect(v(during, 'stt_realtime_upgrades_total', { outcome: 'missing_api_key' })).to.equal(
      v(before, 'stt_realtime_upgrades_total', { outcome: 'missing_api_key' }) + 1,
    );
    c.send({ type: 'session.update', vad: false });
    await c.next('session.updated');
    await c.stream(readPcm('librivox-austen-0880.wav').subarray(0, 32000));
    c.send({ type: 'flush' });
    await c.next(COMPLETED);
    c.ws.close(1000);
    await c.closed;
    const closedNormal = (text: string) =>
      v(text, 'stt_realtime_sessions_closed_total', { reason: 'normal' });
    const after = await eventually(scrape, (text) => closedNormal(text) > closedNormal(before));
    expect(v(after, 'stt_realtime_sessions_open')).to.equal(v(before, 'stt_realtime_sessions_open'));
    expect(v(after, 'stt_realtime_sessions_closed_total', { reason: 'normal' })).to.equal(
      v(before, 'stt_realtime_sessions_closed_total', { reason: 'normal' }) + 1,
    );
    expect(v(after, 'stt_realtime_utterances_total', { outcome: 'completed' })).to.equal(
      v(before, 'stt_realtime_utterances_total', { outcome: 'completed' }) + 1,
    );
    expect(v(after, 'stt_realtime_completion_latency_seconds_count')).to.equal(
      v(before, 'stt_realtime_completion_latency_seconds_count') + 1,
    );
    expect(
      v(after, 'stt_realtime_audio_seconds_total') - v(before, 'stt_realtime_audio_seconds_total'),
    ).to.be.closeTo(1, 0.01);
    expect(after).to.match(/^stt_nodejs_eventloop_lag_p99_seconds /m);
    expect(after).not.to.include(id);
    // /stats (what the benchmarks read): the same utterance in its overhead figures, lag as numbers.
    const st = await stats();
    expect(st.gatewayOverheadMs.n).to.equal(statsBefore.gatewayOverheadMs.n + 1);
    expect(st.gatewayOverheadMs.p99).to.be.a('number').and.at.least(0);
    expect(st.eventLoopLagMs).to.have.all.keys('p50', 'p99', 'max');
    expect(st).to.include.keys('sessions', 'leases', 'vad', 'breaker', 'memory', 'cpu');
  });

  it('authenticates: missing, malformed, unknown, revoked; sk- in the header; rt_ in access_token or token', async () => {
    expect((await refused(ctx.url)).body.error.code).to.equal('missing_api_key');
    expect((await refused(ctx.url, { authorization: 'Basic abc' })).status).to.equal(401);
    expect(
      (await refused(ctx.url, { authorization: 'Bearer sk-unknownunknownunknown' })).body.error.code,
    ).to.equal('invalid_api_key');
    const { key, id } = await ctx.issueKey('pro');
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    c.ws.close(1000);
    const { token } = issueSessionToken(SESSION_SECRET, id, 60);
    for (const param of ['access_token', 'token']) {
      const c2 = await connect(`${ctx.url}?${param}=${encodeURIComponent(token)}`);
      expect((await c2.next('session.created')).plan).to.equal('pro');
      c2.ws.close(1000);
    }
    expect((await refused(`${ctx.url}?access_token=rt_forged.payload`)).body.error.code).to.equal(
      'invalid_session_token',
    );
    const expired = issueSessionToken(SESSION_SECRET, id, 60, Date.now() - 120_000).token;
    expect((await refused(`${ctx.url}?token=${expired}`)).body.error.code).to.equal('invalid_session_token');
    const { key: revokedKey, id: revokedId } = await ctx.issueKey('pro');
    await ctx.keys.revoke(revokedId);
    expect((await refused(ctx.url, { authorization: `Bearer ${revokedKey}` })).body.error.code).to.equal(
      'revoked_api_key',
    );
  });

  it('never accepts an sk- key in the URL', async () => {
    const { key } = await ctx.issueKey('pro');
    for (const param of ['access_token', 'token']) {
      const r = await refused(`${ctx.url}?${param}=${key}`);
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_api_key');
    }
    // Even next to a valid header: a key in a URL has leaked and is refused.
    const both = await refused(`${ctx.url}?token=${key}`, { authorization: `Bearer ${key}` });
    expect(both.status).to.equal(401);
    // Hidden behind an empty or a token-shaped first parameter, or repeated: still refused.
    for (const q of [
      `access_token=&token=${key}`,
      `access_token=rt_x&token=${key}`,
      `token=rt_x&token=${key}`,
    ]) {
      const hidden = await refused(`${ctx.url}?${q}`, { authorization: `Bearer ${key}` });
      expect(hidden.status, q).to.equal(401);
      expect(hidden.body.error.code).to.equal('invalid_api_key');
    }
    expect(ctx.logs.lines.join('\n')).to.not.include(key);
  });

  it('free plan: a second concurrent connection is refused 429; the slot frees on close', async () => {
    const { key } = await ctx.issueKey('free');
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    const r = await refused(ctx.url, { authorization: `Bearer ${key}` });
    expect(r.status).to.equal(429);
    expect(r.body.error.code).to.equal('too_many_connections');
    expect(Number(r.headers['retry-after'])).to.be.greaterThan(0);
    c.ws.close(1000);
    await c.closed;
    await new Promise((res) => setTimeout(res, 50));
    const c2 = await connect(ctx.url, bearer(key));
    await c2.next('session.created');
    c2.ws.close(1000);
    await c2.closed;
  });

  it('free plan: the 7th handshake within a minute is refused 429 connection_rate_exceeded', async () => {
    const { key } = await ctx.issueKey('free');
    for (let i = 0; i < 6; i++) {
      const c = await connect(ctx.url, bearer(key));
      await c.next('session.created');
      c.ws.close(1000);
      await c.closed;
      await new Promise((res) => setTimeout(res, 20));
    }
    const r = await refused(ctx.url, { authorization: `Bearer ${key}` });
    expect(r.status).to.equal(429);
    expect(r.body.error.code).to.equal('connection_rate_exceeded');
    expect(Number(r.headers['retry-after'])).to.be.greaterThan(0);
  });

  it('breaker: upstream failures close open sessions 1013 upstream_unavailable, then upgrades get 503 + Retry-After, then it recovers', async () => {
    const { key } = await ctx.issueKey('pro');
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    c.send({ type: 'session.update', vad: false });
    await c.next('session.updated');
    await upstream.killWorker(); // the worker crashes
    const pcm = readPcm('librivox-austen-0880.wav').subarray(0, 16000);
    for (let i = 0; i < 2; i++) {
      await c.stream(pcm);
      c.send({ type: 'flush' });
      await new Promise((res) => setTimeout(res, 30));
    }
    expect(await c.closed).to.deep.equal({ code: 1013, reason: 'upstream_unavailable' });
    // Every utterance was reported, none silently lost.
    const completed = c.of('conversation.item.input_audio_transcription.completed');
    expect(completed.length).to.equal(c.of('input_audio_buffer.speech_stopped').length);
    expect(completed.every((e) => e.error?.code === 'transcription_failed')).to.equal(true);
    const r = await refused(ctx.url, { authorization: `Bearer ${key}` });
    expect(r.status).to.equal(503);
    expect(r.body.error.code).to.equal('upstream_unavailable');
    expect(Number(r.headers['retry-after'])).to.be.within(1, 2);
    // The breaker is checked before authentication (4.8): a caller with no credential gets the same 503.
    const anonymous = await refused(ctx.url);
    expect(anonymous.status).to.equal(503);
    expect(anonymous.body.error.code).to.equal('upstream_unavailable');
    // Upgrades are refused, so the instance cannot accept realtime traffic: 503 (interface 4.2).
    const ready = await fetch(`${ctx.base}/readyz`);
    const readyBody = await ready.json();
    expect(ready.status, JSON.stringify(readyBody)).to.equal(503);
    expect(readyBody.ok).to.equal(false);
    const openedAt = Date.now();
    await upstream.restartWorker(); // a supervisor brings a fresh worker up
    await new Promise((res) => setTimeout(res, Math.max(0, 1600 - (Date.now() - openedAt))));
    const c2 = await connect(ctx.url, bearer(key));
    await c2.next('session.created');
    c2.send({ type: 'session.update', vad: false });
    await c2.next('session.updated');
    await c2.stream(pcm);
    c2.send({ type: 'flush' });
    const ok = await c2.next(COMPLETED, 30_000);
    expect(ok.error).to.equal(undefined);
    expect(ok.text).to.not.be.empty;
    expect(ctx.rt.breaker.state).to.equal('closed');
    c2.ws.close(1000);
  });

  it('an utterance the engine refuses (unsupported language) fails alone and never opens the breaker', async () => {
    const { key } = await ctx.issueKey('pro');
    const c = await connect(ctx.url, bearer(key));
    await c.next('session.created');
    c.send({ type: 'session.update', vad: false, language: 'fr' });
    await c.next('session.updated');
    const pcm = readPcm('librivox-austen-0880.wav').subarray(0, 16000);
    for (let i = 0; i < 3; i++) {
      // More refusals than the breaker's threshold (2 here): the worker is fine, the request is not.
      await c.stream(pcm);
      c.send({ type: 'flush' });
      await c.waitFor((evs) => evs.filter((e) => e.type === COMPLETED).length === i + 1, 30_000);
    }
    expect(c.of('error').map((e) => e.upstream_code)).to.deep.equal(Array(3).fill('unsupported_language'));
    expect(ctx.rt.breaker.state).to.equal('closed');
    const from = c.events.length;
    c.send({ type: 'session.update', language: 'en' });
    await c.next('session.updated', 5000, from);
    await c.stream(pcm);
    c.send({ type: 'flush' });
    expect((await c.next(COMPLETED, 30_000, from)).error).to.equal(undefined);
    c.ws.close(1000);
    expect((await c.closed).code).to.equal(1000);
  });

  it('/readyz answers 503 while the speech upstream is unhealthy', async () => {
    const ready = async () => {
      const r = await fetch(`${ctx.base}/readyz`);
      return { status: r.status, upstream: (await r.json()).checks.upstream };
    };
    // The worker hangs: its health checks time out and readiness turns 503 (it is cached for 1 s).
    await upstream.whilePaused(async () => {
      const r = await eventually(ready, (x) => !x.upstream, 10_000);
      expect(r).to.deep.equal({ status: 503, upstream: false });
    });
    expect(await eventually(ready, (x) => x.upstream, 10_000)).to.deep.equal({ status: 200, upstream: true });
  });

  it('answers 503 auth_unavailable with Retry-After while the key store (Postgres) is unreachable', async () => {
    // A second realtime instance whose database is a port where nothing listens.
    const down = await createRealtimeContext({
      engine: upstream.engine,
      testDb: { name: 'unreachable', url: 'postgres://postgres@127.0.0.1:1/none', drop: async () => {} },
    });
    try {
      const r = await refused(down.url, { authorization: 'Bearer sk-' + 'a'.repeat(48) });
      expect(r.status).to.equal(503);
      expect(r.body.error.code).to.equal('auth_unavailable');
      expect(r.headers['retry-after'], 'every dependency refusal says when to retry').to.match(/^\d+$/);
    } finally {
      await down.close();
    }
  });

  it('answers 503 gateway_disabled when the gateway is disabled (checked before auth)', async () => {
    const off = await createRealtimeContext({
      engine: upstream.engine,
      env: { REALTIME_ENABLED: 'false' },
      testDb: ctx.testDb,
    });
    try {
      const r = await refused(off.url);
      expect(r.status).to.equal(503);
      expect(r.body.error.code).to.equal('gateway_disabled');
      expect((await fetch(`${off.base}/readyz`)).status).to.equal(503);
    } finally {
      await off.close();
    }
  });

  it('a crashed VAD thread (an unexpected gateway failure) ends its sessions 1011 client_error, still meters, and turns /readyz to 503', async () => {
    const v = loadConfig({}).realtime.vad;
    const threaded = await ThreadedVad.start(1, { ...v, poolWarm: 0, poolMax: 4 });
    const crashy = await createRealtimeContext({
      engine: upstream.engine,
      vad: threaded,
      testDb: ctx.testDb,
    });
    try {
      const { key } = await crashy.issueKey('pro');
      const c = await connect(crashy.url, bearer(key));
      const created = await c.next('session.created');
      await c.stream(readPcm('librivox-austen-0880.wav').subarray(0, 32000)); // 1 s
      await new Promise((r) => setTimeout(r, 100));
      await (
        threaded as unknown as { lanes: { worker: { terminate(): Promise<number> } }[] }
      ).lanes[0].worker.terminate();
      expect(await c.closed).to.deep.equal({ code: 1011, reason: 'client_error' });
      const rows = await eventually(
        () => usageRows(crashy, created.session_id),
        (r) => r.length > 0,
      );
      expect(rows).to.have.length(1);
      expect(rows[0].audio_seconds).to.be.closeTo(1, 0.01);
      expect(threaded.healthy).to.equal(false);
      expect((await fetch(`${crashy.base}/readyz`)).status).to.equal(503);
    } finally {
      await crashy.close();
      await threaded.close();
    }
  });

  it('embedded mode: the API serves the stream on its own base URL (upgrades spliced, plain GET 426) and its /readyz follows the realtime tier', async () => {
    const api = await createTestApp(
      {},
      { overrides: { realtime: { upstreamProxyTarget: `127.0.0.1:${ctx.rt.port}` } } },
    );
    const running = await startApi(
      { ...api.config, http: { ...api.config.http, port: 0, host: '127.0.0.1', shutdownGraceMs: 2000 } },
      api.deps.logger,
      { deps: api.deps },
    );
    const base = `127.0.0.1:${running.port}`;
    try {
      const { key } = await ctx.issueKey('pro');
      const c = await connect(`ws://${base}/v1/audio/transcriptions/stream`, bearer(key));
      await c.next('session.created');
      await c.stream(readPcm('librivox-austen-0880.wav'));
      c.send({ type: 'flush' });
      await c.next('conversation.item.input_audio_transcription.completed');
      c.ws.close(1000);
      expect((await c.closed).code).to.equal(1000);
      const r = await refused(`ws://${base}/v1/audio/transcriptions/stream`);
      expect(r.status).to.equal(401);
      // Not an upgrade: the same answer the realtime process gives.
      const plain = await fetch(`http://${base}/v1/audio/transcriptions/stream`);
      expect(plain.status).to.equal(426);
      expect(await plain.json()).to.deep.include({
        error: {
          code: 'websocket_required',
          message: 'This endpoint needs a WebSocket upgrade.',
          type: 'realtime_error',
        },
      });
      // REST still answers on the same port; readiness includes the realtime tier's own /readyz.
      const ready = async () => {
        const res = await fetch(`http://${base}/readyz`);
        return { status: res.status, realtime: (await res.json()).checks.realtime };
      };
      expect(await eventually(ready, (x) => x.status === 200, 10_000)).to.deep.equal({
        status: 200,
        realtime: true,
      });
      await upstream.whilePaused(async () => {
        // The speech upstream hangs: the realtime tier is not ready, so neither is the API for realtime traffic.
        expect(await eventually(ready, (x) => x.status === 503, 15_000)).to.deep.equal({
          status: 503,
          realtime: false,
        });
      });
      expect(await eventually(ready, (x) => x.status === 200, 15_000)).to.deep.equal({
        status: 200,
        realtime: true,
      });
    } finally {
      await running.stop();
      await api.db.drop();
    }
  });
});

describe('realtime: native uWebSockets.js guard', () => {
  it('recognises the native addon loaded here', () => {
    const mod = loadUws();
    const require = createRequire(import.meta.url);
    expect(isNativeUws(mod, require.cache as Record<string, { exports?: unknown }>)).to.equal(true);
  });

  it('rejects a pure-JS look-alike (no .node module behind it)', () => {
    const require = createRequire(import.meta.url);
    const lookAlike = { App: () => ({}), SSLApp: () => ({}) };
    expect(isNativeUws(lookAlike, require.cache as Record<string, { exports?: unknown }>)).to.equal(false);
  });

  it('loads on this glibc: below 2.38 through a rebound copy, never the package file changed', () => {
    const require = createRequire(import.meta.url);
    const dir = path.dirname(require.resolve('uWebSockets.js'));
    const addon = path.join(dir, `uws_linux_x64_${process.versions.modules}.node`);
    const before = fs.readFileSync(addon);
    const rebound = rebindC23(before);
    expect(rebound, 'the 20.57 addon asks for glibc 2.38 C23 functions').to.not.equal(undefined);
    const text = rebound!.toString('latin1');
    expect(text).to.not.include('__isoc23_sscanf');
    expect(text).to.include('__isoc99_sscanf');
    if (needsGlibcShim()) expect(loadablePath(addon)).to.not.equal(addon);
    expect(fs.readFileSync(addon).equals(before)).to.equal(true);
  });

  it('keeps the rebound copy in a folder only this user can write: not a shared one, not a link', () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), 'uws-dir-'));
    try {
      const dir = privateDir(base);
      expect(fs.lstatSync(dir).mode & 0o777).to.equal(0o700);
      fs.chmodSync(dir, 0o777);
      expect(() => privateDir(base)).to.throw(/writable by other users/);
      // A link where the folder should be, even to a private folder of ours, could be turned elsewhere.
      fs.rmSync(dir, { recursive: true });
      const ours = fs.mkdtempSync(path.join(base, 'ours-'));
      fs.chmodSync(ours, 0o700);
      fs.symlinkSync(ours, dir);
      expect(() => privateDir(base)).to.throw(/not a folder/);
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  it('refuses to start when the addon cannot load', function () {
    this.timeout(20_000);
    // A Node ABI the package has no addon for: the package throws, the guard names the cause.
    const script = `Object.defineProperty(process.versions, 'modules', { value: '1' }); const { loadUws } = await import('./realtime/uws.ts'); try { loadUws(); console.log('STARTED'); } catch (e) { console.error(e.name + ': ' + e.message); process.exit(3); }`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: repoRoot,
      encoding: 'utf8',
    });
    expect(r.status, r.stderr).to.equal(3);
    expect(r.stderr).to.include('NativeUwsUnavailable');
    expect(r.stdout).to.not.include('STARTED');
  });
});
