/**
 * The Kubernetes manifests run (issue 23): the example overlay rendered by
 * `kubectl kustomize`, played with `podman kube play` on the image built
 * from docker/Dockerfile — the migration Job's pod first, then the api,
 * batch, realtime and engine Deployments with their initContainers,
 * securityContext and volumes as rendered — until every probe answers and
 * speech goes through the API and realtime pods. What the harness changes
 * for one machine without a cluster is listed in test/deploy/image/kube.ts.
 *   npx mocha test/deploy/kube-play.test.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import S3rver from 's3rver';
import { freePort, waitHttpOk } from '../../scripts/cluster/index.js';
import { STREAM_PATH } from '../../shared/paths.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/db.js';
import { words } from '../realtime/helpers.js';
import {
  ADMIN_TOKEN,
  issueKeyAndTranscribe,
  realtimeUtteranceText,
  SESSION_SECRET,
  WEBHOOK_SECRET,
} from './helpers.js';
import { ensureImage, podman, podmanInstalled, podmanStatus } from './image/podman.js';
import { forPodman, renderOverlay, type Played } from './image/kube.js';

describe('Kubernetes: the example overlay played with `podman kube play` on the built image', function () {
  this.timeout(120_000);
  let db: TestDatabase | undefined;
  let s3: S3rver | undefined;
  let played: Played | undefined;
  const files: string[] = [];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-kube-'));
  const ports: Record<string, number> = {};
  const url = (name: string, p = '') => `http://127.0.0.1:${ports[name]}${p}`;
  let key = '';

  /** Containers of a played pod (names as podman gives them), with their state. */
  const containersOf = async (pod: string) =>
    JSON.parse(await podman(['ps', '-a', '--filter', `pod=${pod}`, '--format', 'json'])) as {
      Names: string[];
      State: string;
      ExitCode: number;
    }[];
  const podOf = async (prefix: string) =>
    (await podman(['pod', 'ps', '--format', '{{.Name}}'])).split('\n').find((n) => n.startsWith(prefix))!;
  const logsOf = async (prefix: string) => {
    const pod = await podOf(prefix);
    if (!pod) return `(no pod ${prefix})`;
    const out: string[] = [];
    for (const c of await containersOf(pod))
      out.push(
        `${c.Names[0]} (${c.State}):\n${(await podmanStatus(['logs', '--tail', '30', c.Names[0]])).out}`,
      );
    return out.join('\n');
  };

  before(async function () {
    if (!podmanInstalled()) {
      console.log('    podman is not installed (apt-get install -y podman runc debootstrap): skipped');
      this.skip();
    }
    this.timeout(40 * 60_000);
    const image = await ensureImage((l) => console.log(`    ${l}`));

    // An empty database: the migration Job creates the schema.
    db = await createTestDatabase('stt_kube', { migrate: false });
    s3 = new S3rver({
      address: '127.0.0.1',
      port: 0,
      silent: true,
      directory: fs.mkdtempSync(path.join(dir, 's3-')),
    });
    const s3addr = await s3.run();
    for (const name of ['api', 'batch', 'realtime', 'engine']) ports[name] = await freePort();

    played = forPodman(renderOverlay(), {
      image,
      ports,
      secrets: {
        DATABASE_URL: db.url,
        REDIS_URL: TEST_REDIS_URL,
        GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
        GATEWAY_SESSION_TOKEN_SECRET: SESSION_SECRET,
        WEBHOOK_SECRET,
        S3_ACCESS_KEY_ID: 'S3RVER',
        S3_SECRET_ACCESS_KEY: 'S3RVER',
        METRICS_TOKEN: 'kube-metrics',
      },
      config: {
        // The Services' names, as this machine reaches the pods (host network).
        STT_WORKER_URLS: `engine=${url('engine')}`,
        REALTIME_READY_URLS: `${url('realtime')}/readyz`,
        S3_ENDPOINT: `http://127.0.0.1:${s3addr.port}`,
      },
    });
    expect(played.deployments.sort()).to.deep.equal(['api', 'batch', 'engine', 'realtime']);

    for (const { name, json } of played.secrets) {
      const file = path.join(dir, `${name}.json`);
      fs.writeFileSync(file, json);
      await podmanStatus(['secret', 'rm', name]);
      await podman(['secret', 'create', name, file]);
    }
    // The Job first: the Deployments' initContainers wait for its migrations anyway.
    const job = path.join(dir, 'migrate.yaml');
    fs.writeFileSync(job, played.migrate);
    files.push(job);
    await podman(['kube', 'play', '--replace', job], 5 * 60_000);
    const jobPod = await podOf('stt-migrate');
    const migrated = await podmanStatus(
      ['wait', (await containersOf(jobPod)).find((c) => !/infra/.test(c.Names[0]))!.Names[0]],
      5 * 60_000,
    );
    expect(migrated.out.trim(), await logsOf('stt-migrate')).to.equal('0');

    const workloads = path.join(dir, 'workloads.yaml');
    fs.writeFileSync(workloads, played.workloads);
    files.push(workloads);
    await podman(['kube', 'play', '--replace', workloads], 5 * 60_000);
    for (const name of played.deployments)
      for (const probe of played.probes[name])
        await waitHttpOk(probe.url, 180_000).catch(async (err: Error) => {
          throw new Error(`${name} ${probe.kind} ${probe.url}: ${err.message}\n${await logsOf(name)}`);
        });
  });

  after(async function () {
    this.timeout(180_000);
    for (const f of files.reverse()) await podmanStatus(['kube', 'down', f], 120_000);
    for (const { name } of played?.secrets ?? []) await podmanStatus(['secret', 'rm', name]);
    await s3?.close();
    await db?.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("the migration Job's pod ran to completion before the Deployments", async () => {
    const pod = await podOf('stt-migrate');
    const main = (await containersOf(pod)).filter((c) => !/infra/.test(c.Names[0]));
    expect(main.map((c) => [c.State, c.ExitCode])).to.deep.equal([['exited', 0]]);
  });

  it("every Deployment's startup, liveness and readiness probe answers 200 on its own path", async () => {
    for (const name of played!.deployments) {
      expect(
        played!.probes[name].map((p) => p.kind),
        name,
      ).to.include.members(['livenessProbe', 'readinessProbe']);
      for (const probe of played!.probes[name])
        expect((await fetch(probe.url)).status, `${name} ${probe.kind} ${probe.url}`).to.equal(200);
    }
  });

  it('runs each pod as rendered: init container done, user 1000, read-only root filesystem', async () => {
    for (const name of played!.deployments) {
      const pod = await podOf(name);
      const cs = await containersOf(pod);
      const state = (c: string) => cs.find((x) => x.Names[0] === `${pod}-${c}`);
      const main = state(name);
      expect(main?.State, `${name}: ${JSON.stringify(cs)}`).to.equal('running');
      const ro = await podman(['inspect', '--format', '{{.HostConfig.ReadonlyRootfs}}', main!.Names[0]]);
      expect(ro, name).to.equal('true');
      const id = await podmanStatus(['exec', main!.Names[0], 'id', '-u']);
      expect(id.out.trim(), name).to.equal('1000');
      if (name !== 'engine') {
        const init = state('wait-for-migrations');
        expect([init?.State, init?.ExitCode], `${name} initContainer`).to.deep.equal(['exited', 0]);
      }
    }
  });

  it('issues a key on the API pod and transcribes jfk.wav (speech on the engine pod)', async () => {
    const r = await issueKeyAndTranscribe(url('api'), 'tenant-kube');
    expect(r.status, JSON.stringify(r.body)).to.equal(200);
    key = r.key;
    expect(words(r.text).join(' ')).to.include('your country can do for you');
  });

  it('transcribes a realtime utterance on the realtime pod', async () => {
    const text = await realtimeUtteranceText(`ws://127.0.0.1:${ports.realtime}${STREAM_PATH}`, key);
    expect(words(text).join(' '), text).to.include('country');
  });
});
