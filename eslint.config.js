import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';

/**
 * The layers (issue 24): each deployable (api, realtime, engine) and the
 * CLI build on shared/, never on each other; scripts/ (`npm start`, the
 * cluster, migrations) composes deployables and nothing imports it;
 * shared/ builds on nothing of theirs; shared/config (read by every process
 * at start) builds on nothing else of shared/ but the plan catalog.
 */
const TIERS = ['api', 'realtime', 'engine', 'cli'];
const layer = (target, from, why) => ({
  target: `./${target}`,
  from: from.map((f) => `./${f}`),
  message: why,
});
const boundaries = [
  layer(
    'shared',
    [...TIERS, 'scripts', 'test'],
    'shared/ holds what two tiers use; it must not depend on a tier.',
  ),
  ...TIERS.map((t) =>
    layer(
      t,
      [...TIERS.filter((o) => o !== t), 'scripts', 'test'],
      `${t}/ builds on shared/, never on another tier.`,
    ),
  ),
  layer('scripts', ['test'], 'scripts/ composes the tiers; tests are not part of it.'),
  {
    target: './shared/config',
    from: './shared',
    except: ['./config', './plans.ts'],
    message:
      'shared/config is read first by every process: it builds on nothing else of shared/ but the plans.',
  },
];

export default tseslint.config(
  {
    ignores: ['node_modules/**', 'dist/**', '.data/**', 'test/load/k6/**', 'api/routes/playground/static/**'],
  },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  {
    // Non-test code is linted with type information (issue 12): promises, unsafe any, needless assertions.
    files: ['**/*.ts'],
    ignores: ['test/**'],
    extends: [...tseslint.configs.recommendedTypeChecked],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['**/*.ts'],
    ignores: ['test/**'],
    plugins: { 'import-x': importX },
    settings: { 'import-x/resolver-next': [createTypeScriptImportResolver()] },
    rules: { 'import-x/no-restricted-paths': ['error', { zones: boundaries }] },
  },
  {
    // chai assertions such as `expect(x).to.be.true` are expressions by design.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-unused-expressions': 'off' },
  },
);
