/**
 * PocketSphinx through FFI (koffi). Debian ships the "0.8+5prealpha" API:
 * `ps_init(cmd_ln_t *)` built from `cmd_ln_parse_r(NULL, ps_args(), argc,
 * argv, strict)` (libsphinxbase), not the 5.x `ps_config_t`. One Decoder is
 * single-threaded; each worker thread owns one.
 */
import koffi from 'koffi';

export interface DecoderOptions {
  hmm: string;
  lm: string;
  dict: string;
  pocketsphinxLibrary: string;
  sphinxbaseLibrary: string;
  /** More decoder arguments, e.g. `['-fwdflat', 'no']`. */
  extraArgs?: string[];
}

export interface RecognizedWord {
  word: string;
  /** 10 ms frames, inclusive. */
  startFrame: number;
  endFrame: number;
  /** Posterior probability in [0, 1] (logmath_exp of ps_seg_prob). */
  confidence: number;
}

export const SAMPLE_RATE = 16_000;
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
  };
  // Logging off, process-wide. sphinxbase keeps ONE global log FILE; `-logfn` makes every ps_init
  // fopen a new one and fclose the previous, so decoders starting or stopping in several threads at
  // once double-closed it (heap corruption: "free(): invalid pointer", later segfaults). Setting the
  // global to NULL is a plain store of the same value from any thread, and nothing is ever closed.
  binding.err_set_logfp(null);
  return binding;
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

  constructor(opts: DecoderOptions) {
    this.b = bind(opts);
    const argv = ['-hmm', opts.hmm, '-lm', opts.lm, '-dict', opts.dict, ...(opts.extraArgs ?? [])];
    const config = this.b.cmd_ln_parse_r(null, this.b.ps_args(), argv.length, argv, 1);
    if (!config) throw new Error(`pocketsphinx: invalid decoder arguments ${JSON.stringify(argv.slice(6))}`);
    this.ps = this.b.ps_init(config);
    // ps_init keeps its own reference to the configuration.
    this.b.cmd_ln_free_r(config);
    if (!this.ps)
      throw new Error(`pocketsphinx: ps_init failed (models under ${opts.hmm}, ${opts.lm}, ${opts.dict})`);
  }

  /**
   * Decodes the whole clip as one utterance in a single `ps_process_raw`
   * call with `full_utt` set, so cepstral mean normalisation is computed over
   * the clip itself ("-cmn batch") and the result never depends on earlier
   * requests. The call cannot be interrupted; `aborted` is checked before it.
   */
  decode(pcm: Int16Array, aborted: () => boolean = () => false): RecognizedWord[] {
    const b = this.b;
    if (!this.ps) throw new Error('decoder closed');
    if (aborted()) throw new DecoderAbortedError('aborted');
    // A new stream per clip: frame numbers (word times) restart at 0.
    b.ps_start_stream(this.ps);
    if ((b.ps_start_utt(this.ps) as number) < 0) throw new Error('pocketsphinx: ps_start_utt failed');
    try {
      if ((b.ps_process_raw(this.ps, pcm, pcm.length, 0, 1) as number) < 0) {
        throw new Error('pocketsphinx: ps_process_raw failed');
      }
    } finally {
      b.ps_end_utt(this.ps);
    }
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
    if (this.ps) {
      this.b.ps_free(this.ps);
      this.ps = undefined;
    }
  }
}
