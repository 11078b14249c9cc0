/**
 * PocketSphinx through FFI (koffi). Debian ships the "0.8+5prealpha" API:
 * `ps_init(cmd_ln_t *)` built from `cmd_ln_parse_r(NULL, ps_args(), argc,
 * argv, strict)` (libsphinxbase), not the 5.x `ps_config_t`. One Decoder is
 * single-threaded; each worker thread owns one.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import koffi from 'koffi';
import {
  CEPSTRUM_LENGTH,
  CmnNormaliser,
  type CmnEstimate,
  type CmnOutput,
  type CmnSettings,
  type CmnTrace,
} from './cmn.js';

/** Frames per ps_process_cep call. */
const SEARCH_FRAMES = 3;

export interface DecoderOptions {
  hmm: string;
  lm: string;
  dict: string;
  pocketsphinxLibrary: string;
  sphinxbaseLibrary: string;
  /** More decoder arguments, e.g. `['-fwdflat', 'no']`. */
  extraArgs?: string[];
  /**
   * Streaming decoders normalise cepstra themselves (cmn.ts): PocketSphinx's
   * own normalisation is switched off (`-cmn none`) and `feed()` computes the
   * cepstra with the decoder's front end, normalises them with the session's
   * estimate and hands them to the search. Without it, `feed()` passes raw
   * audio and PocketSphinx's live normalisation applies.
   */
  sessionCmn?: CmnSettings;
}

export interface RecognizedWord {
  word: string;
  /** 10 ms frames, inclusive. */
  startFrame: number;
  endFrame: number;
  /** Posterior probability in [0, 1] (logmath_exp of ps_seg_prob). */
  confidence: number;
}

import { PCM_SAMPLE_RATE as SAMPLE_RATE } from '../../audio/pcm.js';
export { SAMPLE_RATE };
export const FRAME_SECONDS = 0.01;

type Fn = (...args: unknown[]) => unknown;

interface Binding {
  ps_args: Fn;
  cmd_ln_parse_r: Fn;
  cmd_ln_free_r: Fn;
  ps_init: Fn;
  ps_free: Fn;
  ps_start_stream: Fn;
  ps_start_utt: Fn;
  ps_process_raw: Fn;
  ps_end_utt: Fn;
  ps_seg_iter: Fn;
  ps_seg_next: Fn;
  ps_seg_free: Fn;
  ps_seg_word: Fn;
  ps_seg_frames: Fn;
  ps_seg_prob: Fn;
  ps_get_logmath: Fn;
  logmath_exp: Fn;
  err_set_logfp: Fn;
  ps_get_config: Fn;
  fe_init_auto_r: Fn;
  fe_start_utt: Fn;
  fe_start_stream: Fn;
  fe_free: Fn;
  ps_process_cep: Fn;
  fe_process_utt: Fn;
  ckd_free_2d: Fn;
}

let binding: Binding | undefined;

