/**
 * Prompts and vocabularies for the built-in engine, one per process: the
 * lexicon files its decoders load, and the compiler the planes' requests go
 * through. When the lexicon cannot be made (a model directory without a
 * readable language model), the engine decodes as it did, without prompts.
 */
import type { Logger } from 'pino';
import { BiasCompiler, PAST_CUT, type BiasSpec, type VocabularyEntry } from './compile.js';
import { prepareLexicon, type LexiconFiles } from './lexicon.js';

export { BiasCompiler, UnpronounceableError, type BiasSpec, type VocabularyEntry } from './compile.js';

export interface PromptBias {
  files: LexiconFiles;
  compiler: BiasCompiler;
}

const made = new Map<string, PromptBias | null>();

export function promptBias(
  cfg: { lm: string; dict: string; sphinxbaseLibrary: string },
  log?: Logger,
): PromptBias | undefined {
  const key = `${cfg.lm}|${cfg.dict}`;
  let bias = made.get(key);
  if (bias === undefined) {
    try {
      const files = prepareLexicon(cfg);
      bias = { files, compiler: new BiasCompiler(files) };
      bias.compiler.warm();
    } catch (err) {
      log?.warn({ err }, 'prompts cannot bias the built-in engine: its lexicon could not be made');
      bias = null;
    }
    made.set(key, bias);
  }
  return bias ?? undefined;
}

/**
 * Words written as the prompt or vocabulary writes them ("kubernetes" → "Kubernetes"); a word added
 * past the search's cut ("dashboards~", PAST_CUT) is always shown by its own name.
 */
export function respell<W extends { word: string }>(words: W[], spec: BiasSpec | undefined): W[] {
  return words.map((w) => {
    const shown =
      spec?.display[w.word] ?? (w.word.endsWith(PAST_CUT) ? w.word.slice(0, -PAST_CUT.length) : undefined);
    return shown ? { ...w, word: shown } : w;
  });
}

/** The spec for a request, or undefined (no prompt, no vocabulary, or no lexicon). */
export function specFor(
  bias: PromptBias | undefined,
  prompt: string | undefined,
  vocabulary: VocabularyEntry[] | undefined,
): BiasSpec | undefined {
  return bias?.compiler.compile(prompt, vocabulary);
}
