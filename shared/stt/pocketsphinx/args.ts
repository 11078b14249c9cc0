/**
 * Arguments a Decoder derives from its options: the model's feat.params
 * without its CMN (the decoder normalises cepstra itself, cmn.ts), and the
 * key of the arguments that decide how a language model is read, which
 * decoders sharing a thread's model (models.ts) must agree on.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const featParamsCopies = new Map<string, string>();

/** A copy of the model's feat.params with `-cmn none`, written once per process and model. */
export function featParamsWithoutCmn(hmm: string): string {
  let file = featParamsCopies.get(hmm);
  if (file) return file;
  const params = fs.readFileSync(path.join(hmm, 'feat.params'), 'utf8');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pocketsphinx-'));
  file = path.join(dir, 'feat.params');
  fs.writeFileSync(file, params.replace(/^-cmn\s+\S+\s*$/m, '').trimEnd() + '\n-cmn none\n');
  featParamsCopies.set(hmm, file);
  return file;
}

/** The arguments that change how a language model is read (its weights, its log base). */
const LM_READ_ARGS = ['-lw', '-wip', '-uw', '-logbase'];

/** What decoders sharing a thread's model must agree on: the values of LM_READ_ARGS among their arguments. */
export function modelKey(args: string[]): string {
  return LM_READ_ARGS.map((a) => {
    const i = args.lastIndexOf(a);
    return i >= 0 ? args[i + 1] : '';
  }).join(' ');
}
