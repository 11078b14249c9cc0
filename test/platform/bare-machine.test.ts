/**
 * `npm test` on a machine with no Postgres and no Redis (issue 39): a real
 * run of two database-and-Redis test files, in parallel workers as `npm
 * test` runs them, inside a network namespace of its own where nothing
 * answers on 127.0.0.1:5432 or :6379 and no TEST_* variable is set. The
 * suite starts embedded Postgres and a redis-server itself
 * (test/helpers/localServices.ts), the tests pass against them, and nothing
 * is left running. Needs root for the namespace (CI and the image build
 * machine run as root); skipped otherwise.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import os from 'node:os';
import { expect } from 'chai';
import { repoRoot } from '../batch/helpers.js';

describe('a machine without Postgres and Redis: the suite brings its own', function () {
  this.timeout(240_000);

  it('runs database and Redis tests in a network namespace where nothing answers, and cleans up', function () {
    if (os.userInfo().uid !== 0) this.skip();
    const env = { ...process.env };
    delete env.TEST_DATABASE_URL;
    delete env.TEST_REDIS_URL;
    const script = [
      'ip link set lo up',
      // Nothing of the machine's answers here.
      '! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null',
      '! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null',
      'npx mocha --parallel --jobs 2 test/platform/admin.test.ts test/platform/limits.test.ts',
    ].join(' && ');
    const run = spawnSync('unshare', ['-n', 'bash', '-c', script], { cwd: repoRoot, env, encoding: 'utf8' });
    const out = `${run.stdout}\n${run.stderr}`;
    expect(run.status, out.slice(-3000)).to.equal(0);
    expect(out).to.match(/started embedded Postgres \(\d+\) and redis-server \(\d+\) for the tests/);
    expect(out)
      .to.match(/\d+ passing/)
      .and.not.match(/failing/);
    const left = execFileSync(
      'bash',
      ['-c', "ps -eo args | grep -E 'stt-test-pg-|redis-server --port' | grep -v grep || true"],
      {
        encoding: 'utf8',
      },
    );
    expect(left.trim()).to.equal('');
  });
});