function bind(opts: DecoderOptions): Binding {
  if (binding) return binding;
  const ps = koffi.load(opts.pocketsphinxLibrary);
  const sb = koffi.load(opts.sphinxbaseLibrary);
  binding = {
    ps_args: ps.func('void *ps_args()'),
    cmd_ln_parse_r: sb.func(
      'void *cmd_ln_parse_r(void *inout, void *defn, int argc, const char **argv, int strict)',
    ),
    cmd_ln_free_r: sb.func('int cmd_ln_free_r(void *cmdln)'),
    ps_init: ps.func('void *ps_init(void *config)'),
    ps_free: ps.func('int ps_free(void *ps)'),
    ps_start_stream: ps.func('int ps_start_stream(void *ps)'),
    ps_start_utt: ps.func('int ps_start_utt(void *ps)'),
    ps_process_raw: ps.func(
      'int ps_process_raw(void *ps, const int16_t *data, size_t n, int no_search, int full_utt)',
    ),
    ps_end_utt: ps.func('int ps_end_utt(void *ps)'),
    ps_seg_iter: ps.func('void *ps_seg_iter(void *ps)'),
    ps_seg_next: ps.func('void *ps_seg_next(void *seg)'),
    ps_seg_free: ps.func('void ps_seg_free(void *seg)'),
    ps_seg_word: ps.func('const char *ps_seg_word(void *seg)'),
    ps_seg_frames: ps.func('void ps_seg_frames(void *seg, _Out_ int *sf, _Out_ int *ef)'),
    ps_seg_prob: ps.func('int ps_seg_prob(void *seg, _Out_ int *ascr, _Out_ int *lscr, _Out_ int *lback)'),
    ps_get_logmath: ps.func('void *ps_get_logmath(void *ps)'),
    logmath_exp: sb.func('double logmath_exp(void *lmath, int p)'),
    err_set_logfp: sb.func('void err_set_logfp(void *stream)'),
    ps_get_config: ps.func('void *ps_get_config(void *ps)'),
    fe_init_auto_r: sb.func('void *fe_init_auto_r(void *config)'),
    fe_start_utt: sb.func('int fe_start_utt(void *fe)'),
    fe_start_stream: sb.func('void fe_start_stream(void *fe)'),
    fe_free: sb.func('int fe_free(void *fe)'),
    ps_process_cep: ps.func(
      'int ps_process_cep(void *ps, void *data, int nframes, int no_search, int full_utt)',
    ),
    // mfcc_t is float in Debian's (floating-point) build; the block is ckd_calloc_2d's: row pointers, then the rows.
    fe_process_utt: sb.func(
      'int fe_process_utt(void *fe, const int16_t *spch, size_t nsamps, _Out_ void **cep_block, _Out_ int *nframes)',
    ),
    ckd_free_2d: sb.func('void ckd_free_2d(void *ptr)'),
  };
  // Logging off, process-wide. sphinxbase keeps ONE global log FILE; `-logfn` makes every ps_init
  // fopen a new one and fclose the previous, so decoders starting or stopping in several threads at
  // once double-closed it (heap corruption: "free(): invalid pointer", later segfaults). Setting the
  // global to NULL is a plain store of the same value from any thread, and nothing is ever closed.
  binding.err_set_logfp(null);
  return binding;
}

const featParamsCopies = new Map<string, string>();

/** A copy of the model's feat.params with `-cmn none`, written once per process and model. */
function featParamsWithoutCmn(hmm: string): string {
  let file = featParamsCopies.get(hmm);
  if (file) return file;
  const params = fs.readFileSync(path.join(hmm, 'feat.params'), 'utf8');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pocketsphinx-'));
  file = path.join(dir, 'feat.params');
  fs.writeFileSync(file, params.replace(/^-cmn\s+\S+\s*$/m, '').trimEnd() + '\n-cmn none\n');
  featParamsCopies.set(hmm, file);
  return file;
}

/** Silence, sentence markers and noise fillers (`<sil>`, `<s>`, `[NOISE]`, `++BREATH++`). */
function isFiller(word: string): boolean {
  return word.startsWith('<') || word.startsWith('[') || word.startsWith('++');
}

export class DecoderAbortedError extends Error {
  override name = 'DecoderAbortedError';
}

export class Decoder {
  private readonly b: Binding;
  private ps: unknown;
  private readonly sessionCmn: CmnSettings | undefined;
  /** The running estimate of the utterance being fed (streaming decoders). */
  private normaliser: CmnNormaliser | undefined;
  /** Native scratch rows for ps_process_cep (an `mfcc_t **` of SEARCH_FRAMES rows). */
  private rows: { data: unknown; pointers: unknown } | undefined;
  /** The streaming decoder's own front end (the decoder's flushes its leftovers, unnormalised, at ps_end_utt). */
  private fe: unknown;

