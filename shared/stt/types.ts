/**
 * The speech interface every plane uses (segment endpoint, realtime tier,
 * batch workflow). Input is always 16 kHz mono PCM16LE; decoding other formats
 * happens before (shared/audio).
 */
import type { VocabularyEntry } from './bias/compile.js';
export interface TranscribeRequest {
  /** 16 kHz mono signed 16-bit little-endian samples. */
  pcm: Buffer;
  language?: string;
  /** Context hint: remote workers receive it as is; the built-in engine biases its search toward its words. */
  prompt?: string;
  /** The API key's stored vocabulary (built-in engine; docs/decisions/prompts.md). */
  vocabulary?: VocabularyEntry[];
  model?: string;
  /** Pin a specific worker of a remote pool. */
  workerId?: string;
  /** Abort the request (client went away, session closed). */
  signal?: AbortSignal;
  /**
   * Per-attempt timeout of a remote pool for this request, in place of
   * `STT_ATTEMPT_TIMEOUT_MS` (interface section 8: 800 ms, meant for short
   * clips); the wall-clock budget becomes this times `STT_MAX_ATTEMPTS`. The
   * batch workflow sets it from the length of each piece of audio; segment
   * and realtime requests leave it unset. The built-in engine ignores it (its
   * decode limit scales with the audio already).
   */
  attemptTimeoutMs?: number;
  /**
   * Where the first sample lies in the caller's stream (samples from its
   * start): a realtime utterance cut out of a session. An engine that frames
   * audio on a fixed grid (the built-in one: 10 ms) aligns the utterance to
   * the stream's grid, so the words depend on the audio only, not on where
   * the cut fell (the lead-in before it). Times stay relative to `pcm`.
   */
  streamPosition?: number;
}

export interface TranscriptSegment {
  id: number;
  start: number;
  end: number;
  text: string;
  confidence: number;
}

export interface TranscriptWord {
  word: string;
  start: number;
  end: number;
  confidence: number;
}

export interface Transcript {
  text: string;
  language: string;
  /** Seconds of audio. */
  duration: number;
  segments: TranscriptSegment[];
  words: TranscriptWord[];
}

export interface TranscribeResult extends Transcript {
  /** Which worker produced the result (`builtin-0`, or a remote worker id). */
  workerId: string;
  fallbackUsed: boolean;
  /** Milliseconds spent in the engine itself (decode time), for overhead figures. */
  engineMs: number;
}

/**
 * Streaming form (the built-in engine in the realtime tier): a session's
 * utterance is fed while it is spoken, so that its end leaves only the last
 * frames to decode. One `SpeechStream` per realtime session holds what
 * carries from one utterance to the next (the built-in engine's feature
 * normalisation estimate).
 */
export interface SpeechStream {
  /**
   * Starts an utterance on a pooled decoder; null when none is free or the
   * language is not one the stream serves: the caller uses the clip form.
   */
  begin(opts: {
    language?: string;
    /** As TranscribeRequest.streamPosition. */ streamPosition?: number;
    /** As TranscribeRequest's: the utterance's prompt and the key's vocabulary. */
    prompt?: string;
    vocabulary?: VocabularyEntry[];
  }): StreamingUtterance | null;
  close(): void;
}

export interface StreamingUtterance {
  /** The next piece of the utterance's audio (16 kHz mono PCM16LE). */
  push(pcm: Buffer): void;
  /** The utterance ended: the transcript of everything pushed. */
  finish(signal?: AbortSignal): Promise<TranscribeResult>;
  /** Abandons the utterance (its decoder goes back to the pool). */
  cancel(): void;
  /**
   * How likely the words decoded so far are a finished sentence: the
   * language model's probability of the sentence end after the last two
   * words of the partial hypothesis, and those words. Lets a pause shorter
   * than the silence window end the turn (docs/decisions/turns.md, "Turn ends").
   */
  sentenceEnd?(): Promise<SentenceEndCues>;
}

/** What the partial hypothesis says about a sentence end (StreamingUtterance.sentenceEnd). */
export interface SentenceEndCues {
  /** The model's probability of the sentence end after the last two words (0 with no words). */
  probability: number;
  /** N-gram order behind it: 3 is a trigram the model knows; lower ones are backed off (misheard words get those). */
  order: number;
  /** The last words of the partial hypothesis, at most three (fillers and alternates' `(2)` dropped). */
  words: string[];
}

export interface SpeechEngine {
  transcribe(req: TranscribeRequest): Promise<TranscribeResult>;
  /** The streaming form, when the engine has one (remote workers only take whole clips). */
  openStream?(): SpeechStream;
  /**
   * Loads the streaming form's decoders now and resolves when they can take audio (the realtime tier
   * calls it before it listens, so the first sessions after a start do not wait for them).
   */
  startStreaming?(): Promise<void>;
  /** Languages the engine can serve (ISO-639-1), or ['*'] for any. */
  languages(): string[];
  /** True when at least one worker can take work now. */
  healthy(): Promise<boolean>;
  close(): Promise<void>;
}

export class SpeechError extends Error {
  constructor(
    message: string,
    /** transcription_failed | unsupported_language | timeout | ... */
    readonly code: string,
    readonly retryable = true,
  ) {
    super(message);
    this.name = 'SpeechError';
  }
}

/**
 * The engine is up but behind: every decoder busy, or a decode that waited or
 * ran past its limit because the cores are shared by more work than they hold.
 * The utterance or request fails alone; this is queueing, not a broken engine,
 * so it never counts toward a circuit breaker (overload is refused at admission).
 */
export class EngineBusyError extends SpeechError {
  constructor(message: string, code: 'timeout' | 'engine_overloaded') {
    super(message, code, true);
    this.name = 'EngineBusyError';
  }
}
