/**
 * The configuration surface: the variables README.md's "Configuration" tables
 * list are exactly the variables shared/config reads, no more, no fewer.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { loadConfig, SECRET_SETTINGS, settingNames } from '../../shared/config/index.js';
import { transcribeCliConfig } from '../../shared/config/speech.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NAME = /^[A-Z][A-Z0-9_]*$/;

/** Names in the first column of every `| variable | … |` table of the README's Configuration section. */
function readmeVariables(): string[] {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Configuration\n');
  expect(start, 'README.md has a "## Configuration" section').to.be.greaterThan(-1);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  const names: string[] = [];
  let inTable = false;
  for (const line of section.split('\n')) {
    if (!line.startsWith('|')) {
      inTable = false;
      continue;
    }
    const first = line.split('|')[1].trim();
    if (/^variable$/i.test(first)) inTable = true;
    else if (inTable && !/^-+$/.test(first)) {
      const inCell = [...first.matchAll(/`([^`]+)`/g)].map((m) => m[1]);
      expect(inCell, `README row without a variable name: ${line}`).to.not.be.empty;
      for (const n of inCell) {
        expect(n, `README row names something other than a variable: ${line}`).to.match(NAME);
        names.push(n);
      }
    }
  }
  return names;
}

/** Every name the config readers look up over an empty environment, the client commands' included. */
function namesRead(): Set<string> {
  return new Set([...settingNames(), ...settingNames(transcribeCliConfig)]);
}

/** Every name written as a reader's argument in shared/config (also those a run over an empty environment skips). */
function namesInSource(): Set<string> {
  const dir = path.join(ROOT, 'shared/config');
  const names = new Set<string>();
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
    const src = fs.readFileSync(path.join(dir, f), 'utf8');
    for (const m of src.matchAll(/\benv,\s*'([A-Z][A-Z0-9_]*)'/g)) names.add(m[1]);
  }
  return names;
}

describe('unit: configuration surface', () => {
  it('README.md lists each variable shared/config reads exactly once, and nothing else', () => {
    const listed = readmeVariables();
    const dupes = listed.filter((n, i) => listed.indexOf(n) !== i);
    expect(dupes, 'listed twice in README.md').to.deep.equal([]);
    const read = new Set([...namesRead(), ...namesInSource()]);
    const documented = new Set(listed);
    expect(
      [...read].filter((n) => !documented.has(n)).sort(),
      'read by shared/config, missing from README.md',
    ).to.deep.equal([]);
    expect(
      [...documented].filter((n) => !read.has(n)).sort(),
      'in README.md, not read by shared/config',
    ).to.deep.equal([]);
  });

  it('names only variables it reads as secrets', () => {
    const read = new Set([...namesRead(), ...namesInSource()]);
    expect(SECRET_SETTINGS.filter((n) => !read.has(n))).to.deep.equal([]);
  });

  // 90 until issue 22 added BATCH_MAX_RUNNING_PER_TENANT (a tenant-fairness policy operators set);
  // 97 since issue 36's DISK_FLOOR_MB, issue 41's REALTIME_OWNER_SHARE, SEGMENT_KEY_SHARE,
  // BATCH_RETENTION_DAYS and BATCH_MAX_UNFINISHED_PER_TENANT, and issue 39's HTTPS_PORT.
  it('stays an operator surface: at most 97 variables', () => {
    expect(new Set([...namesRead(), ...namesInSource()]).size).to.be.at.most(97);
  });

  it('reads every variable from the environment it is given, never from process.env', () => {
    const read = namesRead();
    const before = { ...process.env };
    try {
      for (const n of read) process.env[n] = 'not a valid value for anything';
      expect(() => loadConfig({})).to.not.throw();
    } finally {
      for (const n of read) if (!(n in before)) delete process.env[n];
      Object.assign(process.env, before);
    }
  });

  it('lays overrides over the environment, deep, and derives the readiness URL of a proxied realtime process', () => {
    const c = loadConfig(
      { REALTIME_LEASE_TTL_MS: '3000' },
      { realtime: { tickMs: 100, upstreamProxyTarget: '127.0.0.1:9' } },
    );
    expect(c.realtime.tickMs).to.equal(100);
    expect(c.realtime.leaseTtlMs).to.equal(3000);
    expect(c.realtime.leaseRenewMs).to.equal(1000);
    expect(c.ledger.leaseTtlMs).to.equal(3000);
    expect(c.realtime.readyUrls).to.deep.equal(['http://127.0.0.1:9/readyz']);
    expect(loadConfig({}).realtime.tickMs, 'a later load is untouched').to.equal(1000);
  });
});
