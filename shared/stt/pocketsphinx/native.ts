/**
 * Native buffers the decoder hands to sphinxbase's front end and to the
 * search (koffi allocations, freed by their owner).
 */
import koffi from 'koffi';
import { CEPSTRUM_LENGTH } from './cmn.js';

/** Rows one fe_process_frames call may return: the frame, and those held back before speech (`-vad_prespeech` 20). */
export const FRONT_END_ROWS = 128;

export interface FrontEndBuffers {
  /** FRONT_END_ROWS rows of cepstra, and the `mfcc_t **` pointing at them. */
  data: unknown;
  pointers: unknown;
  /** `const int16 **inout_spch` and `size_t *inout_nsamps` of fe_process_frames. */
  spch: unknown;
  nsamps: unknown;
}

/** An `mfcc_t **` over `rows` rows of CEPSTRUM_LENGTH floats: native memory, freed by the caller. */
export function nativeRows(
  values: Float32Array | undefined,
  rows: number,
): { data: unknown; pointers: unknown } {
  const data: unknown = koffi.alloc('float', rows * CEPSTRUM_LENGTH);
  if (values)
    koffi.encode(
      data,
      'float',
      Array.from(values.subarray(0, rows * CEPSTRUM_LENGTH)),
      rows * CEPSTRUM_LENGTH,
    );
  const pointers: unknown = koffi.alloc('void *', rows);
  const base = BigInt(koffi.address(data));
  for (let i = 0; i < rows; i++)
    koffi.encode(pointers, i * 8, 'uint64_t', base + BigInt(i * CEPSTRUM_LENGTH * 4));
  return { data, pointers };
}

export function frontEndBuffers(): FrontEndBuffers {
  return {
    ...nativeRows(undefined, FRONT_END_ROWS),
    spch: koffi.alloc('void *', 1),
    nsamps: koffi.alloc('size_t', 1),
  };
}
