/**
 * A request's prompt and its key's vocabulary, compiled for the built-in
 * engine: a small language model of their words and word pairs (ARPA text)
 * that decoders interpolate with the general one, the pronunciations of the
 * words the general model does not know, and how to spell those words in the
 * transcript ("kubernetes" → "Kubernetes", "haproxy" → "HAProxy"). Compiled
 * on the main thread and cached by content: a session's utterances, a batch
 * job's chunks and a tenant's repeated requests compile once.
 */
import crypto from 'node:crypto';
import { DictionaryLookup, MAX_WORD_LETTERS, PHONES, letterToSound } from './pronounce.js';
import type { LexiconFiles } from './lexicon.js';

/** A stored vocabulary entry: the word as it should be written, and optionally how it is said. */
export interface VocabularyEntry {
  word: string;
  /** Spoken forms in words the dictionary knows or can sound out ("h a proxy"). */
  spoken?: string[];
}

export interface NewWord {
  /** Dictionary form: lower case; `word(n)` for a further pronunciation of a known word. */
  word: string;
  phones: string[];
}

export interface BiasSpec {
  /** Content hash: a decoder that holds this spec already applies it at no cost. */
  id: string;
  /** The prompt's language model (ARPA). */
  arpa: string;
  /** Entries to add to the decoder's dictionary (known to no model the decoder has). */
  words: NewWord[];
  /** Lower-case recognised word → how the prompt or vocabulary writes it. */
  display: Record<string, string>;
}

/**
 * Suffix of the dictionary name of a word the general model knows but the search leaves out (ranked past
 * SEARCH_VOCABULARY_WORDS): under its own name, once added, it would stay in the decoder's search after the
 * prompt (the tree holds the dictionary words the selected models know); under this one only the prompt's
 * model knows it, as for words no model knows. Results show it as the prompt writes it (`display`).
 */
export const PAST_CUT = '~';
/** Prompt words never boosted: they would only make the engine hear them everywhere. */
const MIN_LETTERS = 2;
/** Compiled specs kept per process (each a few kilobytes). */
const CACHE_ENTRIES = 512;
/** Where the dictionary lookup finds the alternates the search leaves out (LexiconFiles order). */
const ALTERNATES_FILE = 3;
/** Pronunciations kept per word (spoken forms × dictionary variants). */
const MAX_PRONUNCIATIONS = 4;

export class UnpronounceableError extends Error {
  constructor(readonly words: string[]) {
    super(`No pronunciation could be made for: ${words.join(', ')}.`);
    this.name = 'UnpronounceableError';
  }
}

export class BiasCompiler {
  /** The language model's dictionary first: `inFirst` says the model knows a word. */
  private readonly dictionary: DictionaryLookup;
  private readonly cache = new Map<string, BiasSpec | null>();

  constructor(files: LexiconFiles) {
    this.dictionary = new DictionaryLookup([files.dict, files.tail, files.rest, files.alternates]);
  }

  /**
   * Entries for the pronunciations of a searched word that the search leaves out (its alternates,
   * past ALTERNATES_WORDS): named by a prompt or vocabulary, the word is searched all its ways.
   */
  private leftOut(word: string): NewWord[] {
    const alternates = this.dictionary.get(word, ALTERNATES_FILE);
    return alternates ? variants(word, alternates, true) : [];
  }

  /** The search has the word. */
  private knows(word: string): boolean {
    return this.dictionary.inFirst(word);
  }

  /** A word's name in the decoder's dictionary and models. */
  private nameOf(word: string): string {
    return this.dictionary.fileOf(word) === 1 ? `${word}${PAST_CUT}` : word;
  }

  /** Loads what the first prompt would otherwise wait for (the dictionary, eSpeak NG). */
  warm(): void {
    this.dictionary.get('a');
    letterToSound('warm');
  }

