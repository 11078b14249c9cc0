/**
 * Pronunciations for words the language model does not know (a prompt's or
 * a vocabulary's names, drugs, products): the CMU dictionary's own entries
 * when it has the word, otherwise eSpeak NG's letter-to-sound rules (Debian's
 * libespeak-ng, in-process) mapped from its phoneme names to the acoustic
 * model's 39 phones. On 3,000 dictionary words the mapping gives the
 * dictionary's pronunciation exactly for 62 % and a phone error rate of 8.9 %.
 * eSpeak NG's British English rules give a second pronunciation: two rule
 * sets cover more of the ways a name is said. (Flite's rules, tried through
 * libflite in-process, crashed the process in lex_lookup under load.)
 * (docs/decisions/speech.md "Prompt and vocabulary"). Called on the main
 * thread only: eSpeak NG keeps global state.
 */
import fs from 'node:fs';
import koffi from 'koffi';

/** eSpeak NG's en-us phoneme names (stress marks removed) to the CMU phone set. */
const ESPEAK_TO_CMU: Record<string, string> = {
  p: 'P',
  b: 'B',
  t: 'T',
  d: 'D',
  k: 'K',
  g: 'G',
  f: 'F',
  v: 'V',
  s: 'S',
  z: 'Z',
  h: 'HH',
  m: 'M',
  n: 'N',
  N: 'NG',
  l: 'L',
  r: 'R',
  w: 'W',
  j: 'Y',
  T: 'TH',
  D: 'DH',
  S: 'SH',
  Z: 'ZH',
  tS: 'CH',
  dZ: 'JH',
  't#': 'T',
  t2: 'T',
  '?': 'T',
  x: 'K',
  'r-': 'R',
  a: 'AE',
  aa: 'AE',
  'a#': 'AH',
  A: 'AA',
  'A:': 'AA',
  '0': 'AA',
  'A~': 'AA N',
  'A@': 'AA R',
  E: 'EH',
  e: 'EH',
  'e@': 'EH R',
  eI: 'EY',
  'eI@': 'EY ER',
  I: 'IH',
  I2: 'IH',
  'I#': 'IH',
  i: 'IY',
  'i:': 'IY',
  'i@': 'IH R',
  'i@3': 'IH R',
  O: 'AO',
  'O:': 'AO',
  O2: 'AO',
  'O@': 'AO R',
  'o@': 'AO R',
  o: 'OW',
  oU: 'OW',
  OI: 'OY',
  U: 'UH',
  'U@': 'UH R',
  u: 'UW',
  'u:': 'UW',
  V: 'AH',
  '@': 'AH',
  '@2': 'AH',
  '@5': 'AH',
  '@-': 'AH',
  '@L': 'AH L',
  'l-': 'AH L',
  'n-': 'AH N',
  '3': 'ER',
  '3:': 'ER',
  aI: 'AY',
  aI3: 'AY ER',
  'aI@': 'AY ER',
  'aI@3': 'AY ER',
  aU: 'AW',
  'aU@': 'AW ER',
};

/** The acoustic model's phones (en-us mdef), to check every pronunciation before a decoder sees it. */
export const PHONES = new Set(
  'AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH UH UW V W Y Z ZH'.split(
    ' ',
  ),
);

/** The longest word (letters) a pronunciation is made for. */
export const MAX_WORD_LETTERS = 40;

interface Espeak {
  phonemes(word: string, voice: string): string | undefined;
}

let espeak: Espeak | null | undefined;

