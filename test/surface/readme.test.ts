/**
 * The README's walk-through, run as written: its first shell block is the
 * start command (run here through npm start's code path with the block's own
 * settings, a fresh DATA_DIR and embedded Postgres, and free ports), its second
 * block runs in bash from the repository root. Only the values that must differ
 * on a test machine are substituted, and each must be found, so the README
 * cannot drift from what works.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { freePort } from '../../scripts/cluster/processes.js';
import path from 'node:path';
import { expect } from 'chai';
import { REPO_ROOT, startService, type RunningService } from '../helpers/service.js';

function walkThroughBlocks(): string[] {
  const readme = fs.readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
  const section = readme.split(/^## Walk-through$/m)[1].split(/^## /m)[0];
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
}

function substitute(text: string, from: string, to: string): string {
  expect(text, `the walk-through no longer contains ${from}`).to.include(from);
  return text.split(from).join(to);
}

describe('README walk-through, run as written', function () {
  this.timeout(600_000);
  let svc: RunningService | undefined;
  after(() => svc?.stop());

  it('every command works in order against a fresh start', async () => {
    const [startBlock, script] = walkThroughBlocks();
    const startLine = startBlock
      .split('\n')
      .filter((l) => l.trim() && !l.startsWith('#'))
      .join('\n');
    const m = /^((?:[A-Z_]+=\S+ )*)npm start$/.exec(startLine);
    expect(m, `start block: ${startLine}`).to.not.equal(null);
    const env = Object.fromEntries(
      m![1]
        .trim()
        .split(/\s+/)
        .filter(Boolean)
        .map((a) => a.split('=')),
    );
    // The README's settings, plus generous decode limits: the test machine is shared and loaded.
    svc = await startService({ ...env, LOG_LEVEL: 'error', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });

    const filePort = await freePort();
    let body = substitute(script, 'BASE=http://localhost:8080', `BASE=${svc.baseUrl}`);
    body = substitute(body, './.data/secrets.json', path.join(svc.dataDir, 'secrets.json'));
    body = substitute(body, '8099', String(filePort));

    const run = spawn('bash', ['-c', `set -euo pipefail\n${body}`], {
      cwd: REPO_ROOT,
      env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? '/root' },
    });
    let out = '';
    let err = '';
    run.stdout.on('data', (d) => (out += d));
    run.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((r) => run.on('close', r));
    expect(code, `${out}\n---\n${err}`).to.equal(0);

    const say = `${out}\n---\n${err}`;
    expect(out, say).to.include('"plan":"free"'); // the catalog
    expect(out, say).to.match(/"token":"rt_/); // the session token
    expect(out, say).to.match(/"text":"[^"]*country/i); // the segment endpoint
    expect(out, say).to.match(/#0 \d+:\d\d\.\d /); // npm run stream
    expect(out, say).to.match(/job cf_[0-9a-f]{64}: complete/); // the batch job, polled to the end
    expect(out, say).to.match(/"segments"/);
    // Usage: the realtime session was metered (a connection npm run stream opened again after a close
    // before its session.created, uWebSockets.js 20.57, may add a session of 0 s).
    expect(out, say).to.match(/"sessions":[12][,}]/);
    expect(out, say).to.match(/"ownerId":"acme"/);
    expect(out, say).to.match(/"status":"revoked"/); // the key captured at issue was revoked
    expect(out + err, say).not.to.match(/undefined|not found/i);
    // The file server it started was stopped.
    const stillServing = await fetch(`http://127.0.0.1:${filePort}/`).then(
      () => true,
      () => false,
    );
    expect(stillServing).to.equal(false);
  });
});
