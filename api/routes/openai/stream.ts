/**
 * `stream: true` on POST /v1/audio/transcriptions: OpenAI's transcription
 * stream events as server-sent events, sent as the words are decoded (issue
 * 39: every delta used to leave after the whole decode). The clip is cut at
 * its pauses as a batch chunk is (api/batch/pieces.ts: at least 5 s,
 * joined to 10 s while the voice stays the same; shorter pieces lost
 * words), a long first piece decoded first as its head (streamPieces), the
 * pieces are transcribed in order, and each one's
 * text leaves as a `transcript.text.delta` as soon as it is decoded;
 * `transcript.text.done` with the full text (the deltas joined) comes last,
 * once the clip is billed. The answer starts with the first piece that has
 * words, so a failure before it is an ordinary error response; a failure
 * after it ends the stream with an `error` event.
 */
import type { Context } from 'koa';
import type { TranscribeResult } from '../../../shared/stt/types.js';
import type { OnPiece, Piece } from '../../../shared/transcribe/long.js';
import { energyEnvelope, splitUtterances } from '../../../shared/audio/slicing.js';
import type { DecodedAudio } from '../../../shared/audio/index.js';
import { type PieceConfig, utterancePieces } from '../../batch/pieces.js';
import { ApiError } from '../../http/errors.js';

/** The multipart `stream` field: absent or `false` is a plain answer, `true` a stream. */
export function wantsStream(value: string | undefined): boolean {
  if (value === undefined || value === '' || value === 'false') return false;
  if (value === 'true') return true;
  throw new ApiError(400, 'invalid_request', 'Field "stream" must be true or false.');
}

/** A first piece longer than this is cut short, so the first delta does not wait for all of it. */
export const FIRST_PIECE_MAX_SECONDS = 12;
/** The short first piece ends at the first pause after this much audio… */
export const FIRST_PIECE_MIN_SECONDS = 4;
/** …of at least this long (a shorter pause than the batch cut's 0.4 s: a long first phrase has few)… */
const FIRST_PIECE_PAUSE_SECONDS = 0.2;
/** …that leaves at least this much of the batch piece after it. */
const FIRST_PIECE_REST_SECONDS = 4;

/**
 * Where a streamed clip is cut (undefined for spooled long audio: its 60 s
 * plan): as batch cuts a chunk, except that a first piece longer than
 * FIRST_PIECE_MAX_SECONDS goes first only up to its first pause after
 * FIRST_PIECE_MIN_SECONDS, so the first delta waits for the decode of a few
 * seconds, not of the whole piece (issue 39 target: within 2 s of the
 * upload's end). Then the whole piece is decoded, as batch would, and only
 * its words after that pause are sent: cut there for good, the rest of the
 * piece lost its context (the minute of speech: 23.4 % → 26.0 % WER, "whose
 * place" heard as "who's place"); decoded whole again it keeps the batch
 * cut's words at the cost of decoding the short piece twice. A clip whose
 * first piece is shorter (jfk.wav, 11 s) is transcribed as before, and
 * streamed or not gives the same text.
 */
export async function streamPieces(audio: DecodedAudio, cfg: PieceConfig): Promise<Piece[] | undefined> {
  if (!audio.pcm) return undefined;
  const pieces = await utterancePieces(audio.pcm, cfg);
  const first = pieces[0];
  if (!cfg.splitUtterances || !first || first.end - first.start <= FIRST_PIECE_MAX_SECONDS) return pieces;
  const pauses = splitUtterances(energyEnvelope(audio.pcm), audio.seconds, {
    minPauseSeconds: FIRST_PIECE_PAUSE_SECONDS,
    maxUtteranceSeconds: cfg.utteranceMaxSeconds,
  });
  const cut = pauses
    .map((p) => p.start)
    .find((t) => t >= first.start + FIRST_PIECE_MIN_SECONDS && t <= first.end - FIRST_PIECE_REST_SECONDS);
  if (cut === undefined) return pieces;
  return [{ ...first, end: cut }, { ...first, keepFrom: cut }, ...pieces.slice(1)].map((p, index) => ({
    ...p,
    index,
  }));
}

/** One streamed answer: opened with the first delta (or at the end), events written as they come. */
export class TranscriptStream {
  private opened = false;
  private text = '';

  constructor(private readonly ctx: Context) {}

  /** Hands each decoded piece's words on as a delta. */
  readonly onPiece: OnPiece = (words, from) => {
    const piece = words
      .map((w) => w.word)
      .join(' ')
      .trim();
    if (!piece) return;
    this.open(from);
    const delta = this.text ? ` ${piece}` : piece;
    this.text += delta;
    this.write({ type: 'transcript.text.delta', delta });
  };

  /** The last event: the full text. */
  done(result: Pick<TranscribeResult, 'workerId' | 'fallbackUsed'>): void {
    this.open(result);
    this.write({ type: 'transcript.text.done', text: this.text });
    this.ctx.res.end();
  }

  /** True once the answer has started (an error can then only be an event). */
  get started(): boolean {
    return this.opened;
  }

  /** Ends a started stream with an `error` event. */
  fail(err: unknown): void {
    const e = err as { code?: string; message?: string };
    this.write({
      type: 'error',
      error: { code: e.code ?? 'transcription_failed', message: e.message ?? String(err) },
    });
    this.ctx.res.end();
  }

  private open(from: Pick<TranscribeResult, 'workerId' | 'fallbackUsed'>): void {
    if (this.opened) return;
    this.opened = true;
    const { ctx } = this;
    ctx.set('X-Worker-Id', from.workerId);
    ctx.set('X-Fallback-Used', from.fallbackUsed ? '1' : '0');
    ctx.status = 200; // for the access log; the body is written here, not by Koa
    ctx.respond = false;
    ctx.res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
    });
    ctx.res.flushHeaders();
  }

  private write(event: object): void {
    if (!this.ctx.res.writableEnded) this.ctx.res.write(`data: ${JSON.stringify(event)}\n\n`);
  }
}
