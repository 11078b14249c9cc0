/**
 * A decoder's prompt and vocabulary (docs/decisions/prompts.md). The search's
 * language model is a set (sphinxbase's ngram_model_set) of three models:
 * - `default`, the general model;
 * - `extras`, a unigram model of every word the decoder can say: the general
 *   model's and those prompts added. It is the selected model only while
 *   words are added, so that the search tree, rebuilt then, keeps every word
 *   (the tree holds the words the selected model knows), and so that added
 *   words never enter the general model. The decoders of a thread share one
 *   (models.ts): a word another decoder added there is in no other decoder's
 *   dictionary, so one tenant's words never reach another's transcripts. It
 *   decodes with a weight of 1e-20, never enough to win;
 * - `prompt`, the request's small model, interpolated with the general one.
 * Without a prompt only `default` is selected: the search is the one it was.
 * The same spec on the same decoder costs one weight update; a new one reads
 * a small model (~5 ms); new words rebuild the search tree (~85 ms over the
 * search's 60,000 words, once per decoder and word; the decoder is replaced
 * after MAX_ADDED_WORDS).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import koffi from 'koffi';
import type { BiasSpec } from '../bias/compile.js';
import type { Binding } from './binding.js';
import type { SharedModel } from './models.js';

/** The prompt model's share of the interpolated probability. */
export const PROMPT_WEIGHT = 0.6;
const EXTRAS_WEIGHT = 1e-20;
/** Words a decoder adds before it is replaced by a fresh one (memory stays bounded across tenants). */
export const MAX_ADDED_WORDS = 2000;

export class SearchBias {
  private readonly added = new Set<string>();
  private current: string | undefined;
  private readonly names: unknown;
  private readonly weights: unknown;

  constructor(
    private readonly b: Binding,
    private readonly ps: unknown,
    private readonly lmset: unknown,
    private readonly extras: SharedModel,
  ) {
    // The set frees its models with it: it gets a reference of its own to the thread's model.
    b.ngram_model_retain(extras.model);
    if (!b.ngram_model_set_add(lmset, extras.model, 'extras', 0.5, 1)) {
      b.ngram_model_free(extras.model);
      throw new Error('pocketsphinx: cannot add extras');
    }
    this.names = koffi.alloc('const char *', 3);
    koffi.encode(this.names, 'const char *', ['default', 'extras', 'prompt'], 3);
    this.weights = koffi.alloc('float', 3);
    this.select(undefined);
  }

  /** Added words past which the decoder should be replaced. */
  get wornOut(): boolean {
    return this.added.size >= MAX_ADDED_WORDS;
  }

  cost(spec: BiasSpec | undefined): number {
    if (!spec || spec.id === this.current) return 0;
    return spec.words.every((w) => this.added.has(w.word)) ? 1 : 2;
  }

  /** Makes the next utterance's search use the spec (undefined: the general model alone). */
  apply(spec: BiasSpec | undefined): void {
    if (spec && spec.id !== this.current) {
      if (this.current) {
        const old = this.b.ngram_model_set_remove(this.lmset, 'prompt', 1);
        if (old) this.b.ngram_model_free(old);
        this.current = undefined;
      }
      this.addWords(spec);
      const model = this.read(spec.arpa);
      if (!this.b.ngram_model_set_add(this.lmset, model, 'prompt', PROMPT_WEIGHT, 1))
        throw new Error('pocketsphinx: cannot add the prompt model');
      this.current = spec.id;
    }
    this.select(spec);
  }

  private select(spec: BiasSpec | undefined): void {
    if (!spec) {
      if (!this.b.ngram_model_set_select(this.lmset, 'default'))
        throw new Error('pocketsphinx: no default model');
      return;
    }
    koffi.encode(this.weights, 'float', [1 - PROMPT_WEIGHT - EXTRAS_WEIGHT, EXTRAS_WEIGHT, PROMPT_WEIGHT], 3);
    if (!this.b.ngram_model_set_interp(this.lmset, this.names, this.weights))
      throw new Error('pocketsphinx: cannot weight the prompt model');
  }

  /** New dictionary entries, added to `extras` only; the last one rebuilds the search tree. */
  private addWords(spec: BiasSpec): void {
    const fresh = spec.words.filter((w) => !this.added.has(w.word));
    if (fresh.length === 0) return;
    if (!this.b.ngram_model_set_select(this.lmset, 'extras'))
      throw new Error('pocketsphinx: no extras model');
    fresh.forEach((w, i) => {
      const update = i === fresh.length - 1 ? 1 : 0;
      // A word that fails (a phone the model lacks) is left out; the spec's checks make that rare.
      if ((this.b.ps_add_word(this.ps, w.word, w.phones.join(' '), update) as number) >= 0) {
        this.added.add(w.word);
        this.extras.added.add(w.word);
      } else if (update) this.rebuild();
    });
  }

  /** Rebuilds the tree when the last word failed to: adding a known filler alternate is refused, so adds it once. */
  private rebuild(): void {
    const marker = `++bias${this.added.size}++`;
    if ((this.b.ps_add_word(this.ps, marker, 'SIL', 1) as number) >= 0) {
      this.added.add(marker);
      this.extras.added.add(marker);
    }
  }

  /** The request's small model, from its ARPA text. */
  private read(arpa: string): unknown {
    const file = path.join(
      os.tmpdir(),
      `stt-prompt-${process.pid}-${crypto.randomBytes(6).toString('hex')}.arpa`,
    );
    fs.writeFileSync(file, arpa);
    try {
      const model: unknown = this.b.ngram_model_read(
        this.b.ps_get_config(this.ps),
        file,
        1, // NGRAM_ARPA
        this.b.ps_get_logmath(this.ps),
      );
      if (!model) throw new Error('pocketsphinx: cannot read a prompt model');
      return model;
    } finally {
      fs.rmSync(file, { force: true });
    }
  }

  close(): void {
    koffi.free(this.names);
    koffi.free(this.weights);
  }
}
