/**
 * The layers hold (issue 24): eslint.config.js's boundary zones
 * (import-x/no-restricted-paths) find no import across them in the code, and
 * they do catch one: a shared module importing a tier, a tier importing
 * another, shared/config importing the rest of shared/.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { ESLint } from 'eslint';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('unit: code lives in its layer', function () {
  this.timeout(60_000);
  // Only the boundary rule, from the project's own config (no type-aware rules: seconds, not minutes).
  const eslint = new ESLint({
    cwd: root,
    ruleFilter: ({ ruleId }) => ruleId === 'import-x/no-restricted-paths',
  });

  it('no import crosses a layer', async () => {
    const results = await eslint.lintFiles(['api', 'realtime', 'engine', 'shared', 'scripts', 'cli']);
    const found = results.flatMap((r) =>
      r.messages.map((m) => `${path.relative(root, r.filePath)}:${m.line} ${m.message}`),
    );
    expect(found).to.deep.equal([]);
  });

  for (const [file, spec] of [
    ['shared/stt/zz.ts', '../../realtime/server.js'],
    ['realtime/zz.ts', '../api/app.js'],
    ['api/zz.ts', '../engine/app.js'],
    ['shared/config/zz.ts', '../audio/pcm.js'],
  ]) {
    it(`refuses ${file} importing ${spec}`, async () => {
      // A real file for a moment: the type-aware parser only reads files of the project.
      const full = path.join(root, file.replace('zz.ts', `zz-layers-${process.pid}.ts`));
      fs.writeFileSync(full, `import * as m from '${spec}';\nexport const x = m;\n`);
      try {
        const [r] = await eslint.lintFiles([full]);
        expect(r.messages.map((m) => m.ruleId)).to.include('import-x/no-restricted-paths');
      } finally {
        fs.rmSync(full, { force: true });
      }
    });
  }

  it('no non-test source file is over 450 lines', () => {
    const long: string[] = [];
    const walk = (dir: string) => {
      for (const e of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
        const rel = path.join(dir, e.name);
        if (e.isDirectory()) walk(rel);
        else if (e.name.endsWith('.ts')) {
          const lines = fs.readFileSync(path.join(root, rel), 'utf8').split('\n').length - 1;
          if (lines > 450) long.push(`${rel}: ${lines}`);
        }
      }
    };
    for (const d of ['api', 'realtime', 'engine', 'shared', 'scripts', 'cli']) walk(d);
    expect(long).to.deep.equal([]);
  });
});
