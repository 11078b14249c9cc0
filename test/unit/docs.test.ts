/**
 * The docs stay a reference: every docs/**\/*.md file is at most 600 lines,
 * and every relative link in README.md and the docs names a file that exists.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const MAX_LINES = 600;

/** Every .md file under docs/, as paths relative to the repository root. */
function docsFiles(dir = 'docs'): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
    const rel = path.join(dir, entry.name);
    if (entry.isDirectory()) files.push(...docsFiles(rel));
    else if (entry.name.endsWith('.md')) files.push(rel);
  }
  return files.sort();
}

/** Targets of inline Markdown links and images, `[text](target)`, outside code spans and blocks. */
function linkTargets(markdown: string): string[] {
  const prose = markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]);
}

/** A link that points into this repository (no scheme, not protocol-relative, not only an anchor). */
function isRelative(target: string): boolean {
  return !/^[a-z][a-z0-9+.-]*:/i.test(target) && !target.startsWith('//') && !target.startsWith('#');
}

describe('docs', () => {
  const files = docsFiles();

  it('finds the docs', () => {
    expect(files).to.include('docs/decisions.md');
    expect(files).to.include('docs/benchmarks.md');
  });

  it(`keeps every docs/**/*.md file at most ${MAX_LINES} lines`, () => {
    const tooLong = files
      .map((file) => ({ file, lines: fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n').length }))
      // A final newline does not make a line.
      .map(({ file, lines }) => ({ file, lines: lines - 1 }))
      .filter(({ lines }) => lines > MAX_LINES)
      .map(({ file, lines }) => `${file}: ${lines} lines`);
    expect(tooLong).to.deep.equal([]);
  });

  it('links only to files that exist (README.md and docs/**/*.md)', () => {
    const broken: string[] = [];
    let checked = 0;
    for (const file of ['README.md', ...files]) {
      const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
      for (const target of linkTargets(text)) {
        if (!isRelative(target)) continue;
        const withoutAnchor = decodeURIComponent(target.split('#')[0].split('?')[0]);
        const resolved = path.resolve(path.dirname(path.join(ROOT, file)), withoutAnchor);
        checked += 1;
        if (!fs.existsSync(resolved)) broken.push(`${file}: ${target}`);
      }
    }
    expect(checked, 'relative links found').to.be.greaterThan(0);
    expect(broken).to.deep.equal([]);
  });

  it('sees a broken link as broken', () => {
    expect(linkTargets('see [x](docs/missing.md) and `[y](z.md)`')).to.deep.equal(['docs/missing.md']);
    expect(isRelative('https://example.com')).to.equal(false);
    expect(isRelative('#anchor')).to.equal(false);
    expect(isRelative('../benchmarks.md#speech')).to.equal(true);
  });
});
