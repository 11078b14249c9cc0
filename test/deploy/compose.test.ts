/**
 * docker/compose.yaml run by `podman-compose` (issue 23) on the image built
 * from docker/Dockerfile: its migrate, two engines, two APIs, two realtime
 * instances and HAProxy (docker/haproxy.cfg as shipped) on the compose
 * network, by the service names and ports the file gives them.
 *
 * This machine cannot pull third-party images, so an override file (written
 * by this test) puts stand-ins in their place, and says so:
 * - postgres, redis and minio become small TCP forwarders (the project's own
 *   image running node) to this machine's Postgres (a fresh database), Redis
 *   and s3rver, reached through the compose network's gateway;
 * - haproxy:2.8 is a local image of Debian's HAProxy
 *   (test/deploy/image/haproxy.Containerfile);
 * - the database URL names that fresh database, the S3 credentials s3rver's.
 * Everything else runs as the file says.
 *   npx mocha test/deploy/compose.test.ts
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import S3rver from 's3rver';
import { stringify } from 'yaml';
import { waitHttpOk } from '../../scripts/cluster/index.js';
import { STREAM_PATH } from '../../shared/paths.js';
import { createTestDatabase, TEST_DATABASE_URL, TEST_REDIS_URL, type TestDatabase } from '../helpers/db.js';
import { repoRoot, words } from '../realtime/helpers.js';
import {
  ADMIN_TOKEN,
  issueKeyAndTranscribe,
  realtimeUtteranceText,
  SESSION_SECRET,
  tcpForward,
  WEBHOOK_SECRET,
} from './helpers.js';
import {
  ensureImage,
  podman,
  podmanInstalled,
  podmanStatus,
  PODMAN_ENV,
  uniqueName,
} from './image/podman.js';

const run = promisify(execFile);
const HAPROXY_IMAGE = 'docker.io/library/haproxy:2.8';
/** The services that run the project's image (the others are third-party). */
const APP = ['migrate', 'api1', 'api2', 'realtime1', 'realtime2'];

/** A TCP forwarder as a node one-liner: argv host, port, listen port. */
const FORWARDER =
  "const n=require('net');const[h,p,l]=process.argv.slice(1);" +
  'n.createServer((c)=>{const u=n.connect(+p,h);c.pipe(u).pipe(c);' +
  "c.on('error',()=>u.destroy());u.on('error',()=>c.destroy())}).listen(+l)";

