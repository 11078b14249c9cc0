/**
 * The built-in engine's lexicon, derived once per machine from the model's
 * files and kept in a cache directory: the dictionary cut to the language
 * model's SEARCH_VOCABULARY_WORDS most frequent words (PocketSphinx never
 * searches words the model does not know; a decoder's search tree and
 * dictionary grow with every pronunciation it holds: 80k entries took 30 MB
 * less than 135k, the 60k most frequent words 4.5 MiB less again per
 * streaming decoder, and alternate pronunciations for the ALTERNATES_WORDS
 * most frequent only 2.5 MiB less again), a unigram model of those words
 * ("extras", the search tree's word list when words are added,
 * docs/decisions/prompts.md), and the rest of the
 * dictionary, where pronunciations of prompt words are looked up: the words
 * the model ranks past the cut (which a prompt or vocabulary adds back,
 * bias/compile.ts) and those it does not know.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import koffi from 'koffi';
import { ALTERNATES_WORDS, SEARCH_VOCABULARY_WORDS } from '../../config/speech.js';

export interface LexiconFiles {
  /** The dictionary of the language model's most frequent words (alternates included). */
  dict: string;
  /** ARPA unigram model of the same words, read by each decoder that takes prompts. */
  extras: string;
  /** Entries of the words the language model knows but ranks past the cut. */
  tail: string;
  /** The dictionary's other entries (words the language model does not know). */
  rest: string;
  /** Alternate pronunciations of searched words that the search leaves out (ranked past ALTERNATES_WORDS). */
  alternates: string;
}

/** Bumped when what is derived changes: the cache directory's name carries it. */
const FORMAT = 5;

function stamp(file: string): string {
  const st = fs.statSync(file);
  return `${path.resolve(file)}:${st.size}:${st.mtimeMs}`;
}

/** Builds (or finds) the derived files for this language model and dictionary. */
export function prepareLexicon(opts: {
  lm: string;
  dict: string;
  sphinxbaseLibrary: string;
  /** Words searched (default SEARCH_VOCABULARY_WORDS). */
  searchWords?: number;
  /** Words searched with their alternate pronunciations too (default ALTERNATES_WORDS). */
  alternatesWords?: number;
}): LexiconFiles {
  const searchWords = opts.searchWords ?? SEARCH_VOCABULARY_WORDS;
  const alternatesWords = Math.min(opts.alternatesWords ?? ALTERNATES_WORDS, searchWords);
  const key = crypto
    .createHash('sha256')
    .update(`${FORMAT}|${searchWords}|${alternatesWords}|${stamp(opts.lm)}|${stamp(opts.dict)}`)
    .digest('hex')
    .slice(0, 16);
  const dir = path.join(os.tmpdir(), `stt-lexicon-${key}`);
  const files: LexiconFiles = {
    dict: path.join(dir, 'lm.dict'),
    extras: path.join(dir, 'extras.arpa'),
    tail: path.join(dir, 'tail.dict'),
    rest: path.join(dir, 'rest.dict'),
    alternates: path.join(dir, 'alternates.dict'),
  };
  if ((Object.values(files) as string[]).every((f) => fs.existsSync(f))) return files;
  const lm = openLanguageModel(opts.lm, opts.sphinxbaseLibrary);
  const entries: { line: string; word: string }[] = [];
  /** Each word the model knows, with its unigram log probability. */
  const known = new Map<string, number>();
  try {
    for (const line of fs.readFileSync(opts.dict, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      const word = line.slice(0, line.indexOf(' ')).replace(/\(\d+\)$/, '');
      entries.push({ line, word });
      if (!known.has(word) && lm.knows(word)) known.set(word, lm.unigram(word));
    }
  } finally {
    lm.close();
  }
  // The most frequent words; ties (the model's floor) in dictionary order.
  const ranked = [...known]
    .sort((a, b) => b[1] - a[1])
    .slice(0, searchWords)
    .map(([w]) => w);
  const words = new Set(ranked);
  const withAlternates = new Set(ranked.slice(0, alternatesWords));
  const inLm: string[] = [];
  const tail: string[] = [];
  const rest: string[] = [];
  const alternates: string[] = [];
  const seen = new Set<string>();
  for (const e of entries) {
    const first = !seen.has(e.word);
    seen.add(e.word);
    // A searched word's first pronunciation is searched; its alternates only among the most frequent.
    if (words.has(e.word)) {
      if (first || withAlternates.has(e.word)) inLm.push(e.line);
      else alternates.push(e.line);
    } else (known.has(e.word) ? tail : rest).push(e.line);
  }
  const list = ['<s>', '</s>', ...words];
  const p = (-Math.log10(list.length)).toFixed(4);
  const arpa = [
    '\\data\\',
    `ngram 1=${list.length}`,
    '',
    '\\1-grams:',
    ...list.map((w) => `${p} ${w}`),
    '',
    '\\end\\',
    '',
  ].join('\n');
  // Written beside, then renamed into place: processes starting together never read half a file.
  const tmp = `${dir}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
  fs.mkdirSync(tmp, { recursive: true });
  fs.writeFileSync(path.join(tmp, 'lm.dict'), inLm.join('\n') + '\n');
  fs.writeFileSync(path.join(tmp, 'extras.arpa'), arpa);
  fs.writeFileSync(path.join(tmp, 'tail.dict'), tail.join('\n') + '\n');
  fs.writeFileSync(path.join(tmp, 'rest.dict'), rest.join('\n') + '\n');
  fs.writeFileSync(path.join(tmp, 'alternates.dict'), alternates.join('\n') + '\n');
  try {
    fs.renameSync(tmp, dir);
  } catch {
    fs.rmSync(tmp, { recursive: true, force: true }); // another process got there first
  }
  return files;
}

/** The language model's vocabulary and unigram log probabilities; close() frees the model. */
function openLanguageModel(
  lm: string,
  library: string,
): { knows(word: string): boolean; unigram(word: string): number; close(): void } {
  const sb = koffi.load(library);
  const logmathInit = sb.func('void *logmath_init(double base, int shift, int use_table)');
  const logmathFree = sb.func('int logmath_free(void *lmath)');
  const read = sb.func('void *ngram_model_read(void *config, const char *file, int type, void *lmath)');
  const free = sb.func('int ngram_model_free(void *model)');
  const wid = sb.func('int ngram_wid(void *model, const char *word)');
  const unknown = sb.func('int ngram_unknown_wid(void *model)');
  const prob = sb.func(
    'int ngram_ng_prob(void *model, int wid, const int *history, int n_hist, _Out_ int *n_used)',
  );
  const lmath: unknown = logmathInit(1.0001, 0, 0);
  const model: unknown = read(null, lm, 0, lmath);
  if (!model) {
    logmathFree(lmath);
    throw new Error(`pocketsphinx: cannot read the language model ${lm}`);
  }
  const unk = unknown(model) as number;
  return {
    knows: (w) => (wid(model, w) as number) !== unk,
    unigram: (w) => prob(model, wid(model, w), null, 0, [0]) as number,
    close: () => {
      free(model);
      logmathFree(lmath);
    },
  };
}
