/**
 * The language models the decoders of one thread share (issue 40,
 * "Footprint"; docs/decisions/speech.md "Decoders share their language
 * models"): the general model (`en-us.lm.bin`, about 32 MiB once read) is
 * read once per thread and handed to each decoder's search, and so is the
 * lexicon's `extras` model (bias.ts, about 8 MiB). Module state is per
 * thread (each worker thread loads its own copy of this module), which is
 * what sharing needs: sphinxbase's trie keeps a scoring cache inside the
 * model, so one model must never be scored from two threads at once.
 *
 * Nothing a decoder does changes the general model: its search reads it
 * through its own model set, and words are only ever added while the set's
 * `extras` model is selected. Words do enter the shared `extras` model, but
 * a word there reaches no transcript of a decoder whose dictionary lacks it
 * (the search tree holds dictionary words only), so one tenant's words still
 * never reach another's transcripts; its growth is bounded: past
 * EXTRAS_MAX_ADDED words, decoders created afterwards get a fresh copy.
 *
 * A model keeps a bare pointer to the log-math it was read with (the first
 * borrower's, which ps_free frees), and every set made over it computes
 * with that one: the thread and each borrower hold a reference of their own
 * (logmath_retain), so it lives as long as any decoder can use the model.
 */
import type { Binding } from './binding.js';

/** Words added to one shared `extras` model before new decoders get a fresh one. */
export const EXTRAS_MAX_ADDED = 20_000;

/** sphinxbase's `ngram_file_type_t`. */
const NGRAM_AUTO = 0;
const NGRAM_ARPA = 1;

/** A model read once and lent to decoders (each decoder's model set holds its own reference). */
export interface SharedModel {
  readonly model: unknown;
  /** Words added to it through the decoders' sets (extras only). */
  readonly added: Set<string>;
}

interface Entry extends SharedModel {
  id: string;
  /** The log-math the model was read with. */
  lmath: unknown;
  /** Decoders holding it. */
  users: number;
  /** The thread still holds its own reference (and hands the model out). */
  held: boolean;
}

const entries = new Map<string, Entry>();

function drop(b: Binding, entry: Entry): void {
  if (!entry.held) return;
  entry.held = false;
  if (entries.get(entry.id) === entry) entries.delete(entry.id);
  b.ngram_model_free(entry.model);
  b.logmath_free(entry.lmath);
}

/**
 * The thread's copy of the model at `file`, read with the borrowing
 * decoder's configuration and log-math; decoders that share a `key` use the
 * same `-lw`, `-wip` and `-logbase` (the caller puts them in the key). The
 * caller hands the model to the decoder's set with a reference of the set's
 * own, and calls `release` once per `borrow`.
 */
export function borrow(
  b: Binding,
  ps: unknown,
  file: string,
  key: string,
  kind: 'general' | 'extras',
): SharedModel {
  const id = `${kind}\0${file}\0${key}`;
  let entry = entries.get(id);
  // A worn extras model: the decoders holding it keep it; new ones get a fresh copy.
  if (entry && kind === 'extras' && entry.added.size >= EXTRAS_MAX_ADDED) drop(b, entry);
  entry = entries.get(id);
  if (!entry) {
    const lmath: unknown = b.ps_get_logmath(ps);
    const model: unknown = b.ngram_model_read(
      b.ps_get_config(ps),
      file,
      kind === 'extras' ? NGRAM_ARPA : NGRAM_AUTO,
      lmath,
    );
    if (!model) throw new Error(`pocketsphinx: cannot read the language model ${file}`);
    entry = { id, lmath: b.logmath_retain(lmath), model, added: new Set(), users: 0, held: true };
    entries.set(id, entry);
  }
  entry.users++;
  b.logmath_retain(entry.lmath);
  return entry;
}

/** Gives a borrowed model back; when no decoder of the thread holds it, the thread lets it go too. */
export function release(b: Binding, shared: SharedModel): void {
  const entry = shared as Entry;
  if (--entry.users === 0) drop(b, entry);
  b.logmath_free(entry.lmath);
}

/** Models this thread holds now (tests). */
export function sharedModelCount(): number {
  return entries.size;
}