describe('compose: docker/compose.yaml with podman-compose on the built image', function () {
  this.timeout(120_000);
  const project = uniqueName('sttcompose').replace(/-/g, '');
  const network = `${project}_default`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-compose-'));
  const override = path.join(dir, 'override.yaml');
  const forwarders: net.Server[] = [];
  let db: TestDatabase | undefined;
  let s3: S3rver | undefined;
  let holder = '';
  let lb = '';
  let key = '';

  const compose = (args: string[], timeoutMs = 5 * 60_000) =>
    run('podman-compose', ['-p', project, '-f', 'docker/compose.yaml', '-f', override, ...args], {
      cwd: repoRoot,
      timeout: timeoutMs,
      maxBuffer: 64 * 1024 * 1024,
      env: {
        ...PODMAN_ENV,
        GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
        GATEWAY_SESSION_TOKEN_SECRET: SESSION_SECRET,
        WEBHOOK_SECRET,
        S3_ACCESS_KEY_ID: 'S3RVER',
        S3_SECRET_ACCESS_KEY: 'S3RVER',
        METRICS_TOKEN: 'compose-metrics',
      },
    });
  const container = (service: string) => `${project}_${service}_1`;
  const logs = async (service: string) =>
    (await podmanStatus(['logs', '--tail', '20', container(service)])).out;

  before(async function () {
    if (!podmanInstalled() || !fs.existsSync('/usr/bin/podman-compose')) {
      console.log('    podman-compose is not installed (apt-get install -y podman-compose): skipped');
      this.skip();
    }
    this.timeout(40 * 60_000);
    const image = await ensureImage((l) => console.log(`    ${l}`));
    await podman(['tag', image, 'localhost/stt-service:local']);
    if ((await podmanStatus(['image', 'exists', HAPROXY_IMAGE])).code !== 0) {
      const b = await podmanStatus(
        [
          'build',
          '--pull=never',
          '--network',
          'host',
          '-f',
          'test/deploy/image/haproxy.Containerfile',
          '-t',
          HAPROXY_IMAGE,
          path.join(repoRoot, 'test/deploy/image'),
        ],
        10 * 60_000,
      );
      if (b.code !== 0) throw new Error(`haproxy stand-in: ${b.out.slice(-2000)}`);
    }

    // The compose network first, with one container on it so that its bridge (and gateway) exist:
    // the stand-ins reach this machine's services through forwarders on that gateway.
    await podman(['network', 'create', network]);
    holder = `${project}-holder`;
    await podman(['run', '-d', '--name', holder, '--network', network, image, 'sleep', 'infinity']);
    const gateway = await podman([
      'network',
      'inspect',
      network,
      '--format',
      '{{range .Subnets}}{{.Gateway}}{{end}}',
    ]);
    expect(gateway).to.match(/^\d+\.\d+\.\d+\.\d+$/);

    db = await createTestDatabase('stt_compose', { migrate: false });
    // Path-style only: requests arrive for host `minio`, which s3rver would otherwise take for a bucket.
    s3 = new S3rver({
      address: '127.0.0.1',
      port: 0,
      silent: true,
      ...({ vhostBuckets: false } as object),
      directory: path.join(dir, 's3'),
    });
    const s3addr = await s3.run();
    const pgUrl = new URL(TEST_DATABASE_URL);
    const redisUrl = new URL(TEST_REDIS_URL);
    const targets = {
      postgres: { host: pgUrl.hostname, port: Number(pgUrl.port || 5432), listen: 5432 },
      redis: { host: redisUrl.hostname, port: Number(redisUrl.port || 6379), listen: 6379 },
      minio: { host: '127.0.0.1', port: s3addr.port, listen: 9000 },
    };
    const services: Record<string, unknown> = {};
    for (const [name, t] of Object.entries(targets)) {
      const f = await tcpForward(gateway, t);
      forwarders.push(f);
      services[name] = {
        image: 'localhost/stt-service:local',
        // An entrypoint, not a command: podman-compose 1.0 appends an override's lists to the
        // file's (the service's own command then trails as ignored arguments).
        entrypoint: [
          'node',
          '-e',
          FORWARDER,
          gateway,
          String((f.address() as net.AddressInfo).port),
          String(t.listen),
        ],
      };
    }
    const dbUrl = new URL(db.url);
    dbUrl.hostname = 'postgres';
    dbUrl.port = '5432';
    for (const s of APP)
      services[s] = { environment: { DATABASE_URL: dbUrl.toString(), OUTBOUND_ALLOW: '127.0.0.1' } };
    fs.writeFileSync(override, stringify({ services }));

    await compose(['up', '-d', '--no-build']);
    lb = await podman([
      'inspect',
      '--format',
      `{{(index .NetworkSettings.Networks "${network}").IPAddress}}`,
      container('lb'),
    ]);
    await waitHttpOk(`http://${lb}:8080/readyz`, 180_000).catch(async (err: Error) => {
      const all = await Promise.all(
        ['migrate', 'api1', 'realtime1', 'lb'].map(async (s) => `${s}:\n${await logs(s)}`),
      );
      throw new Error(`${err.message}\n${all.join('\n')}`);
    });
  });

  after(async function () {
    this.timeout(180_000);
    if (fs.existsSync(override)) await compose(['down', '-t', '5'], 180_000).catch(() => undefined);
    if (holder) await podmanStatus(['rm', '-f', '-t', '0', holder]);
    await podmanStatus(['network', 'rm', '-f', network]);
    for (const f of forwarders) f.close();
    await s3?.close();
    await db?.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('the migration ran once and exited 0; every app service is running', async () => {
    const state = async (s: string) =>
      (await podman(['inspect', '--format', '{{.State.Status}} {{.State.ExitCode}}', container(s)])).split(
        ' ',
      );
    expect(await state('migrate')).to.deep.equal(['exited', '0']);
    for (const s of ['engine1', 'engine2', 'api1', 'api2', 'realtime1', 'realtime2', 'lb'])
      expect((await state(s))[0], `${s}\n${await logs(s)}`).to.equal('running');
  });

  it("each service's compose healthcheck passes, as podman-compose passed it to podman", async function () {
    this.timeout(120_000);
    // As compose judges it: healthy once a check passes; unhealthy only after its retries (5 x 5 s)
    // all fail. One failed run on a busy host (a slow readiness answer) is not a verdict.
    for (const s of ['engine1', 'engine2', 'api1', 'api2', 'realtime1', 'realtime2', 'lb']) {
      let hc = await podmanStatus(['healthcheck', 'run', container(s)]);
      for (let retry = 0; hc.code !== 0 && retry < 5; retry++) {
        await new Promise((r) => setTimeout(r, 5_000));
        hc = await podmanStatus(['healthcheck', 'run', container(s)]);
      }
      expect(hc.code, `${s}: ${hc.out}\n${await logs(s)}`).to.equal(0);
    }
  });

  it('issues a key and transcribes jfk.wav through HAProxy (speech on the engine services)', async () => {
    const r = await issueKeyAndTranscribe(`http://${lb}:8080`, 'tenant-compose');
    expect(r.status, JSON.stringify(r.body)).to.equal(200);
    key = r.key;
    expect(words(r.text).join(' ')).to.include('your country can do for you');
  });

  it('transcribes a realtime utterance through HAProxy', async () => {
    const text = await realtimeUtteranceText(`ws://${lb}:8080${STREAM_PATH}`, key);
    expect(words(text).join(' '), text).to.include('country');
  });

  it('METRICS_TOKEN passes through to every instance (compose leaves no placeholder)', async () => {
    for (const s of ['engine1', 'api1', 'realtime1']) {
      const env = await podman(['exec', container(s), 'printenv', 'METRICS_TOKEN']);
      expect(env, s).to.equal('compose-metrics');
    }
  });
});