  constructor(opts: DecoderOptions) {
    this.b = bind(opts);
    this.sessionCmn = opts.sessionCmn;
    const argv = ['-hmm', opts.hmm, '-lm', opts.lm, '-dict', opts.dict, ...(opts.extraArgs ?? [])];
    // The model's feat.params overrides `-cmn` given as an argument (PocketSphinx 0.8 reads it last), so
    // streaming decoders get a copy saying `-cmn none`. The front end's own silence removal is off too:
    // the VAD has cut the utterance already, and dropped frames would shift the word times.
    if (opts.sessionCmn) argv.push('-featparams', featParamsWithoutCmn(opts.hmm), '-remove_silence', 'no');
    const config = this.b.cmd_ln_parse_r(null, this.b.ps_args(), argv.length, argv, 1);
    if (!config) throw new Error(`pocketsphinx: invalid decoder arguments ${JSON.stringify(argv.slice(6))}`);
    this.ps = this.b.ps_init(config);
    // ps_init keeps its own reference to the configuration.
    this.b.cmd_ln_free_r(config);
    if (!this.ps)
      throw new Error(`pocketsphinx: ps_init failed (models under ${opts.hmm}, ${opts.lm}, ${opts.dict})`);
    if (this.sessionCmn) {
      this.fe = this.b.fe_init_auto_r(this.b.ps_get_config(this.ps));
      if (!this.fe) throw new Error('pocketsphinx: fe_init_auto_r failed');
      const data: unknown = koffi.alloc('float', SEARCH_FRAMES * CEPSTRUM_LENGTH);
      const pointers: unknown = koffi.alloc('void *', SEARCH_FRAMES);
      const base = BigInt(koffi.address(data));
      for (let i = 0; i < SEARCH_FRAMES; i++)
        koffi.encode(pointers, i * 8, 'uint64_t', base + BigInt(i * CEPSTRUM_LENGTH * 4));
      this.rows = { data, pointers };
    }
  }

  /**
   * Decodes the whole clip as one utterance in a single `ps_process_raw`
   * call with `full_utt` set, so cepstral mean normalisation is computed over
   * the clip itself (the model's `-cmn batch`) and the result never depends
   * on earlier requests. The call cannot be interrupted; `aborted` is checked
   * before it.
   */
  decode(pcm: Int16Array, aborted: () => boolean = () => false): RecognizedWord[] {
    if (aborted()) throw new DecoderAbortedError('aborted');
    if (this.sessionCmn) throw new Error('a streaming decoder decodes with begin/feed/end');
    this.begin();
    try {
      this.process(pcm, true);
    } finally {
      this.b.ps_end_utt(this.ps);
    }
    return this.words();
  }

  /**
   * Streaming form: `begin()`, then `feed()` the utterance's audio as it
   * arrives (any chunk sizes), then `end()` for the words. Fed in pieces,
   * PocketSphinx normalises with its live cepstral mean (an estimate carried
   * from the decoder's earlier utterances, updated as frames arrive), and the
   * search runs frame by frame, so `end()` only has the last frames left.
   */
  begin(cmn?: CmnEstimate): void {
    if (!this.ps) throw new Error('decoder closed');
    if (this.sessionCmn && !cmn) throw new Error("a streaming decoder needs the session's CMN estimate");
    this.normaliser = cmn && new CmnNormaliser(cmn, this.sessionCmn);
    if (this.fe) {
      // As ps_start_stream does for the decoder's own front end: its noise estimate starts afresh.
      this.b.fe_start_stream(this.fe);
      this.b.fe_start_utt(this.fe);
    }
    this.startSearch();
  }

  private startSearch(): void {
    // A new stream per utterance: frame numbers (word times) restart at 0.
    this.b.ps_start_stream(this.ps);
    if ((this.b.ps_start_utt(this.ps) as number) < 0) throw new Error('pocketsphinx: ps_start_utt failed');
  }

  feed(pcm: Int16Array): void {
    if (pcm.length === 0) return;
    if (!this.normaliser) return this.process(pcm, false);
    this.feedCepstra(pcm);
  }

