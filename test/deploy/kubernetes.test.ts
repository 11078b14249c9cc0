/**
 * docker/kubernetes rendered by `kubectl kustomize` (the example overlay) and
 * held against the code: names, ports, paths, environment variable names,
 * probes, drain timings, security context, resources from the measured
 * capacity and the autoscalers' queries.
 *   npx mocha test/deploy/kubernetes.test.ts
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { parseAllDocuments } from 'yaml';
import { loadConfig, settingNames } from '../../shared/config/index.js';
import { transcribeCliConfig } from '../../shared/config/speech.js';
import { PGBOSS_SCHEMA } from '../../shared/config/batch.js';
import { STREAM_PATH } from '../../shared/paths.js';
import { WORKFLOW_QUEUE } from '../../api/batch/runtime.js';
import { sessionsOpen } from '../../realtime/metrics.js';
import { REALTIME_ENV } from '../../scripts/cluster/index.js';
import { REALTIME_NODE_FLAGS } from '../../shared/config/realtime.js';
import { repoRoot } from '../realtime/helpers.js';

type Obj = Record<string, any>;

const OVERLAY = 'docker/kubernetes/overlays/example';
/** docs/benchmarks/deploy.md: CPU of the realtime tier per real-time stream. */
const CORE_PER_STREAM = 0.13;
/** docs/benchmarks/deploy.md, "Realtime instance RSS": an instance of REALTIME_ENV with its 5 sessions streaming (439-441 MiB measured). */
const MIB_REALTIME_INSTANCE = 441;
/** docs/benchmarks/deploy.md: the clip-form thread an instance starts on the first fallback (about 110 MiB). */
const MIB_CLIP_THREAD = 110;
/** docs/benchmarks/speech.md, "Memory per decoder": RSS of a process with one clip decoder (207.3 MB). */
const MB_ONE_DECODER_PROCESS = 207.3;

function render(dir: string): Obj[] {
  const out = execFileSync('kubectl', ['kustomize', dir], { cwd: repoRoot, encoding: 'utf8' });
  return parseAllDocuments(out).map((d) => d.toJS() as Obj);
}

const cpu = (q: string) => (q.endsWith('m') ? Number(q.slice(0, -1)) / 1000 : Number(q));
const mib = (q: string) => {
  const m = /^(\d+(?:\.\d+)?)(Mi|Gi|M|G)$/.exec(q);
  if (!m) throw new Error(`quantity ${q}`);
  const n = Number(m[1]);
  return { Mi: n, Gi: n * 1024, M: (n * 1e6) / 2 ** 20, G: (n * 1e9) / 2 ** 20 }[m[2]]!;
};

