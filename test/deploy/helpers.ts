/**
 * The deployment test's fixtures: the build output (compiled once per test
 * run), the scaled topology of `npm run cluster` on loopback, and small
 * clients that go through its load balancer.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import net from 'node:net';
import { AUDIO_DIR, bearer, connect, readPcm, repoRoot, silence } from '../realtime/helpers.js';
import { startCluster, type Cluster, type ClusterOptions } from '../../scripts/cluster/index.js';
import { withLock } from '../helpers/lock.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/db.js';

const run = promisify(execFile);

let built: Promise<void> | undefined;
/** `tsc` into dist/ once per test run (incremental: the build info lives in dist/, so a removed dist/ is rebuilt whole). */
export function buildDist(): Promise<void> {
  built ??= withLock('dist', () =>
    run(
      process.execPath,
      [
        path.join(repoRoot, 'node_modules/typescript/bin/tsc'),
        '-p',
        'tsconfig.json',
        '--incremental',
        '--tsBuildInfoFile',
        'dist/.tsbuildinfo',
      ],
      { cwd: repoRoot, maxBuffer: 16 * 1024 * 1024 },
    ),
  ).then(() => undefined);
  return built;
}

export const ADMIN_TOKEN = 'deploy-admin-' + randomBytes(12).toString('hex');
export const SESSION_SECRET = 'deploy-session-' + randomBytes(12).toString('hex');
export const WEBHOOK_SECRET = 'whsec_' + randomBytes(32).toString('base64');

export interface DeployedCluster {
  cluster: Cluster;
  db: TestDatabase;
  workDir: string;
  close(): Promise<void>;
}

/** The topology of `npm run cluster` on a fresh database (2 API, 2 realtime, `engines` engines by default). */
export async function deployCluster(
  opts: Partial<ClusterOptions> & { env?: Record<string, string> } = {},
): Promise<DeployedCluster> {
  await buildDist();
  const db = await createTestDatabase('stt_deploy');
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-deploy-'));
  let cluster: Cluster;
  try {
    cluster = await startCluster({
      port: 0,
      apis: 2,
      realtimes: 2,
      engines: 2,
      databaseUrl: db.url,
      redisUrl: TEST_REDIS_URL,
      adminToken: ADMIN_TOKEN,
      sessionSecret: SESSION_SECRET,
      webhookSecret: WEBHOOK_SECRET,
      workDir,
      distDir: path.join(repoRoot, 'dist'),
      ...opts,
      env: { LOG_LEVEL: 'info', ...opts.env },
    });
  } catch (err) {
    await db.drop();
    throw err;
  }
  return {
    cluster,
    db,
    workDir,
    async close() {
      await cluster.stop();
      await db.drop();
      fs.rmSync(workDir, { recursive: true, force: true });
    },
  };
}

/** Log lines of a process at level error (50) or above. */
export function errorLines(lines: string[]): string[] {
  return lines.filter((l) => {
    try {
      return (JSON.parse(l) as { level?: number }).level! >= 50;
    } catch {
      return /\b(error|fatal)\b/i.test(l) && !l.startsWith('[NOTICE]');
    }
  });
}

/** Sum of a Prometheus counter (all label sets) in a /metrics text. */
export function counterSum(metricsText: string, name: string): number {
  let sum = 0;
  for (const line of metricsText.split('\n')) {
    if (line.startsWith(name + '{') || line.startsWith(name + ' ')) sum += Number(line.split(' ').pop());
  }
  return sum;
}

const COMPLETED = 'conversation.item.input_audio_transcription.completed';

/** jfk.wav and a little silence streamed over `wsUrl` (the native stream): the text of its completed utterances. */
export async function realtimeUtteranceText(wsUrl: string, key: string): Promise<string> {
  const s = await connect(wsUrl, bearer(key));
  await s.next('session.created');
  await s.stream(Buffer.concat([silence(300), readPcm('jfk.wav'), silence(1200)]), { pace: 4 });
  await s.finals(60_000);
  s.ws.close(1000);
  await s.closed;
  return s
    .of(COMPLETED)
    .map((e) => e.text as string)
    .join(' ');
}

/** A TCP forwarder on `listenHost` (port 0: any free port) to `target`. */
export function tcpForward(
  listenHost: string,
  target: { host: string; port: number },
  port = 0,
): Promise<net.Server> {
  const server = net.createServer((c) => {
    const u = net.connect(target.port, target.host);
    c.pipe(u).pipe(c);
    c.on('error', () => u.destroy());
    u.on('error', () => c.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, listenHost, () => resolve(server));
  });
}

/** Through the API at `baseUrl`: a pro key issued with the admin token, and jfk.wav's text from the segment endpoint. */
export async function issueKeyAndTranscribe(
  baseUrl: string,
  ownerId: string,
): Promise<{ key: string; status: number; text: string; body: unknown }> {
  const res = await fetch(`${baseUrl}/v1/external-transcription/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ owner_id: ownerId, plan: 'pro' }),
  });
  const issued = (await res.json()) as { data?: { key: string } };
  if (res.status !== 201 && res.status !== 200)
    throw new Error(`key: ${res.status} ${JSON.stringify(issued)}`);
  const key = issued.data!.key;
  const form = new FormData();
  form.set(
    'file',
    new Blob([fs.readFileSync(path.join(AUDIO_DIR, 'jfk.wav'))], { type: 'audio/wav' }),
    'jfk.wav',
  );
  const t = await fetch(`${baseUrl}/v1/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
  const body = (await t.json()) as { text?: string };
  return { key, status: t.status, text: body.text ?? '', body };
}
