/**
 * The repository stands alone: a fresh `git clone` of what is committed, with
 * nothing beside it, carries the interface, the test clips and their
 * references, and its tests find them there. The clone is made into an empty
 * temporary directory (no ../shared), gets this checkout's node_modules, and
 * runs the fast lane plus a test that reads the recorded clips.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { REPO_ROOT } from '../speech/helpers.js';

/** Paths that climb out of the repository to the workspace's shared folder. */
const OUTSIDE = /\.\.\/shared\/(test-audio|spec)\b/;

describe('a fresh clone with nothing beside it', function () {
  this.timeout(300_000);
  let dir: string;
  let clone: string;

  before(function () {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-clone-'));
    clone = path.join(dir, 'repo');
    execFileSync('git', ['clone', '--quiet', '--no-hardlinks', REPO_ROOT, clone]);
    fs.symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(clone, 'node_modules'));
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('carries the interface, the recorded clips and their attribution', function () {
    expect(fs.existsSync(path.join(dir, 'shared')), 'nothing beside the clone').to.equal(false);
    expect(fs.readFileSync(path.join(clone, 'docs/interface.md'), 'utf8')).to.match(/^# /m);
    const refs = fs.readFileSync(path.join(clone, 'test/audio/refs.tsv'), 'utf8').trim().split('\n').slice(1);
    expect(refs.length).to.be.at.least(6);
    for (const row of refs)
      expect(fs.existsSync(path.join(clone, 'test/audio', row.split('\t')[0])), row).to.equal(true);
    expect(fs.readFileSync(path.join(clone, 'test/audio/README.md'), 'utf8')).to.include('licence');
  });

  it('names nothing outside itself in code, tests or docs', function () {
    const files = execFileSync('git', ['ls-files'], { cwd: clone, encoding: 'utf8' })
      .split('\n')
      .filter((f) => /\.(ts|js|md|sh|json|yaml|yml|cfg)$/.test(f));
    const offenders = files.filter((f) => OUTSIDE.test(fs.readFileSync(path.join(clone, f), 'utf8')));
    expect(offenders).to.deep.equal([]);
  });

  it('runs the fast lane and a test that reads the clips', function () {
    const run = spawnSync(
      process.execPath,
      [
        path.join(clone, 'node_modules/mocha/bin/mocha.js'),
        'test/unit/**/*.test.ts',
        'test/vad/batch.test.ts',
      ],
      { cwd: clone, encoding: 'utf8', timeout: 240_000 },
    );
    expect(run.status, run.stdout.slice(-3000) + run.stderr.slice(-3000)).to.equal(0);
    expect(run.stdout).to.match(/\d+ passing/);
  });
});