describe('deploy: Kubernetes manifests (kubectl kustomize) agree with the code', function () {
  this.timeout(30_000);
  let docs: Obj[] = [];
  const find = (kind: string, name: string) => {
    const d = docs.find((x) => x.kind === kind && x.metadata.name === name);
    expect(d, `${kind}/${name}`).to.not.equal(undefined);
    return d!;
  };
  const byPrefix = (kind: string, prefix: string) =>
    docs.find((x) => x.kind === kind && x.metadata.name.startsWith(prefix))!;
  /** The environment a container's process sees (its ConfigMap and Secret, then its own env). */
  const envOf = (container: Obj): Record<string, string> => {
    const env: Record<string, string> = {};
    for (const from of container.envFrom ?? []) {
      if (from.configMapRef) Object.assign(env, find('ConfigMap', from.configMapRef.name).data);
      if (from.secretRef) {
        const s = find('Secret', from.secretRef.name);
        for (const [k, v] of Object.entries(s.data ?? {}))
          env[k] = Buffer.from(v as string, 'base64').toString('utf8');
      }
    }
    for (const e of container.env ?? []) env[e.name] = e.value;
    return env;
  };
  const deployments = () => docs.filter((d) => d.kind === 'Deployment');
  const main = (name: string) => find('Deployment', name).spec.template.spec.containers[0] as Obj;
  const podSpecs = () =>
    docs
      .filter((d) => d.kind === 'Deployment' || d.kind === 'Job')
      .map((d) => [`${d.kind}/${d.metadata.name}`, d.spec.template.spec] as [string, Obj]);

  before(() => {
    docs = render(OVERLAY);
  });

  it('renders the base alone and the example overlay', () => {
    expect(render('docker/kubernetes/base').length).to.be.above(10);
    for (const name of ['api', 'realtime', 'engine', 'batch']) find('Deployment', name);
    find('Job', 'stt-migrate');
    for (const name of ['api', 'realtime', 'engine']) find('Service', name);
    expect(docs.every((d) => d.kind === 'Namespace' || d.metadata.namespace === 'stt')).to.equal(true);
  });

  it('every environment variable is a setting the code reads (README Configuration)', () => {
    const known = new Set([...settingNames(), ...settingNames(transcribeCliConfig)]);
    const used = new Set<string>();
    for (const d of docs.filter((x) => x.kind === 'ConfigMap' || x.kind === 'Secret'))
      for (const k of Object.keys(d.data ?? {})) used.add(k);
    for (const [, spec] of podSpecs())
      for (const c of [...(spec.initContainers ?? []), ...spec.containers])
        for (const e of c.env ?? []) used.add(e.name);
    expect([...used].filter((n) => !known.has(n)).sort()).to.deep.equal([]);
    // The secrets an operator must provide are in the Secret, not in a ConfigMap.
    const secret = byPrefix('Secret', 'stt-secrets');
    for (const k of [
      'DATABASE_URL',
      'REDIS_URL',
      'GATEWAY_ADMIN_TOKEN',
      'GATEWAY_SESSION_TOKEN_SECRET',
      'WEBHOOK_SECRET',
      'S3_SECRET_ACCESS_KEY',
    ]) {
      expect(Object.keys(secret.data), k).to.include(k);
      expect(Object.keys(byPrefix('ConfigMap', 'stt-config').data), k).not.to.include(k);
    }
  });

  it('each process listens where its Service and probes point (ports from the config readers)', () => {
    const listens: Record<string, (c: ReturnType<typeof loadConfig>) => number> = {
      api: (c) => c.http.port,
      batch: (c) => c.http.port,
      realtime: (c) => c.realtime.port,
      engine: (c) => c.speech.engineServer.port,
    };
    for (const [name, port] of Object.entries(listens)) {
      const c = main(name);
      const config = loadConfig(envOf(c));
      expect(c.ports[0].containerPort, name).to.equal(port(config));
      const service = docs.find((d) => d.kind === 'Service' && d.metadata.name === name);
      if (service) {
        expect(service.spec.selector).to.deep.equal(find('Deployment', name).spec.selector.matchLabels);
        expect(service.spec.ports[0].targetPort).to.equal(c.ports[0].name);
      }
      // Listening on every interface of the pod, not loopback.
      const host =
        name === 'realtime'
          ? config.realtime.host
          : name === 'engine'
            ? config.speech.engineServer.host
            : config.http.host;
      expect(host, name).to.equal('0.0.0.0');
    }
    expect(find('Service', 'api').spec.ports[0].port).to.equal(8080);
    expect(find('Service', 'realtime').spec.ports[0].port).to.equal(8081);
    expect(find('Service', 'engine').spec.ports[0].port).to.equal(9000);
    // The pods reach each other by Service name.
    const env = envOf(main('api'));
    expect(env.STT_WORKER_URLS).to.equal('engine=http://engine:9000');
    expect(env.REALTIME_READY_URLS).to.equal('http://realtime:8081/readyz');
  });

  it("probes use each process's real endpoints", () => {
    const sources: Record<string, string> = {
      api: fs.readFileSync(path.join(repoRoot, 'api/routes/health/index.ts'), 'utf8'),
      realtime: fs.readFileSync(path.join(repoRoot, 'realtime/endpoints.ts'), 'utf8'),
      engine: fs.readFileSync(path.join(repoRoot, 'engine/app.ts'), 'utf8'),
    };
    sources.batch = sources.api;
    const readiness: Record<string, string> = {
      api: '/readyz/instance',
      batch: '/readyz/instance',
      realtime: '/readyz/instance',
      engine: '/readyz',
    };
    for (const [name, ready] of Object.entries(readiness)) {
      const c = main(name);
      expect(c.livenessProbe.httpGet.path, name).to.equal('/health');
      expect(c.startupProbe.httpGet.path, name).to.equal('/health');
      expect(c.readinessProbe.httpGet.path, name).to.equal(ready);
      for (const probe of [c.livenessProbe, c.readinessProbe, c.startupProbe]) {
        expect(probe.httpGet.port, name).to.equal(c.ports[0].name);
        expect(sources[name], `${name} serves ${probe.httpGet.path}`).to.include(`'${probe.httpGet.path}'`);
      }
    }
  });

  it('the ingress routes the realtime paths to realtime (WebSocket timeouts), the rest to the API, over TLS', () => {
    const rt = find('Ingress', 'realtime');
    const paths = rt.spec.rules[0].http.paths.map((p: Obj) => [p.path, p.backend.service.name]);
    expect(paths).to.deep.include([STREAM_PATH, 'realtime']);
    expect(paths).to.deep.include(['/v1/realtime', 'realtime']);
    expect(Number(rt.metadata.annotations['nginx.ingress.kubernetes.io/proxy-read-timeout'])).to.be.at.least(
      3600,
    );
    expect(Number(rt.metadata.annotations['nginx.ingress.kubernetes.io/proxy-send-timeout'])).to.be.at.least(
      3600,
    );
    const api = find('Ingress', 'api');
    expect(api.spec.rules[0].http.paths.map((p: Obj) => [p.path, p.backend.service.name])).to.deep.equal([
      ['/', 'api'],
    ]);
    const config = loadConfig(envOf(main('api')));
    const body = mib(
      api.metadata.annotations['nginx.ingress.kubernetes.io/proxy-body-size'].replace(
        /m$/,
        'Mi',
      ) /* nginx sizes: m = 1024 * 1024 */,
    );
    expect(body * 2 ** 20).to.be.above(config.speech.segment.maxUploadBytes);
    expect(
      Number(api.metadata.annotations['nginx.ingress.kubernetes.io/proxy-read-timeout']) * 1000,
    ).to.be.above(config.speech.remote.budgetMs);
    for (const ing of [rt, api]) {
      expect(ing.spec.tls[0].hosts).to.include(ing.spec.rules[0].host);
      for (const p of ing.spec.rules[0].http.paths) {
        const svc = find('Service', p.backend.service.name);
        expect(svc.spec.ports.map((x: Obj) => x.name)).to.include(p.backend.service.port.name);
      }
    }
  });

  it('realtime pods run the topology of compose and `npm run cluster` (REALTIME_ENV)', () => {
    const env = envOf(main('realtime'));
    for (const [k, v] of Object.entries(REALTIME_ENV)) expect(env[k], k).to.equal(v);
    expect(main('realtime').command).to.deep.equal(['node', ...REALTIME_NODE_FLAGS, 'dist/realtime/main.js']);
    // Segment and batch use the engine pods.
    expect(envOf(main('api')).STT_ENGINE).to.equal(undefined);
    expect(envOf(main('batch')).STT_ENGINE).to.equal(undefined);
    expect(envOf(main('api')).BATCH_WORKERS).to.equal('false');
    expect(envOf(main('batch')).BATCH_WORKERS).to.equal('true');
  });

  it('runs non-root with a read-only root filesystem; /tmp and DATA_DIR are volumes', () => {
    const dockerfile = fs.readFileSync(path.join(repoRoot, 'docker/Dockerfile'), 'utf8');
    expect(dockerfile).to.match(/^USER node$/m);
    for (const [what, spec] of podSpecs()) {
      expect(spec.securityContext.runAsNonRoot, what).to.equal(true);
      // The image's node user (base image: uid 1000).
      expect(spec.securityContext.runAsUser, what).to.equal(1000);
      for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
        expect(c.securityContext.readOnlyRootFilesystem, `${what} ${c.name}`).to.equal(true);
        expect(c.securityContext.allowPrivilegeEscalation, `${what} ${c.name}`).to.equal(false);
        expect(c.securityContext.capabilities.drop, `${what} ${c.name}`).to.deep.equal(['ALL']);
        expect(c.resources?.requests, `${what} ${c.name} requests`).to.not.equal(undefined);
        expect(c.resources?.limits?.memory, `${what} ${c.name} memory limit`).to.not.equal(undefined);
      }
      const mounts = spec.containers[0].volumeMounts.map((m: Obj) => m.mountPath);
      expect(mounts, what).to.include('/tmp');
      const env = envOf(spec.containers[0]);
      if (env.DATA_DIR && !what.startsWith('Job')) expect(mounts, what).to.include(env.DATA_DIR);
    }
  });

  it('the migration is a Job; every pod that uses the database waits for it', () => {
    const job = find('Job', 'stt-migrate').spec.template.spec;
    expect(job.containers[0].command).to.deep.equal(['node', 'dist/scripts/migrate.js']);
    expect(fs.readFileSync(path.join(repoRoot, 'scripts/migrate.ts'), 'utf8')).to.include("'--wait'");
    for (const name of ['api', 'batch', 'realtime']) {
      const spec = find('Deployment', name).spec.template.spec;
      expect(spec.initContainers[0].command, name).to.deep.equal([
        'node',
        'dist/scripts/migrate.js',
        '--wait',
      ]);
      expect(loadConfig(envOf(spec.containers[0])).migrateOnStart, name).to.equal(false);
    }
    for (const d of deployments())
      for (const c of [...(d.spec.template.spec.initContainers ?? []), ...d.spec.template.spec.containers]) {
        // The entry point: node's first argument that is not a flag.
        const entry = (c.command as string[]).slice(1).find((a) => !a.startsWith('--'))!;
        const source = entry.replace(/^dist\//, '').replace(/\.js$/, '.ts');
        expect(fs.existsSync(path.join(repoRoot, source)), `${d.metadata.name}: ${source}`).to.equal(true);
      }
  });

  it('drain timings: the grace period covers preStop + the drain each process does on SIGTERM', () => {
    const preStop = (c: Obj) => Number(c.lifecycle?.preStop?.exec?.command?.[1] ?? 0);
    const rtPod = find('Deployment', 'realtime').spec.template.spec;
    const rt = loadConfig(envOf(rtPod.containers[0])).realtime;
    // realtime/lifecycle.ts drain: closeDrainMs + 1 s, then the usage flush; 5 s to spare.
    expect(rtPod.terminationGracePeriodSeconds).to.be.at.least(
      preStop(rtPod.containers[0]) + rt.closeDrainMs / 1000 + 1 + 5,
    );
    expect(preStop(rtPod.containers[0]), 'realtime preStop').to.be.at.least(5);
    const apiPod = find('Deployment', 'api').spec.template.spec;
    const http = loadConfig(envOf(apiPod.containers[0])).http;
    expect(apiPod.terminationGracePeriodSeconds).to.be.at.least(
      preStop(apiPod.containers[0]) + (http.drainDelayMs + http.shutdownGraceMs) / 1000 + 5,
    );
    for (const name of ['api', 'realtime', 'engine']) {
      const d = find('Deployment', name);
      expect(d.spec.strategy.rollingUpdate.maxUnavailable, name).to.equal(0);
    }
  });

  it('resources follow the measured capacity (docs/benchmarks.md)', () => {
    const rt = main('realtime');
    const env = envOf(rt);
    const sessions = Number(env.REALTIME_MAX_SESSIONS);
    expect(cpu(rt.resources.requests.cpu)).to.be.at.least(sessions * CORE_PER_STREAM);
    // Measured with 5 sessions and 5 decoders: the request covers that, the limit a clip-form fallback too.
    expect([sessions, Number(env.STT_STREAM_DECODERS)]).to.deep.equal([5, 5]);
    expect(mib(rt.resources.requests.memory)).to.be.above(MIB_REALTIME_INSTANCE);
    expect(mib(rt.resources.limits.memory)).to.be.above(MIB_REALTIME_INSTANCE + MIB_CLIP_THREAD);
    const engine = main('engine');
    const threads = Number(envOf(engine).STT_THREADS);
    expect(cpu(engine.resources.requests.cpu)).to.be.at.least(threads);
    expect(mib(engine.resources.limits.memory)).to.be.above(
      (threads * MB_ONE_DECODER_PROCESS * 1e6) / 2 ** 20,
    );
  });

  it('PodDisruptionBudgets and autoscalers target the Deployments', () => {
    for (const name of ['api', 'realtime', 'engine', 'batch']) {
      const pdb = find('PodDisruptionBudget', name);
      expect(pdb.spec.selector.matchLabels).to.deep.equal(find('Deployment', name).spec.selector.matchLabels);
    }
    for (const name of ['api', 'engine']) {
      expect(find('HorizontalPodAutoscaler', name).spec.scaleTargetRef).to.include({
        kind: 'Deployment',
        name,
      });
    }
    // KEDA on the pg-boss queue the code uses, in the schema it uses.
    const batch = find('ScaledObject', 'batch');
    expect(batch.spec.scaleTargetRef.name).to.equal('batch');
    const pgTrigger = batch.spec.triggers[0];
    expect(pgTrigger.type).to.equal('postgresql');
    expect(pgTrigger.metadata.query).to.include(`FROM ${PGBOSS_SCHEMA}.job`);
    expect(pgTrigger.metadata.query).to.include(`name = '${WORKFLOW_QUEUE}'`);
    expect(Object.keys(envOf(main('batch')))).to.include(pgTrigger.metadata.connectionFromEnv);
    expect(Number(pgTrigger.metadata.targetQueryValue)).to.equal(
      loadConfig(envOf(main('batch'))).batch.workflowsPerProcess,
    );
    // KEDA on the open-sessions gauge realtime exports, below the admission limit.
    const realtime = find('ScaledObject', 'realtime');
    expect(realtime.spec.scaleTargetRef.name).to.equal('realtime');
    const prom = realtime.spec.triggers[0];
    expect(prom.type).to.equal('prometheus');
    expect(prom.metadata.query).to.include((sessionsOpen as unknown as { name: string }).name);
    expect(Number(prom.metadata.threshold)).to.be.below(
      Number(envOf(main('realtime')).REALTIME_MAX_SESSIONS),
    );
    expect(
      docs.filter((d) => d.kind === 'HorizontalPodAutoscaler').map((d) => d.metadata.name),
    ).not.to.include('realtime');
  });
});
