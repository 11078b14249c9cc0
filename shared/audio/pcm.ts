/**
 * The one audio format every tier hands around internally: 16 kHz mono
 * PCM16LE (what the decoder produces, the VAD and the speech engines read).
 */

/** Samples per second. */
export const PCM_SAMPLE_RATE = 16_000;
/** Two bytes per sample, one channel. */
export const PCM_BYTES_PER_SECOND = PCM_SAMPLE_RATE * 2;

/** Seconds of audio in a 16 kHz mono PCM16 buffer (or a byte count). */
export function pcmDurationSeconds(pcm: Buffer | number): number {
  const bytes = typeof pcm === 'number' ? pcm : pcm.length;
  return Math.floor(bytes / 2) / PCM_SAMPLE_RATE;
}
