/**
 * The image test's harness (test-only; the Dockerfile knows nothing of it):
 * podman with this directory's containers.conf, the local stand-in for the
 * Dockerfile's base image (base.sh), the image built from docker/Dockerfile
 * once per content hash, and containers of it on the host network.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from '../../realtime/helpers.js';
import { withLock } from '../../helpers/lock.js';

const run = promisify(execFile);
const HERE = path.join(repoRoot, 'test/deploy/image');

/** podman's environment: the test's containers.conf (runtime, cgroups, no default ulimits). */
export const PODMAN_ENV: NodeJS.ProcessEnv = {
  ...process.env,
  CONTAINERS_CONF: path.join(HERE, 'containers.conf'),
};

export async function podman(args: string[], timeoutMs = 120_000): Promise<string> {
  const { stdout } = await run('podman', args, {
    env: PODMAN_ENV,
    timeout: timeoutMs,
    maxBuffer: 64 * 1024 * 1024,
  });
  return stdout.trim();
}

/** podman's exit code and output, without throwing on a non-zero exit. */
export function podmanStatus(
  args: string[],
  timeoutMs = 120_000,
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn('podman', args, { env: PODMAN_ENV, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b));
    child.stderr.on('data', (b: Buffer) => (out += b));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

export function podmanInstalled(): boolean {
  return ['/usr/bin/podman', '/usr/local/bin/podman'].some((p) => fs.existsSync(p));
}

/** What goes into the image: the Dockerfile, the manifests, the sources it compiles (not the tests). */
const IMAGE_INPUTS = [
  'docker/Dockerfile',
  '.dockerignore',
  'package.json',
  'package-lock.json',
  'tsconfig.json',
];
const SOURCE_DIRS = ['api', 'realtime', 'engine', 'shared', 'migrations', 'scripts'];

function listFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(path.join(repoRoot, dir), { withFileTypes: true })) {
    const rel = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...listFiles(rel));
    else if (e.isFile()) out.push(rel);
  }
  return out;
}

/** Content hash of the image's inputs and the base image it is built on. */
export async function imageHash(): Promise<string> {
  const h = createHash('sha256');
  h.update(await podman(['image', 'inspect', '--format', '{{.Id}}', 'node:24-bookworm-slim']));
  const files = [...IMAGE_INPUTS, ...SOURCE_DIRS.flatMap(listFiles)].sort();
  for (const f of files) {
    h.update(f + '\0');
    h.update(fs.readFileSync(path.join(repoRoot, f)));
  }
  return h.digest('hex').slice(0, 16);
}

export const IMAGE_REPO = 'localhost/stt-service';

/**
 * The image of the current sources: the base stand-in (base.sh, kept between
 * runs), then `podman build` unless an image of this content hash exists
 * (podman's layer cache makes a rebuild after a source change short). Older
 * test tags are removed after a build.
 */
export function ensureImage(log: (line: string) => void = () => {}): Promise<string> {
  return withLock('image', () => buildImage(log));
}

async function buildImage(log: (line: string) => void): Promise<string> {
  const base = await run('bash', [path.join(HERE, 'base.sh')], { env: PODMAN_ENV, timeout: 15 * 60_000 });
  log(base.stdout.trim());
  const tag = `${IMAGE_REPO}:test-${await imageHash()}`;
  if ((await podmanStatus(['image', 'exists', tag])).code === 0) {
    log(`image ${tag} exists`);
    return tag;
  }
  const t0 = Date.now();
  // --network host: the build reaches the npm registry and the apt mirror as this machine does.
  const build = await podmanStatus(
    ['build', '--pull=never', '--network', 'host', '-f', 'docker/Dockerfile', '-t', tag, repoRoot],
    30 * 60_000,
  );
  if (build.code !== 0) throw new Error(`podman build failed:\n${build.out.slice(-4000)}`);
  log(`built ${tag} in ${Math.round((Date.now() - t0) / 1000)} s`);
  const old = (await podman(['images', '--format', '{{.Repository}}:{{.Tag}}', IMAGE_REPO]))
    .split('\n')
    .filter((t) => t.startsWith(`${IMAGE_REPO}:test-`) && t !== tag);
  if (old.length) await podmanStatus(['rmi', ...old]);
  return tag;
}

/** Size of an image in bytes (podman's uncompressed size). */
export async function imageSize(tag: string): Promise<number> {
  return Number(await podman(['image', 'inspect', '--format', '{{.Size}}', tag]));
}

export interface Container {
  name: string;
  /** The last lines of its output. */
  logs(lines?: number): Promise<string>;
  inspect<T = unknown>(format: string): Promise<T>;
  exec(cmd: string[]): Promise<{ code: number | null; out: string }>;
  remove(): Promise<void>;
}

export interface RunOptions {
  image: string;
  command: string[];
  env: Record<string, string>;
  /** A named volume mounted at /data (created when missing). */
  dataVolume?: string;
  /** Run attached and return when it exits (the migration); default: detached. */
  attached?: boolean;
  /** Seconds `podman stop` waits after SIGTERM before SIGKILL. */
  stopTimeout?: number;
}

export const uniqueName = (prefix: string) => `${prefix}-${randomBytes(3).toString('hex')}`;

/**
 * A container as an orchestrator would run it: the image's user (node), a
 * read-only root filesystem, a tmpfs for /tmp, a volume for /data, the host's
 * network (the machine's Postgres and Redis on loopback).
 */
export async function runContainer(
  name: string,
  o: RunOptions,
): Promise<Container & { exitCode?: number | null; out?: string }> {
  const args = ['run', '--name', name, '--network', 'host', '--read-only', '--tmpfs', '/tmp:rw,size=256m'];
  if (o.dataVolume) args.push('--volume', `${o.dataVolume}:/data`);
  if (o.stopTimeout !== undefined) args.push('--stop-timeout', String(o.stopTimeout));
  for (const [k, v] of Object.entries(o.env)) args.push('--env', `${k}=${v}`);
  if (!o.attached) args.splice(1, 0, '--detach');
  args.push(o.image, ...o.command);
  const handle: Container = {
    name,
    logs: async (lines = 40) => (await podmanStatus(['logs', '--tail', String(lines), name])).out,
    inspect: async <T>(format: string) =>
      JSON.parse(await podman(['inspect', '--format', format, name])) as T,
    exec: (cmd) => podmanStatus(['exec', name, ...cmd]),
    remove: async () => {
      await podmanStatus(['rm', '--force', '--time', '0', name]);
    },
  };
  const res = await podmanStatus(args, 10 * 60_000);
  if (o.attached) return { ...handle, exitCode: res.code, out: res.out };
  if (res.code !== 0) throw new Error(`podman run ${name} failed:\n${res.out}`);
  return handle;
}
