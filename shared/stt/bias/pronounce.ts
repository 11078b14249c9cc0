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
 * (docs/decisions/prompts.md). Called on the main
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
 * words, bias/lexicon.ts). The files stay as they were read, one buffer,
 * with the start of each entry's line in a typed array sorted by word, and
 * a lookup is a binary search that parses the few lines it lands on: about
 * 5 MiB for 135k words, sorted by comparing the words where they lie (a
 * string per word for the sort grew the heap by 30-40 MiB that stayed). Held
 * as arrays of phone strings they took about 120 MiB of every process that
 * takes prompts, and as one string per word about 40 (issue 40, "Footprint").
 */
export class DictionaryLookup {
  private text: Buffer | undefined;
  /** Line starts in `text`, by word, then in file and line order. */
  private index: Uint32Array | undefined;
  /** Where each file ends in `text`. */
  private ends: number[] = [];

  constructor(private readonly files: string[]) {}

  /** The word's pronunciations, in file and line order; only those of file `file` when given. */
  get(word: string, file?: number): string[][] | undefined {
    let lines = this.lines(word);
    if (file !== undefined) {
      if (!this.index) this.load();
      const [from, to] = [file > 0 ? this.ends[file - 1] : 0, this.ends[file] ?? 0];
      lines = lines.filter((at) => at >= from && at < to);
    }
    return lines.length === 0 ? undefined : lines.map((at) => this.phones(at).split(' '));
  }

  /** The first file has the word. */
  inFirst(word: string): boolean {
    return this.fileOf(word) === 0;
  }

  /** The index of the first file that has the word, or -1. */
  fileOf(word: string): number {
    const lines = this.lines(word);
    return lines.length === 0 ? -1 : this.ends.findIndex((end) => lines[0] < end);
  }

  /** The entries' line starts for `word`, in file and line order. */
  private lines(word: string): number[] {
    if (!this.index) this.load();
    const index = this.index!;
    const q = Buffer.from(word, 'utf8');
    let lo = 0;
    let hi = index.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.compare(index[mid], q) < 0) lo = mid + 1;
      else hi = mid;
    }
    const out: number[] = [];
    for (let i = lo; i < index.length && this.compare(index[i], q) === 0; i++) out.push(index[i]);
    return out;
  }

  /** The entry's word at `at` against `q`, byte by byte (the order `load` sorts in). */
  private compare(at: number, q: Buffer): number {
    const text = this.text!;
    for (let i = 0; ; i++) {
      const c = keyByte(text, at + i);
      const d = i < q.length ? q[i] : -1;
      if (c !== d || c === -1) return c - d;
    }
  }

  private lineAt(at: number): string {
    const text = this.text!;
    const end = text.indexOf(10, at);
    return text.toString('utf8', at, end < 0 ? text.length : end);
  }

  private phones(at: number): string {
    return this.lineAt(at).trim().split(/\s+/).slice(1).join(' ');
  }

  private load(): void {
    const parts = this.files.map((f) => fs.readFileSync(f));
    let end = 0;
    this.ends = parts.map((b) => (end += b.length + 1));
    const text = Buffer.concat(parts.flatMap((b) => [b, Buffer.from('\n')]));
    // Entries' line starts, sorted by their words compared in place (no string per word: strings for
    // 135k words grew the heap by 30-40 MiB that stayed with the process), then by position.
    let lines = 1;
    for (let at = text.indexOf(10); at >= 0; at = text.indexOf(10, at + 1)) lines++;
    const starts = new Uint32Array(lines);
    let n = 0;
    for (let at = 0; at < text.length;) {
      const end = text.indexOf(10, at);
      const stop = end < 0 ? text.length : end;
      if (isEntry(text, at, stop)) starts[n++] = at;
      at = stop + 1;
    }
    this.index = starts.slice(0, n).sort((a, b) => compareWords(text, a, b) || a - b);
    this.text = text;
  }
}

/** Whether the line at [at, stop) is an entry: a word, blanks, then a phone. */
function isEntry(text: Buffer, at: number, stop: number): boolean {
  let i = at;
  while (i < stop && !isBlank(text[i])) i++;
  if (i === at || i === stop || (text[i] !== 0x20 && text[i] !== 0x09)) return false;
  while (i < stop && (text[i] === 0x20 || text[i] === 0x09)) i++;
  return i < stop && !isBlank(text[i]);
}

function isBlank(b: number): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d || b === 0x0b || b === 0x0c;
}

/** The words of the entries at `a` and `b`, byte by byte (the order `lines` searches in). */
function compareWords(text: Buffer, a: number, b: number): number {
  for (let i = 0; ; i++) {
    const c = keyByte(text, a + i);
    const d = keyByte(text, b + i);
    if (c !== d || c === -1) return c - d;
  }
}

/** A byte of an entry's word, or -1 where the word ends (its variant number, "(2)", is not part of it). */
function keyByte(text: Buffer, pos: number): number {
  if (pos >= text.length) return -1;
  const b = text[pos];
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d || b === 0x28 ? -1 : b;
}
