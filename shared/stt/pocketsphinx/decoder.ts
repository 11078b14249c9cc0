/**
 * PocketSphinx through FFI (koffi). Debian ships the "0.8+5prealpha" API:
 * `ps_init(cmd_ln_t *)` built from `cmd_ln_parse_r(NULL, ps_args(), argc,
 * argv, strict)` (libsphinxbase), not the 5.x `ps_config_t`. One Decoder is
 * single-threaded; each worker thread owns one or more, and those of a
 * thread share their language models (models.ts).
 */
import { bind, type Binding } from './binding.js';
import koffi from 'koffi';
import { FRONT_END_ROWS, frontEndBuffers, nativeRows, type FrontEndBuffers } from './native.js';
import { SearchBias } from './bias.js';
import { borrow, release, type SharedModel } from './models.js';
import { featParamsWithoutCmn, modelKey } from './args.js';
import type { BiasSpec } from '../bias/compile.js';
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
/** The front end's frame shift and window in samples at 16 kHz (`-frate 100`, `-wlen 0.025625`). */
const FRAME_SHIFT = 160;
const FRAME_SAMPLES = 410;

/**
 * Samples to drop from the front of an utterance that starts `streamPosition`
 * samples into its stream, so that its frames fall on the stream's own 10 ms
 * grid: where a cut falls (a VAD window, after whatever lead-in) then no
 * longer shifts the frames against the speech, and with them the words.
 */
export function gridSkip(streamPosition: number | undefined): number {
  if (streamPosition === undefined || streamPosition <= 0) return 0;
  return (FRAME_SHIFT - (Math.round(streamPosition) % FRAME_SHIFT)) % FRAME_SHIFT;
}

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
  /** The lexicon's `extras` model (bias/lexicon.ts): the decoder takes prompts (bias.ts). */
  extras?: string;
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

/** Silence, sentence markers and noise fillers (`<sil>`, `<s>`, `[NOISE]`, `++BREATH++`). */
function isFiller(word: string): boolean {
  return word.startsWith('<') || word.startsWith('[') || word.startsWith('++');
}

