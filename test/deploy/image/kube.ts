/**
 * The Kubernetes test's harness (test-only): the example overlay as
 * `kubectl kustomize` renders it, adapted to what `podman kube play` can run
 * on one machine without a cluster. What changes, and why:
 *
 * - kinds podman does not run are left out: Service, Ingress, HPA, PDB, KEDA
 *   ScaledObject, Namespace (the test calls each pod on its own port instead
 *   of through Services and the Ingress);
 * - the migration Job becomes a Pod with the Job's own template (podman 4.3
 *   has no Job), played and awaited first;
 * - one replica of each Deployment, on the host network (the machine's
 *   Postgres, Redis and S3 stand-in are on loopback), each process on a
 *   free port (its port variable; no port mappings, podman refuses them there);
 *   the Service names the ConfigMap points at become loopback addresses;
 * - the Secret gets this test's database, Redis and tokens instead of the
 *   example's placeholders, and is stored with `podman secret create` as
 *   the JSON of its data (podman 4.3 stores a played Secret as YAML, then
 *   reads it back as that JSON);
 * - probes are left out: podman runs an httpGet probe as `curl` inside the
 *   container, and the image has no curl; the test calls each probe's
 *   path and port itself (kubePlay's `probes`);
 * - pods restart OnFailure, not Always: podman 4.3 applies the pod's restart
 *   policy to init containers too, and restarts one that exited 0 forever;
 *   init containers are podman's "always" kind (kept after they ran, so the
 *   test sees their exit code);
 * - the image is the one built from docker/Dockerfile, never pulled.
 *
 * Everything else (commands, environment, initContainers, securityContext,
 * read-only root, emptyDir volumes, resources) is played as rendered.
 */
import { execFileSync } from 'node:child_process';
import { parseAllDocuments, stringify } from 'yaml';
import { repoRoot } from '../../realtime/helpers.js';

type Obj = Record<string, any>;

export const OVERLAY = 'docker/kubernetes/overlays/example';
const UNPLAYABLE = new Set([
  'Service',
  'Ingress',
  'HorizontalPodAutoscaler',
  'PodDisruptionBudget',
  'ScaledObject',
  'Namespace',
]);
const INIT_TYPE = 'io.podman.annotations.init.container.type';
/** The env variable each role's port is set by (docker/kubernetes/base). */
const PORT_ENV = ['PORT', 'REALTIME_PORT', 'ENGINE_PORT'];

export function renderOverlay(dir = OVERLAY): Obj[] {
  const out = execFileSync('kubectl', ['kustomize', dir], { cwd: repoRoot, encoding: 'utf8' });
  return parseAllDocuments(out).map((d) => d.toJS() as Obj);
}

export interface PlayOptions {
  image: string;
  /** A free port per Deployment (by name): its process listens there on the host. */
  ports: Record<string, number>;
  /** Secret values (replacing the example's placeholders). */
  secrets: Record<string, string>;
  /** ConfigMap values to set (the Services' names as loopback addresses, the S3 endpoint). */
  config: Record<string, string>;
}

export interface Played {
  /** The Job's pod, as YAML for `podman kube play`. */
  migrate: string;
  /** ConfigMap, Secret and every Deployment, as YAML. */
  workloads: string;
  /** Per Deployment, each probe's path on the host port it was rewritten to. */
  probes: Record<string, { kind: string; url: string }[]>;
  deployments: string[];
  /**
   * The Secrets' data (key to base64 value, as JSON) to store with `podman secret create` before
   * playing: podman 4.3 stores a Secret it plays as YAML but reads a secretRef's back as that JSON.
   */
  secrets: { name: string; json: string }[];
}

function podSpec(spec: Obj, opts: PlayOptions, port: number | undefined): Obj {
  const s = structuredClone(spec);
  s.hostNetwork = true;
  // podman 4.3 applies the pod's restart policy to its init containers too: under `Always` (a
  // Deployment's) an init container that exits 0 is started again, forever.
  if (s.restartPolicy !== 'Never') s.restartPolicy = 'OnFailure';
  for (const c of [...(s.initContainers ?? []), ...s.containers]) {
    c.image = opts.image;
    c.imagePullPolicy = 'Never';
    delete c.startupProbe;
    delete c.livenessProbe;
    delete c.readinessProbe;
    if (port === undefined) continue;
    for (const e of c.env ?? []) if (PORT_ENV.includes(e.name)) e.value = String(port);
    // On the host network the process's own port is the pod's: podman refuses port mappings there.
    delete c.ports;
  }
  return s;
}

/** The rendered overlay as podman can play it (see the file's comment). */
export function forPodman(docs: Obj[], opts: PlayOptions): Played {
  const shared: Obj[] = [];
  const workloads: Obj[] = [];
  const jobs: Obj[] = [];
  const probes: Played['probes'] = {};
  for (const d of docs) {
    if (UNPLAYABLE.has(d.kind)) continue;
    if (d.kind === 'ConfigMap') {
      shared.push({ ...d, metadata: { name: d.metadata.name }, data: { ...d.data, ...opts.config } });
    } else if (d.kind === 'Secret') {
      const data = Object.fromEntries(
        Object.keys(d.data ?? {}).map((k) => [k, Buffer.from(opts.secrets[k] ?? '').toString('base64')]),
      );
      shared.push({ ...d, metadata: { name: d.metadata.name }, data });
    } else if (d.kind === 'Job') {
      jobs.push({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: d.metadata.name, labels: d.spec.template.metadata?.labels },
        spec: { ...podSpec(d.spec.template.spec, opts, undefined), restartPolicy: 'Never' },
      });
    } else if (d.kind === 'Deployment') {
      const name = d.metadata.name as string;
      const port = opts.ports[name];
      if (port === undefined) throw new Error(`no port for Deployment ${name}`);
      const main = d.spec.template.spec.containers[0] as Obj;
      probes[name] = ['startupProbe', 'livenessProbe', 'readinessProbe']
        .filter((k) => main[k]?.httpGet)
        .map((k) => ({ kind: k, url: `http://127.0.0.1:${port}${main[k].httpGet.path}` }));
      workloads.push({
        ...d,
        // podman 4.3 reads the init container type from the Deployment's own annotations.
        metadata: { name, labels: d.metadata.labels, annotations: { [INIT_TYPE]: 'always' } },
        spec: {
          ...d.spec,
          replicas: 1,
          template: {
            metadata: {
              ...d.spec.template.metadata,
              // podman 4.3 removes a "once" init container once it exits; "always" keeps it, so the
              // test can see it exited 0.
              annotations: {
                ...d.spec.template.metadata?.annotations,
                [INIT_TYPE]: 'always',
              },
            },
            spec: podSpec(d.spec.template.spec, opts, port),
          },
        },
      });
    } else {
      throw new Error(`${d.kind}/${d.metadata.name}: not handled by the podman harness`);
    }
  }
  // Secrets go to podman's store first (see `secrets`), not into the played YAML.
  const yaml = (xs: Obj[]) =>
    xs
      .filter((x) => x.kind !== 'Secret')
      .map((x) => stringify(x))
      .join('---\n');
  return {
    migrate: yaml([...shared, ...jobs]),
    workloads: yaml([...shared, ...workloads]),
    probes,
    deployments: workloads.map((w) => w.metadata.name as string),
    secrets: shared
      .filter((x) => x.kind === 'Secret')
      .map((x) => ({ name: x.metadata.name as string, json: JSON.stringify(x.data) })),
  };
}
