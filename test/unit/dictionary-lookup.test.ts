/**
 * The prompt compiler's dictionary (shared/stt/bias/pronounce.ts): a binary
 * search over the files as read gives what a map of every entry gives, for
 * every word of Debian's CMU dictionary, variants and the first file's
 * words included.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { expect } from 'chai';
import { DictionaryLookup } from '../../shared/stt/bias/pronounce.js';

const CMU = '/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict';

/** What the lookup must give: every entry in a map, the first file's marked. */
function naive(files: string[]): Map<string, { first: boolean; prons: string[][] }> {
  const map = new Map<string, { first: boolean; prons: string[][] }>();
  files.forEach((file, i) => {
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
      const parts = line.trim().split(/\s+/);
      if (parts.length < 2) continue;
      const word = parts[0].replace(/\(\d+\)$/, '');
      const e = map.get(word) ?? { first: i === 0, prons: [] };
      e.prons.push(parts.slice(1));
      map.set(word, e);
    }
  });
  return map;
}

describe('unit: the prompt compiler dictionary', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dict-test-'));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('finds variants across both files in order, the first file marked, and nothing else', () => {
    const a = path.join(dir, 'a.dict');
    const b = path.join(dir, 'b.dict');
    fs.writeFileSync(a, 'read R EH D\nread(2) R IY D\nzebra Z IY B R AH\nbroken\n');
    fs.writeFileSync(b, "read(3) R EY D\nkubectl K UW B K AH N T R OW L\nnaïve N AY IY V\n'cause K AH Z");
    const d = new DictionaryLookup([a, b]);
    expect(d.get('read')).to.deep.equal([
      ['R', 'EH', 'D'],
      ['R', 'IY', 'D'],
      ['R', 'EY', 'D'],
    ]);
    expect(d.inFirst('read')).to.equal(true);
    expect(d.inFirst('kubectl')).to.equal(false);
    expect(d.get('kubectl')).to.deep.equal([['K', 'UW', 'B', 'K', 'AH', 'N', 'T', 'R', 'OW', 'L']]);
    expect(d.get('naïve')).to.deep.equal([['N', 'AY', 'IY', 'V']]);
    expect(d.get("'cause")).to.deep.equal([['K', 'AH', 'Z']]);
    for (const w of ['broken', 'rea', 'reads', 'zebras', '', 'a', 'zz'])
      expect(d.get(w), w).to.equal(undefined);
    // The file a word is first found in (the lexicon's searched words, its tail, the rest).
    const c = path.join(dir, 'c.dict');
    fs.writeFileSync(c, 'zebra(2) Z EH B R AH\nokapi OW K AA P IY\n');
    const three = new DictionaryLookup([a, b, c]);
    expect(['read', 'kubectl', 'okapi', 'zebra', 'zz'].map((w) => three.fileOf(w))).to.deep.equal([
      0, 1, 2, 0, -1,
    ]);
  });

  it('gives what a map of every entry gives for every word of the CMU dictionary (split in two files)', () => {
    const lines = fs.readFileSync(CMU, 'utf8').split('\n');
    // Every third line in the first file, the rest in the second: a word's variants fall in both.
    const first = path.join(dir, 'first.dict');
    const rest = path.join(dir, 'rest.dict');
    fs.writeFileSync(first, lines.filter((_, i) => i % 3 === 0).join('\n'));
    fs.writeFileSync(rest, lines.filter((_, i) => i % 3 !== 0).join('\n'));
    const want = naive([first, rest]);
    const d = new DictionaryLookup([first, rest]);
    expect(want.size).to.be.above(120_000);
    for (const [word, e] of want) {
      expect(d.get(word), word).to.deep.equal(e.prons);
      expect(d.inFirst(word), word).to.equal(e.first);
    }
  });

  it('loads the CMU dictionary without growing the heap by a string per word', () => {
    // In a fresh process: the heap V8 holds after the load (a sort over a string per word left 35-46 MiB).
    const script = `
      import { DictionaryLookup } from ${JSON.stringify(new URL('../../shared/stt/bias/pronounce.ts', import.meta.url).href)};
      const before = process.memoryUsage().heapTotal;
      const d = new DictionaryLookup([${JSON.stringify(CMU)}]);
      if (!d.get('zebra')) throw new Error('no zebra');
      console.log(JSON.stringify({ grown: process.memoryUsage().heapTotal - before }));`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      encoding: 'utf8',
    });
    const { grown } = JSON.parse(out.trim().split('\n').pop()!) as { grown: number };
    expect(grown / 2 ** 20).to.be.below(16);
  });
});
