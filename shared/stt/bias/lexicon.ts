/**
 * The built-in engine's lexicon, derived once per machine from the model's
 * files and kept in a cache directory: the dictionary cut to the words the
 * language model knows (PocketSphinx never searches the others, and a decoder
 * holding 80k entries instead of 135k loads faster, takes 30 MB less and
 * rebuilds its search tree in 135 ms instead of 200 ms when a prompt adds
 * words), a unigram model of those words ("extras", the search tree's word
 * list when words are added, docs/decisions/speech.md "Prompt and
 * vocabulary"), and the rest of the dictionary, where pronunciations of
 * prompt words the model does not know are looked up.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import koffi from 'koffi';

export interface LexiconFiles {
  /** The dictionary of the language model's words (alternates included). */
  dict: string;
  /** ARPA unigram model of the same words, read by each decoder that takes prompts. */
  extras: string;
  /** The dictionary's other entries (words the language model does not know). */
  rest: string;
}

/** Bumped when what is derived changes: the cache directory's name carries it. */
const FORMAT = 1;

function stamp(file: string): string {
  const st = fs.statSync(file);
  return `${path.resolve(file)}:${st.size}:${st.mtimeMs}`;
}

/** Builds (or finds) the derived files for this language model and dictionary. */
export function prepareLexicon(opts: { lm: string; dict: string; sphinxbaseLibrary: string }): LexiconFiles {
  const key = crypto
    .createHash('sha256')
    .update(`${FORMAT}|${stamp(opts.lm)}|${stamp(opts.dict)}`)
    .digest('hex')
    .slice(0, 16);
  const dir = path.join(os.tmpdir(), `stt-lexicon-${key}`);
  const files: LexiconFiles = {
    dict: path.join(dir, 'lm.dict'),
    extras: path.join(dir, 'extras.arpa'),
    rest: path.join(dir, 'rest.dict'),
  };
  if ([files.dict, files.extras, files.rest].every((f) => fs.existsSync(f))) return files;
  const lm = openLanguageModel(opts.lm, opts.sphinxbaseLibrary);
  const inLm: string[] = [];
  const rest: string[] = [];
  const words = new Set<string>();
  try {
    for (const line of fs.readFileSync(opts.dict, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      const word = line.slice(0, line.indexOf(' ')).replace(/\(\d+\)$/, '');
      if (lm.knows(word)) {
        inLm.push(line);
        words.add(word);
      } else rest.push(line);
    }
  } finally {
    lm.close();
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
  fs.writeFileSync(path.join(tmp, 'rest.dict'), rest.join('\n') + '\n');
  try {
    fs.renameSync(tmp, dir);
  } catch {
    fs.rmSync(tmp, { recursive: true, force: true }); // another process got there first
  }
  return files;
}

/** The language model's vocabulary, to test words against; close() frees the model. */
function openLanguageModel(lm: string, library: string): { knows(word: string): boolean; close(): void } {
  const sb = koffi.load(library);
  const logmathInit = sb.func('void *logmath_init(double base, int shift, int use_table)');
  const logmathFree = sb.func('int logmath_free(void *lmath)');
  const read = sb.func('void *ngram_model_read(void *config, const char *file, int type, void *lmath)');
  const free = sb.func('int ngram_model_free(void *model)');
  const wid = sb.func('int ngram_wid(void *model, const char *word)');
  const unknown = sb.func('int ngram_unknown_wid(void *model)');
  const lmath: unknown = logmathInit(1.0001, 0, 0);
  const model: unknown = read(null, lm, 0, lmath);
  if (!model) {
    logmathFree(lmath);
    throw new Error(`pocketsphinx: cannot read the language model ${lm}`);
  }
  const unk = unknown(model) as number;
  return {
    knows: (w) => (wid(model, w) as number) !== unk,
    close: () => {
      free(model);
      logmathFree(lmath);
    },
  };
}