/** PocketSphinx's name for the search ps_init would have made from `-lm`. */
const SEARCH = '_default';
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
  /** The clip form's front end and its native buffers (decode()). */
  private clipFe: unknown;
  private clipIo: FrontEndBuffers | undefined;
  /** The search's language model (sentenceEnd). */
  private lm: unknown;
  private searchBias: SearchBias | undefined;
  /** The thread's models this decoder holds (models.ts). */
  private readonly models: SharedModel[] = [];

  constructor(opts: DecoderOptions) {
    this.b = bind(opts);
    this.sessionCmn = opts.sessionCmn;
    // No `-lm`: ps_init would read a copy of its own; the search gets the thread's model below.
    const argv = ['-hmm', opts.hmm, '-dict', opts.dict, ...(opts.extraArgs ?? [])];
    // The model's feat.params overrides `-cmn` given as an argument (PocketSphinx 0.8 reads it last), so
    // streaming decoders get a copy saying `-cmn none`. The front end's own silence removal is off too:
    // the VAD has cut the utterance already, and dropped frames would shift the word times.
    if (opts.sessionCmn) argv.push('-featparams', featParamsWithoutCmn(opts.hmm), '-remove_silence', 'no');
    const config = this.b.cmd_ln_parse_r(null, this.b.ps_args(), argv.length, argv, 1);
    if (!config) throw new Error(`pocketsphinx: invalid decoder arguments ${JSON.stringify(argv.slice(4))}`);
    this.ps = this.b.ps_init(config);
    // ps_init keeps its own reference to the configuration.
    this.b.cmd_ln_free_r(config);
    if (!this.ps) throw new Error(`pocketsphinx: ps_init failed (models under ${opts.hmm}, ${opts.dict})`);
    try {
      this.loadSearch(opts, modelKey(argv));
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** The search over the thread's general model, and the prompt's models over its `extras` (bias.ts). */
  private loadSearch(opts: DecoderOptions, key: string): void {
    const general = borrow(this.b, this.ps, opts.lm, key, 'general');
    this.models.push(general);
    if ((this.b.ps_set_lm(this.ps, SEARCH, general.model) as number) < 0)
      throw new Error(`pocketsphinx: no search over ${opts.lm}`);
    if ((this.b.ps_set_search(this.ps, SEARCH) as number) < 0)
      throw new Error('pocketsphinx: ps_set_search failed');
    if (this.sessionCmn) {
      this.fe = this.b.fe_init_auto_r(this.b.ps_get_config(this.ps));
      if (!this.fe) throw new Error('pocketsphinx: fe_init_auto_r failed');
      this.rows = nativeRows(undefined, SEARCH_FRAMES);
    }
    if (opts.extras) {
      const extras = borrow(this.b, this.ps, opts.extras, key, 'extras');
      this.models.push(extras);
      this.searchBias = new SearchBias(this.b, this.ps, this.b.ps_get_lm(this.ps, SEARCH), extras);
    }
  }

  /** The prompt and vocabulary of the next utterance (undefined: none); a no-op on a decoder without `extras`. */
  bias(spec: BiasSpec | undefined): void {
    this.searchBias?.apply(spec);
  }

  /** What applying the spec would cost: 0 held already, 1 a small model to read, 2 words to add. */
  biasCost(spec: BiasSpec | undefined): number {
    return this.searchBias?.cost(spec) ?? 0;
  }

  /** The decoder has added as many words as it may hold: its owner replaces it. */
  get wornOut(): boolean {
    return this.searchBias?.wornOut ?? false;
  }

  /**
   * Decodes the whole clip as one utterance, normalised over the clip itself
   * (the model's `-cmn batch`), so the result never depends on earlier
   * requests. The front end's silence removal (`-remove_silence`, on by
   * default) drops the frames of pauses before the search, and PocketSphinx
   * reports word times in the frames it kept: every pause before a word
   * shortened its time (a word after 3 s of pauses came out 3 s early). So
   * the clip's frames are computed here, one frame shift at a time, which
   * shows which input frame each kept frame is; the kept frames go to the
   * search in one call (`full_utt`, as `ps_process_raw` would), and word
   * times are mapped back to the clip's own timeline. The call cannot be
   * interrupted; `aborted` is checked before it.
   */
  decode(pcm: Int16Array, aborted: () => boolean = () => false): RecognizedWord[] {
    if (aborted()) throw new DecoderAbortedError('aborted');
    if (this.sessionCmn) throw new Error('a streaming decoder decodes with begin/feed/end');
    const { cepstra, frames, inputFrame } = this.keptFrames(pcm);
    if (aborted()) throw new DecoderAbortedError('aborted');
    this.startSearch();
    try {
      if (frames > 0) {
        const rows = nativeRows(cepstra, frames);
        try {
          if ((this.b.ps_process_cep(this.ps, rows.pointers, frames, 0, 1) as number) < 0)
            throw new Error('pocketsphinx: ps_process_cep failed');
        } finally {
          koffi.free(rows.data);
          koffi.free(rows.pointers);
        }
      }
    } finally {
      this.b.ps_end_utt(this.ps);
    }
    const last = frames - 1;
    return this.words().map((w) => ({
      ...w,
      startFrame: inputFrame[Math.min(w.startFrame, last)],
      endFrame: inputFrame[Math.min(w.endFrame, last)],
    }));
  }

  /**
   * The clip's cepstra as the decoder's own front end keeps them (silence
   * removed), and for each kept frame its index in the clip. Fed one frame
   * shift per call, the front end returns each call either nothing (a frame
   * dropped, or held back while it decides), or the newest frame, or, when
   * speech starts, the frames it held back (those just before) with it.
   */
  private keptFrames(pcm: Int16Array): { cepstra: Float32Array; frames: number; inputFrame: Int32Array } {
    const b = this.b;
    const fe = (this.clipFe ??= this.newFrontEnd());
    const io = (this.clipIo ??= frontEndBuffers());
    b.fe_start_stream(fe);
    b.fe_start_utt(fe);
    const L = CEPSTRUM_LENGTH;
    let cepstra = new Float32Array(Math.max(1, Math.ceil(pcm.length / FRAME_SHIFT)) * L);
    let inputFrame = new Int32Array(cepstra.length / L);
    let kept = 0;
    const keep = (n: number, newest: number) => {
      if (n <= 0) return;
      if ((kept + n) * L > cepstra.length) {
        const grown = new Float32Array((kept + n) * L * 2);
        grown.set(cepstra);
        cepstra = grown;
        const idx = new Int32Array(grown.length / L);
        idx.set(inputFrame);
        inputFrame = idx;
      }
      cepstra.set(koffi.decode(io.data, 'float', n * L) as number[], kept * L);
      for (let i = 0; i < n; i++) inputFrame[kept + i] = Math.max(0, newest - n + 1 + i);
      kept += n;
    };
    // The clip in native memory once; fe_process_frames advances the sample pointer itself.
    const samples: unknown = koffi.alloc('int16_t', Math.max(1, pcm.length));
    const count = [0];
    try {
      if (pcm.length > 0) koffi.encode(samples, 'int16_t', pcm, pcm.length);
      koffi.encode(io.spch, 'void *', samples);
      for (let at = 0; at < pcm.length; at += FRAME_SHIFT) {
        const n = Math.min(FRAME_SHIFT, pcm.length - at);
        koffi.encode(io.nsamps, 'size_t', n);
        count[0] = FRONT_END_ROWS;
        if ((b.fe_process_frames(fe, io.spch, io.nsamps, io.pointers, count, null) as number) < 0)
          throw new Error('pocketsphinx: fe_process_frames failed');
        // Frames complete once the samples so far cover a frame's window: the newest one's index.
        const received = at + n;
        keep(count[0], received >= FRAME_SAMPLES ? Math.floor((received - FRAME_SAMPLES) / FRAME_SHIFT) : -1);
      }
      // The last, partial frame (as ps_process_raw's full utterance does).
      if ((b.fe_end_utt(fe, io.data, count) as number) < 0)
        throw new Error('pocketsphinx: fe_end_utt failed');
      keep(count[0], kept > 0 ? inputFrame[kept - 1] + 1 : 0);
    } finally {
      koffi.free(samples);
    }
    return { cepstra, frames: kept, inputFrame };
  }

  private newFrontEnd(): unknown {
    const fe = this.b.fe_init_auto_r(this.b.ps_get_config(this.ps));
    if (!fe) throw new Error('pocketsphinx: fe_init_auto_r failed');
    return fe;
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

  /**
   * Streaming form, mid-utterance: the language model's probability that the
   * sentence ends after the words decoded so far (the partial hypothesis's
   * last two words as history; 0 when no word has been decoded yet).
   */
  sentenceEnd(): { probability: number; order: number; words: string[] } {
    if (!this.ps) throw new Error('decoder closed');
    // During a session's bootstrap the search lags by the normaliser's lookahead: it catches up first.
    if (this.normaliser) this.search(this.normaliser.catchUp());
    const hyp = this.b.ps_get_hyp(this.ps, [0]) as string | null;
    const words = (hyp ?? '')
      .split(' ')
      .filter((w) => w !== '' && !isFiller(w))
      .map((w) => w.replace(/\(\d+\)$/, ''));
    const none = { probability: 0, order: 0, words: words.slice(-3) };
    if (words.length === 0) return none;
    const lm = (this.lm ??= this.b.ps_get_lm(this.ps, this.b.ps_get_search(this.ps)));
    if (!lm) return none;
    const history = words
      .slice(-2)
      .reverse()
      .map((w) => this.b.ngram_wid(lm, w) as number);
    const used = [0];
    const p = this.b.ngram_ng_prob(lm, this.b.ngram_wid(lm, '</s>'), history, history.length, used) as number;
    // The order tells a trigram the model knows from a backed-off estimate, which is what garbled words
    // get (measured on test/audio/corpus/turns: misheard halves of sentences scored 0.18-0.30 from bigrams).
    const probability = this.b.logmath_exp(this.b.ps_get_logmath(this.ps), p) as number;
    return { probability, order: used[0], words: none.words };
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
    if (this.clipFe) {
      this.b.fe_free(this.clipFe);
      this.clipFe = undefined;
    }
    if (this.clipIo) {
      for (const p of [this.clipIo.data, this.clipIo.pointers, this.clipIo.spch, this.clipIo.nsamps])
        koffi.free(p);
      this.clipIo = undefined;
    }
    if (this.fe) {
      this.b.fe_free(this.fe);
      this.fe = undefined;
    }
    if (this.rows) {
      koffi.free(this.rows.data);
      koffi.free(this.rows.pointers);
      this.rows = undefined;
    }
    this.lm = undefined;
    this.searchBias?.close();
    if (this.ps) {
      this.b.ps_free(this.ps);
      this.ps = undefined;
    }
    // The search's sets held references of their own: the thread's copies go when no decoder holds them.
    for (const m of this.models.splice(0)) release(this.b, m);
  }
}
