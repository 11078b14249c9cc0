/**
 * Long uploads on the synchronous planes (issue 22): audio too long to hold
 * in memory is spooled to a file as it is decoded (shared/audio, decodeUpload)
 * and transcribed here a piece at a time, so memory stays bounded by one
 * piece whatever the upload decodes to (hours of silence compress to almost
 * nothing).
 *
 * Pieces are cut as the batch plane cuts its chunks: about LONG_PIECE_SECONDS
 * each, each cut moved into the quietest pause near it (planSlices). A piece
 * whose loudest 10 ms frame stays below SILENT_PIECE_DB holds nothing to
 * transcribe and is not sent to the engine. Pieces go to the engine one after
 * another: one upload holds at most one decoder, as a clip does.
 */
import type { DecodedAudio } from '../audio/index.js';
import { energyEnvelope, FRAME_SECONDS, planSlices, sliceByteRange, type Slice } from '../audio/slicing.js';
import { buildTranscript } from '../stt/transcript.js';
import type { SpeechEngine, TranscribeRequest, TranscribeResult, TranscriptWord } from '../stt/types.js';

/** Length of the pieces long audio is transcribed in (the largest the engine takes at its best). */
export const LONG_PIECE_SECONDS = 60;
/** How far a cut may move from its ideal place to sit in a pause. */
const CUT_SEARCH_SECONDS = 10;
/** A piece whose loudest frame is below this (dBFS) is silence: nothing to transcribe. */
export const SILENT_PIECE_DB = -60;

/**
 * A piece to transcribe. `keepFrom` (seconds, on the audio's time line): the
 * words before it were already given by a shorter piece (a stream's first,
 * api/routes/openai/stream.ts), so this one is decoded from `start` for its
 * context and keeps only the words centred at or after `keepFrom`.
 */
export interface Piece extends Slice {
  keepFrom?: number;
}

/** A piece as it is transcribed: its words, on the audio's time line, in order (streaming answers). */
export type OnPiece = (
  words: TranscriptWord[],
  from: Pick<TranscribeResult, 'workerId' | 'fallbackUsed'>,
) => void | Promise<void>;

export async function transcribePieces(
  engine: Pick<SpeechEngine, 'transcribe'>,
  audio: DecodedAudio,
  req: Omit<TranscribeRequest, 'pcm'>,
  opts: { slices?: Piece[]; onPiece?: OnPiece } = {},
): Promise<TranscribeResult> {
  const envelope = audio.envelope ?? energyEnvelope(audio.pcm ?? Buffer.alloc(0));
  const slices: Piece[] =
    opts.slices ??
    planSlices(envelope, audio.seconds, {
      segmentSeconds: LONG_PIECE_SECONDS,
      maxSearchSeconds: CUT_SEARCH_SECONDS,
    }).slices;
  const words: TranscriptWord[] = [];
  let language = '';
  let workerId = '';
  let fallbackUsed = false;
  let engineMs = 0;
  for (const slice of slices) {
    req.signal?.throwIfAborted();
    if (loudest(envelope, slice.start, slice.end) < SILENT_PIECE_DB) continue;
    const { start, end } = sliceByteRange(slice);
    const r = await engine.transcribe({ ...req, pcm: await audio.read(start, end) });
    language ||= r.language;
    workerId = r.workerId;
    fallbackUsed ||= r.fallbackUsed;
    engineMs += r.engineMs;
    const keepFrom = slice.keepFrom ?? -Infinity;
    const piece = r.words
      .map((w) => ({ ...w, start: slice.start + w.start, end: slice.start + w.end }))
      .filter((w) => (w.start + w.end) / 2 >= keepFrom);
    words.push(...piece);
    await opts.onPiece?.(piece, r);
  }
  if (!workerId) {
    // All silence: the engine still says who answers (an empty clip is a valid, empty transcript).
    const r = await engine.transcribe({ ...req, pcm: Buffer.alloc(0) });
    ({ workerId, fallbackUsed, engineMs } = r);
    language = r.language;
  }
  return {
    ...buildTranscript(words, audio.seconds, language || req.language || 'en'),
    workerId,
    fallbackUsed,
    engineMs,
  };
}

/** The loudest 10 ms frame (dBFS) between two times. */
function loudest(envelope: Float32Array, from: number, to: number): number {
  let max = -Infinity;
  const end = Math.min(envelope.length, Math.ceil(to / FRAME_SECONDS));
  for (let f = Math.max(0, Math.floor(from / FRAME_SECONDS)); f < end; f++)
    if (envelope[f] > max) max = envelope[f];
  return max;
}