  private feedCepstra(pcm: Int16Array): void {
    const b = this.b;
    const block = [null];
    const count = [0];
    // The front end keeps a partial frame's samples for the next call: any chunking gives the same frames.
    if ((b.fe_process_utt(this.fe, pcm, pcm.length, block, count) as number) < 0)
      throw new Error('pocketsphinx: fe_process_utt failed');
    let cep: Float32Array;
    try {
      const n = count[0];
      if (n <= 0) return;
      const rows: unknown = koffi.decode(block[0], 'void *');
      cep = Float32Array.from(koffi.decode(rows, 'float', n * CEPSTRUM_LENGTH) as number[]);
    } finally {
      b.ckd_free_2d(block[0]);
    }
    this.search(this.normaliser!.push(cep));
  }

  /** Normalised cepstra to the search, a few frames per call (larger calls trip an assertion in 0.8's search). */
  private search(out: CmnOutput): void {
    const L = CEPSTRUM_LENGTH;
    const rows = this.rows!;
    if (out.restart) {
      // The utterance is searched again from its first frame: what was searched so far is dropped.
      if ((this.b.ps_end_utt(this.ps) as number) < 0) throw new Error('pocketsphinx: ps_end_utt failed');
      this.startSearch();
    }
    for (const f of out.frames) {
      for (let off = 0; off < f.length; off += L * SEARCH_FRAMES) {
        const group = f.subarray(off, Math.min(f.length, off + L * SEARCH_FRAMES));
        koffi.encode(rows.data, 'float', Array.from(group), group.length);
        if ((this.b.ps_process_cep(this.ps, rows.pointers, group.length / L, 0, 0) as number) < 0)
          throw new Error('pocketsphinx: ps_process_cep failed');
      }
    }
  }

  /** What the session's normalisation did to the utterance being fed (benchmarks). */
  get cmnTrace(): CmnTrace | undefined {
    return this.normaliser?.trace;
  }

  end(): RecognizedWord[] {
    if (!this.ps) throw new Error('decoder closed');
    if (this.normaliser) this.search(this.normaliser.flush());
    this.normaliser = undefined;
    if ((this.b.ps_end_utt(this.ps) as number) < 0) throw new Error('pocketsphinx: ps_end_utt failed');
    return this.words();
  }

  private process(pcm: Int16Array, fullUtterance: boolean): void {
    if ((this.b.ps_process_raw(this.ps, pcm, pcm.length, 0, fullUtterance ? 1 : 0) as number) < 0) {
      throw new Error('pocketsphinx: ps_process_raw failed');
    }
  }

  private words(): RecognizedWord[] {
    const b = this.b;
    const logmath = b.ps_get_logmath(this.ps);
    const words: RecognizedWord[] = [];
    const sf = [0];
    const ef = [0];
    const scratch = [0];
    for (let seg = b.ps_seg_iter(this.ps); seg; seg = b.ps_seg_next(seg)) {
      const raw = b.ps_seg_word(seg) as string;
      if (isFiller(raw)) continue;
      b.ps_seg_frames(seg, sf, ef);
      const prob = b.ps_seg_prob(seg, scratch, scratch, scratch) as number;
      words.push({
        // Alternative pronunciations come back as `word(2)`.
        word: raw.replace(/\(\d+\)$/, ''),
        startFrame: sf[0],
        endFrame: ef[0],
        confidence: Math.min(1, Math.max(0, b.logmath_exp(logmath, prob) as number)),
      });
    }
    return words;
  }

  close(): void {
    if (this.fe) {
      this.b.fe_free(this.fe);
      this.fe = undefined;
    }
    if (this.rows) {
      koffi.free(this.rows.data);
      koffi.free(this.rows.pointers);
      this.rows = undefined;
    }
    if (this.ps) {
      this.b.ps_free(this.ps);
      this.ps = undefined;
    }
  }
}