  /** The spec for a prompt and vocabulary, or undefined when neither has a word to bias toward. */
  compile(prompt: string | undefined, vocabulary: VocabularyEntry[] | undefined): BiasSpec | undefined {
    if (!prompt?.trim() && !vocabulary?.length) return undefined;
    const key = crypto
      .createHash('sha256')
      .update(JSON.stringify([prompt ?? '', vocabulary ?? []]))
      .digest('hex')
      .slice(0, 24);
    const hit = this.cache.get(key);
    if (hit !== undefined) {
      this.cache.delete(key);
      this.cache.set(key, hit); // most recently used last
      return hit ?? undefined;
    }
    const spec = this.build(key, prompt ?? '', vocabulary ?? [], false) ?? null;
    this.cache.set(key, spec);
    if (this.cache.size > CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
    return spec ?? undefined;
  }

  /** Checks a vocabulary before it is stored: throws UnpronounceableError naming the words that fail. */
  check(vocabulary: VocabularyEntry[]): void {
    this.build('check', '', vocabulary, true);
  }

  private build(
    id: string,
    prompt: string,
    vocabulary: VocabularyEntry[],
    strict: boolean,
  ): BiasSpec | undefined {
    const phrases: string[][] = [];
    const display: Record<string, string> = {};
    const words = new Map<string, NewWord[]>();
    const failed: string[] = [];
    for (const phrase of splitPhrases(prompt)) {
      const tokens = tokenize(phrase);
      phrases.push(tokens.map((t) => this.nameOf(t.lower)));
      tokens.forEach((t, i) => {
        // A word the model knows keeps its spelling, unless the prompt writes it as a name: capitalised
        // past the start of its clause, or alone in it (a list: "Okonkwo, Siobhan, Nkechi").
        if (t.text !== t.lower && (i > 0 || tokens.length === 1)) display[this.nameOf(t.lower)] ??= t.text;
      });
      for (const t of tokens) {
        const name = this.nameOf(t.lower);
        if (words.has(name)) continue;
        if (this.knows(t.lower)) {
          const alternates = this.leftOut(t.lower);
          if (alternates.length > 0) words.set(name, alternates);
          continue;
        }
        const made = this.pronounce(t.lower);
        if (made.length === 0) continue; // a prompt word nobody can say is simply not boosted
        words.set(name, variants(name, made, false));
        // Words the dictionary has (past the cut) are shown as such unless written as names (above).
        display[name] ??= name === t.lower ? t.text : t.lower;
      }
    }
    for (const entry of vocabulary) {
      const tokens = tokenize(entry.word);
      if (tokens.length === 0) {
        failed.push(entry.word);
        continue;
      }
      phrases.push(tokens.map((t) => this.nameOf(t.lower)));
      const spoken = (entry.spoken ?? [])
        .map((s) => tokenize(s, true).map((t) => t.lower))
        .filter((s) => s.length);
      for (const t of tokens) {
        const name = this.nameOf(t.lower);
        if (t.text !== t.lower || !this.knows(t.lower)) display[name] = t.text;
        const known = this.knows(t.lower);
        // A one-word entry with spoken forms gets them as its pronunciations; a phrase's words sound out alone.
        const fromSpoken = tokens.length === 1 ? spoken.flatMap((s) => this.sayAll(s)) : [];
        if (known && fromSpoken.length === 0) {
          if (!words.has(name)) words.set(name, this.leftOut(t.lower));
          continue;
        }
        const made = fromSpoken.length > 0 ? fromSpoken : this.pronounce(t.lower);
        if (made.length === 0) {
          failed.push(entry.word);
          continue;
        }
        const before = (words.get(name) ?? []).map((w) => w.phones);
        words.set(name, variants(name, [...before, ...made], known));
      }
    }
    if (strict && failed.length > 0) throw new UnpronounceableError(failed);
    const all = phrases.filter((p) => p.length > 0);
    if (all.length === 0) return undefined;
    return { id, arpa: arpa(all), words: [...words.values()].flat(), display };
  }

  /** The dictionary's pronunciations of a word, else eSpeak NG's. */
  private pronounce(word: string): string[][] {
    if (word.length > MAX_WORD_LETTERS || word.length < MIN_LETTERS) return [];
    const dict = this.dictionary.get(word);
    if (dict) return dict.slice(0, MAX_PRONUNCIATIONS);
    return letterToSound(word).filter((p) => p.every((x) => PHONES.has(x)));
  }

  /** A spoken form's pronunciations: each word's (the first two variants of each), joined. */
  private sayAll(tokens: string[]): string[][] {
    let out: string[][] = [[]];
    for (const t of tokens) {
      const dict = this.dictionary.get(t);
      const own = dict ? dict.slice(0, 2) : letterToSound(t).slice(0, 2);
      if (own.length === 0) return [];
      out = out.flatMap((prefix) => own.map((p) => [...prefix, ...p])).slice(0, MAX_PRONUNCIATIONS);
    }
    return out.filter((p) => p.length > 0 && p.every((x) => PHONES.has(x)));
  }
}

/**
 * Dictionary entries for a word's pronunciations (duplicates dropped): `word`, `word(2)`, ... for a new
 * word; `word(11)`, `word(12)`, ... past the dictionary's own variants for a further one of a known word.
 */
function variants(word: string, prons: string[][], known: boolean): NewWord[] {
  const seen = new Set<string>();
  const out: NewWord[] = [];
  for (const phones of prons) {
    const k = phones.join(' ');
    if (seen.has(k) || out.length >= MAX_PRONUNCIATIONS) continue;
    seen.add(k);
    const n = out.length + (known ? 10 : 0);
    out.push({ word: n === 0 ? word : `${word}(${n + 1})`, phones });
  }
  return out;
}

interface Token {
  text: string;
  lower: string;
}

/** Sentences and clauses: word pairs are counted inside them only. */
function splitPhrases(text: string): string[] {
  return text.split(/[.,;:!?()[\]{}"\n\r\t|/]+/).filter((p) => p.trim());
}

/** Words of letters (apostrophes inside kept); numbers and symbols are not words a decoder spells. */
function tokenize(text: string, letters = false): Token[] {
  const out: Token[] = [];
  for (const m of text.normalize('NFC').matchAll(/\p{L}+(?:'\p{L}+)*/gu)) {
    const lower = m[0].toLowerCase();
    // Single letters are words only in spoken forms ("h a proxy") and as "a" and "i".
    if (lower.length < MIN_LETTERS && !letters && lower !== 'a' && lower !== 'i') continue;
    if (lower.length > MAX_WORD_LETTERS) continue;
    out.push({ text: m[0], lower });
  }
  return out;
}

/** A bigram model of the phrases: maximum-likelihood estimates with a fixed share held back for unseen pairs. */
function arpa(phrases: string[][]): string {
  const uni = new Map<string, number>();
  const bi = new Map<string, number>();
  let total = 0;
  for (const p of phrases) {
    for (let i = 0; i < p.length; i++) {
      uni.set(p[i], (uni.get(p[i]) ?? 0) + 1);
      total++;
      if (i > 0) bi.set(`${p[i - 1]} ${p[i]}`, (bi.get(`${p[i - 1]} ${p[i]}`) ?? 0) + 1);
    }
  }
  const BACKOFF = 0.5;
  const log = (x: number) => Math.log10(x).toFixed(4);
  const lines = ['\\data\\', `ngram 1=${uni.size + 2}`, `ngram 2=${bi.size}`, '', '\\1-grams:'];
  // Sentence markers: present so the model is well formed, as unlikely as the rarest word.
  lines.push(`${log(1 / (total + 2))} </s> 0`, `-99 <s> ${log(BACKOFF)}`);
  for (const [w, c] of uni) lines.push(`${log(c / (total + 2))} ${w} ${log(BACKOFF)}`);
  lines.push('', '\\2-grams:');
  for (const [pair, c] of bi)
    lines.push(`${log(((1 - BACKOFF) * c) / uni.get(pair.split(' ')[0])!)} ${pair}`);
  lines.push('', '\\end\\', '');
  return lines.join('\n');
}
