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
import { repoRoot } from '../realtime/helpers.js';
import { startCluster, type Cluster, type ClusterOptions } from '../../scripts/cluster/index.js';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '../helpers/db.js';

const run = promisify(execFile);

let built: Promise<void> | undefined;
/** `tsc` into dist/ once per test run (incremental: the build info lives in dist/, so a removed dist/ is rebuilt whole). */
export function buildDist(): Promise<void> {
  built ??= run(
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
