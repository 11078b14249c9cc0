/**
 * The native PocketSphinx and sphinxbase functions the decoder calls
 * (koffi), bound once per process from the Debian libraries.
 */
import koffi from 'koffi';

type Fn = (...args: unknown[]) => unknown;

export interface Binding {
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
  logmath_retain: Fn;
  logmath_free: Fn;
  err_set_logfp: Fn;
  ps_get_config: Fn;
  fe_init_auto_r: Fn;
  fe_start_utt: Fn;
  fe_start_stream: Fn;
  fe_free: Fn;
  ps_process_cep: Fn;
  fe_process_utt: Fn;
  fe_process_frames: Fn;
  fe_end_utt: Fn;
  ckd_free_2d: Fn;
  ps_get_hyp: Fn;
  ps_get_search: Fn;
  ps_get_lm: Fn;
  ps_set_lm: Fn;
  ps_set_search: Fn;
  ngram_wid: Fn;
  ngram_ng_prob: Fn;
  ps_add_word: Fn;
  ngram_model_read: Fn;
  ngram_model_free: Fn;
  ngram_model_retain: Fn;
  ngram_model_set_add: Fn;
  ngram_model_set_remove: Fn;
  ngram_model_set_select: Fn;
  ngram_model_set_interp: Fn;
}

let binding: Binding | undefined;

export function bind(opts: { pocketsphinxLibrary: string; sphinxbaseLibrary: string }): Binding {
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
    // A language model keeps the log-math it was read with without a reference of its own (models.ts).
    logmath_retain: sb.func('void *logmath_retain(void *lmath)'),
    logmath_free: sb.func('int logmath_free(void *lmath)'),
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
    fe_process_frames: sb.func(
      'int fe_process_frames(void *fe, void *inout_spch, void *inout_nsamps, void *buf_cep, _Inout_ int *inout_nframes, void *out_frameidx)',
    ),
    fe_end_utt: sb.func('int fe_end_utt(void *fe, void *out_cepvector, _Out_ int *out_nframes)'),
    ckd_free_2d: sb.func('void ckd_free_2d(void *ptr)'),
    ps_get_hyp: ps.func('const char *ps_get_hyp(void *ps, _Out_ int *score)'),
    ps_get_search: ps.func('const char *ps_get_search(void *ps)'),
    ps_get_lm: ps.func('void *ps_get_lm(void *ps, const char *name)'),
    // A search over a model read once per thread (models.ts): ngram_search_init keeps a reference of its own.
    ps_set_lm: ps.func('int ps_set_lm(void *ps, const char *name, void *lm)'),
    ps_set_search: ps.func('int ps_set_search(void *ps, const char *name)'),
    ngram_wid: sb.func('int ngram_wid(void *model, const char *word)'),
    // history: the preceding words' ids, most recent first.
    ngram_ng_prob: sb.func(
      'int ngram_ng_prob(void *model, int wid, const int *history, int n_hist, _Out_ int *n_used)',
    ),
    // Prompts and vocabularies (bias.ts): words added to the dictionary, models added to the search's set.
    ps_add_word: ps.func('int ps_add_word(void *ps, const char *word, const char *phones, int update)'),
    ngram_model_read: sb.func(
      'void *ngram_model_read(void *config, const char *file, int type, void *lmath)',
    ),
    ngram_model_free: sb.func('int ngram_model_free(void *model)'),
    ngram_model_retain: sb.func('void *ngram_model_retain(void *model)'),
    ngram_model_set_add: sb.func(
      'void *ngram_model_set_add(void *set, void *model, const char *name, float weight, int reuse_widmap)',
    ),
    ngram_model_set_remove: sb.func(
      'void *ngram_model_set_remove(void *set, const char *name, int reuse_widmap)',
    ),
    ngram_model_set_select: sb.func('void *ngram_model_set_select(void *set, const char *name)'),
    ngram_model_set_interp: sb.func(
      'void *ngram_model_set_interp(void *set, const char **names, const float *weights)',
    ),
  };
  // Logging off, process-wide. sphinxbase keeps ONE global log FILE; `-logfn` makes every ps_init
  // fopen a new one and fclose the previous, so decoders starting or stopping in several threads at
  // once double-closed it (heap corruption: "free(): invalid pointer", later segfaults). Setting the
  // global to NULL is a plain store of the same value from any thread, and nothing is ever closed.
  binding.err_set_logfp(null);
  return binding;
}
