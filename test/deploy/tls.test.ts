/**
 * TLS at the load balancer (issue 23): docker/haproxy.cfg with TLS_CERT_FILE
 * set (here a self-signed certificate made by openssl) terminates HTTPS and
 * wss:// on its one public port, in front of `npm run cluster`'s topology
 * (one instance of each role): a segment request over HTTPS and a realtime
 * session over wss://, and plain HTTP no longer answered on that port.
 *   npx mocha test/deploy/tls.test.ts
 */
import { selfSigned } from '../realtime/openaiHelpers.js';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { Agent } from 'undici';
import { parse } from 'yaml';
import WebSocket from 'ws';
import { AUDIO_DIR, readPcm, repoRoot, silence, words } from '../realtime/helpers.js';
import { ADMIN_TOKEN, deployCluster, type DeployedCluster } from './helpers.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';

describe('deployment over TLS: HAProxy terminates HTTPS and wss:// with TLS_CERT_FILE', function () {
  this.timeout(120_000);
  let d: DeployedCluster;
  let ca = '';
  let dispatcher: Agent;
  const certDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-tls-'));

  before(async function () {
    this.timeout(300_000);
    // A self-signed certificate for 127.0.0.1 and localhost; HAProxy takes chain and key in one PEM.
    const creds = selfSigned(certDir);
    ca = creds.cert;
    const pem = path.join(certDir, 'stt.pem');
    fs.writeFileSync(pem, ca + creds.key, { mode: 0o600 });
    // The client trusts this certificate only (it verifies it: no rejectUnauthorized: false).
    dispatcher = new Agent({ connect: { ca } });
    d = await deployCluster({
      apis: 1,
      realtimes: 1,
      engines: 1,
      tlsCertFile: pem,
      env: { STT_BUILTIN_TIMEOUT_BASE_MS: '60000' },
    });
  });
  after(async function () {
    this.timeout(60_000);
    await d?.close();
    await dispatcher?.close();
    fs.rmSync(certDir, { recursive: true, force: true });
  });

  const get = (p: string, init: RequestInit = {}) =>
    fetch(`${d.cluster.url}${p}`, { ...init, dispatcher } as RequestInit);

  it('serves https:// and wss:// URLs on the public port', () => {
    expect(d.cluster.url).to.match(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(d.cluster.wsUrl).to.match(/^wss:\/\/127\.0\.0\.1:\d+\/v1\/audio\/transcriptions\/stream$/);
  });

  it('a segment request over HTTPS (the certificate verified against its own CA)', async () => {
    const issued = await get('/v1/external-transcription/keys', {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ owner_id: 'tenant-tls', plan: 'pro' }),
    });
    expect(issued.status).to.equal(201);
    const { data } = (await issued.json()) as { data: { key: string } };
    const form = new FormData();
    form.set(
      'file',
      new Blob([fs.readFileSync(path.join(AUDIO_DIR, 'jfk.wav'))], { type: 'audio/wav' }),
      'jfk.wav',
    );
    form.set('response_format', 'json');
    const res = await get('/v1/audio/transcriptions', {
      method: 'POST',
      headers: { authorization: `Bearer ${data.key}` },
      body: form,
    });
    const body = (await res.json()) as { text: string };
    expect(res.status, JSON.stringify(body)).to.equal(200);
    expect(words(body.text).join(' ')).to.include('your country can do for you');

    // A realtime session over wss:// through the same port.
    const ws = new WebSocket(d.cluster.wsUrl, { ca, headers: { authorization: `Bearer ${data.key}` } });
    const events: Record<string, unknown>[] = [];
    const completed = new Promise<Record<string, unknown>>((resolve, reject) => {
      ws.on('message', (m, binary) => {
        if (binary) return;
        const e = JSON.parse(m.toString()) as Record<string, unknown>;
        events.push(e);
        if (e.type === COMPLETED) resolve(e);
      });
      ws.once('error', reject);
      ws.once('close', (code) =>
        reject(new Error(`closed ${code} before a final: ${events.map((e) => e.type)}`)),
      );
      setTimeout(() => reject(new Error(`no final in 60 s: ${events.map((e) => e.type)}`)), 60_000);
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const pcm = Buffer.concat([silence(300), readPcm('jfk.wav'), silence(1500)]);
    for (let off = 0; off < pcm.length; off += 3200) {
      ws.send(pcm.subarray(off, off + 3200));
      // Four times real time.
      await new Promise((r) => setTimeout(r, 25));
    }
    const first = await completed;
    expect(first.error, JSON.stringify(first)).to.equal(undefined);
    expect(words(String(first.text)).length).to.be.above(0);
    expect(events[0].type).to.equal('session.created');
    ws.close(1000);
  });

  it('compose turns it on the same way (docker/compose.tls.yaml sets TLS_CERT_FILE on the load balancer)', () => {
    const cfg = fs.readFileSync(path.join(repoRoot, 'docker/haproxy.cfg'), 'utf8');
    expect(cfg).to.match(/^\.if defined\(TLS_CERT_FILE\)\n\s+bind \S+ ssl crt "\$\{TLS_CERT_FILE\}"/m);
    const tls = parse(fs.readFileSync(path.join(repoRoot, 'docker/compose.tls.yaml'), 'utf8')) as {
      services: { lb: { environment: Record<string, string>; volumes: string[] } };
    };
    const file = tls.services.lb.environment.TLS_CERT_FILE;
    const mount = /:(\/[^:]+)(:ro)?$/.exec(tls.services.lb.volumes[0])![1];
    expect(file.startsWith(mount + '/'), `${file} inside ${mount}`).to.equal(true);
    const compose = parse(fs.readFileSync(path.join(repoRoot, 'docker/compose.yaml'), 'utf8')) as {
      services: Record<string, unknown>;
    };
    expect(compose.services).to.have.property('lb');
  });

  it('plain HTTP on the TLS port gets no answer from the API', async () => {
    const port = new URL(d.cluster.url).port;
    const status = await new Promise<number | string>((resolve) => {
      const req = http.get({ host: '127.0.0.1', port, path: '/health', timeout: 5000 }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', (err) => resolve(err.message));
      req.on('timeout', () => req.destroy(new Error('timeout')));
    });
    // HAProxy answers a plaintext request on a TLS port with its own 400 (or closes).
    expect(status).to.not.equal(200);
  });
});
