/**
 * Language hints arrive as ISO-639-1 codes (`en`), regional tags (`en-US`,
 * `zh-cn`), `auto`, or English names (OpenAI-compatible servers answer
 * `"language": "english"`). Everything is reduced to the two-letter code.
 */
const NAMES: Record<string, string> = {
  english: 'en',
  chinese: 'zh',
  mandarin: 'zh',
  cantonese: 'zh',
  spanish: 'es',
  french: 'fr',
  german: 'de',
  italian: 'it',
  portuguese: 'pt',
  russian: 'ru',
  japanese: 'ja',
  korean: 'ko',
  arabic: 'ar',
  hindi: 'hi',
  dutch: 'nl',
  polish: 'pl',
  turkish: 'tr',
  swedish: 'sv',
  ukrainian: 'uk',
  vietnamese: 'vi',
};

/** Two-letter code, or undefined for no hint / `auto`. Unknown shapes are returned lower-cased as given. */
export function normalizeLanguage(input: string | undefined | null): string | undefined {
  if (input === undefined || input === null) return undefined;
  const v = input.trim().toLowerCase();
  if (v === '' || v === 'auto') return undefined;
  if (NAMES[v]) return NAMES[v];
  const m = /^([a-z]{2,3})(?:[-_][a-z0-9]+)*$/.exec(v);
  return m ? m[1] : v;
}
