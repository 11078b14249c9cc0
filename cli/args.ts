/**
 * Command-line options every client command takes: `--url` (default
 * STT_BASE_URL), `--key` (default STT_API_KEY) and `--help`, parsed with the
 * command's own options by node:util's parseArgs.
 */
import { parseArgs } from 'node:util';
import { transcribeCliConfig } from '../shared/config/speech.js';

type OptionSpec = { type: 'string'; default?: string } | { type: 'boolean'; default?: boolean };

const common = (baseUrl: string) =>
  ({
    url: { type: 'string', default: baseUrl },
    key: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  }) as const;

type Parsed<O> = ReturnType<
  typeof parseArgs<{ allowPositionals: true; options: ReturnType<typeof common> & O }>
>;

/**
 * Parses argv with the common options and `own`; `usage` prints help (and
 * exits) when asked, or with a message when no API key is given.
 */
export function parseCliArgs<O extends Record<string, OptionSpec>>(
  own: O,
  usage: (problem?: string) => never,
): Parsed<O> & { key: string } {
  const defaults = transcribeCliConfig();
  const parsed = parseArgs({ allowPositionals: true, options: { ...common(defaults.baseUrl), ...own } });
  const values = parsed.values as { help?: boolean; key?: string };
  if (values.help) usage();
  const key = values.key ?? defaults.apiKey;
  if (!key) usage('an API key is required (--key or STT_API_KEY)');
  return { ...parsed, key };
}