function loadEspeak(): Espeak | null {
  try {
    const lib = koffi.load('libespeak-ng.so.1');
    const init = lib.func('int espeak_Initialize(int output, int buflength, const char *path, int options)');
    const voice = lib.func('int espeak_SetVoiceByName(const char *name)');
    const toPhonemes = lib.func(
      'const char *espeak_TextToPhonemes(void *textptr, int textmode, int phonememode)',
    );
    // AUDIO_OUTPUT_RETRIEVAL: no sound device; bit 15 of options: no exit when data is missing.
    if ((init(1, 0, null, 0x8000) as number) < 0) return null;
    let current = '';
    const CHARS_UTF8 = 1;
    const SEPARATOR = '_'.charCodeAt(0) << 8;
    return {
      phonemes(word, name) {
        if (name !== current) {
          if ((voice(name) as number) !== 0) return undefined;
          current = name;
        }
        const bytes = Buffer.from(`${word}\0`, 'utf8');
        const text: unknown = koffi.alloc('uint8_t', bytes.length);
        const cursor: unknown = koffi.alloc('void *', 1);
        try {
          koffi.encode(text, 'uint8_t', Array.from(bytes), bytes.length);
          koffi.encode(cursor, 'void *', text);
          return (toPhonemes(cursor, CHARS_UTF8, SEPARATOR) as string | null) ?? undefined;
        } finally {
          koffi.free(cursor);
          koffi.free(text);
        }
      },
    };
  } catch {
    return null;
  }
}

/** Words looked up by letter-to-sound, kept (bounded) so that no word is looked up twice. */
const made = new Map<string, string[][]>();
const MADE_ENTRIES = 50_000;

/** Letter-to-sound pronunciations of a word (eSpeak NG's American, then British rules when they differ), in CMU phones. */
export function letterToSound(word: string): string[][] {
  const hit = made.get(word);
  if (hit) return hit;
  const out = rules(word);
  if (made.size >= MADE_ENTRIES) made.delete(made.keys().next().value!);
  made.set(word, out);
  return out;
}

function rules(word: string): string[][] {
  const out: string[][] = [];
  const e = espeakPhones(word, 'en-us');
  if (e) out.push(e);
  // British English rules as a second pronunciation: names are said more than one way.
  const gb = espeakPhones(word, 'en');
  if (gb && gb.join(' ') !== e?.join(' ')) out.push(gb);
  return out;
}

/** eSpeak NG's phonemes for a word in CMU phones, or undefined when it has none or names one not mapped. */
function espeakPhones(word: string, voice: string): string[] | undefined {
  if (espeak === undefined) espeak = loadEspeak();
  const out = espeak?.phonemes(word, voice);
  if (!out) return undefined;
  const phones: string[] = [];
  for (const raw of out.trim().split(/[_\s]+/)) {
    const name = raw.replace(/[',%=;]/g, '');
    if (!name) continue;
    const cmu = ESPEAK_TO_CMU[name] ?? ESPEAK_TO_CMU[name.replace(/:$/, '')];
    if (!cmu) return undefined;
    phones.push(...cmu.split(' '));
  }
  return phones.length > 0 ? phones : undefined;
}

/**
 * The CMU dictionary's entries, read once when first needed: word to its
 * pronunciations, and whether the first file has it (the language model's
 * words, bias/lexicon.ts). Kept as one string per word (its pronunciations,
 * one per line, after a mark for the first file's words) and split on
 * lookup: 135k words held as arrays of phone strings, and a set of the first
 * file's words, took about 120 MiB of the process (issue 40, "Footprint");
 * as strings, about 40.
 */
export class DictionaryLookup {
  private entries: Map<string, string> | undefined;

  constructor(private readonly files: string[]) {}

  get(word: string): string[][] | undefined {
    const entry = this.entry(word);
    return entry
      ?.replace(FIRST_FILE, '')
      .split('\n')
      .map((p) => p.split(' '));
  }

  /** The first file has the word. */
  inFirst(word: string): boolean {
    return this.entry(word)?.startsWith(FIRST_FILE) ?? false;
  }

  private entry(word: string): string | undefined {
    this.entries ??= this.load();
    return this.entries.get(word);
  }

  private load(): Map<string, string> {
    const map = new Map<string, string>();
    this.files.forEach((file, i) => {
      for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
        const parts = line.trim().split(/\s+/);
        if (parts.length < 2) continue;
        const word = parts[0].replace(/\(\d+\)$/, '');
        const phones = parts.slice(1).join(' ');
        const known = map.get(word);
        map.set(word, known === undefined ? `${i === 0 ? FIRST_FILE : ''}${phones}` : `${known}\n${phones}`);
      }
    });
    return map;
  }
}

/** Marks the entries of the first file (never a phone). */
const FIRST_FILE = '\u0001';
