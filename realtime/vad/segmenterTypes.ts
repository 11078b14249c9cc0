/** What the segmenter (segmenter.ts) takes and gives: its options and its events (its model source: vad.ts). */
import type { Prosody } from './prosody.js';

export type StopReason = 'end_of_speech' | 'target_duration' | 'max_duration' | 'flush';

export type SegmenterEvent =
  | { type: 'start'; /** stream position of the utterance's first sample, ms */ audioStartMs: number }
  | { type: 'audio'; pcm: Buffer }
  /** The open utterance has paused `sentenceEndSilenceMs`: the segmenter waits for `verdict(pause, ms)`. */
  | {
      type: 'pause';
      pause: number;
      /** Silence so far (ms). */
      silenceMs: number;
      /** Stream position where the speech before the pause ended (ms). */
      atMs: number;
      /** The longest of the speaker's last pauses inside utterances, after which they went on (ms; 0: none yet). */
      speakerPauseMs: number;
      /** The phrase before the pause: pitch and loudness against the utterance's. */
      prosody: Prosody;
    }
  | {
      type: 'stop';
      reason: StopReason;
      pcm: Buffer;
      /** Windows flagged as speech in the utterance, in ms. */
      speechMs: number;
      audioStartMs: number;
      audioEndMs: number;
    };

export interface SegmenterOptions {
  /** RMS gate in dBFS below which an idle stream's window is silence without the model. */
  gateDbfs: number;
  /** Hand the classifier back after this much gated silence. */
  releaseAfterMs: number;
  /**
   * Speech hold: inside an open utterance, a window at least this many dB
   * above the stream's noise floor, right after a model "speech" answer, is
   * speech without running the model (0 disables). The model still runs at
   * least every `maxSkip + 1` windows and on every quieter window, so pauses
   * (what ends utterances) are always judged by silero. Values: VAD_TUNING
   * in shared/config/realtime.ts; without `maxSkip` the hold skips nothing.
   */
  holdDb?: number;
  maxSkip?: number;
  /**
   * Quiet ends: inside an open utterance, a window at most this many dB above
   * the stream's noise floor (or below the gate), and 20 dB below the
   * utterance's loudest window, is silence whatever the model says
   * (speechFlags.ts); 0 or absent: the model alone.
   */
  quietDb?: number;
  /**
   * A candidate (speech heard, not yet `minSpeechMs` of it) is broken by
   * silence this long, or the session's `silenceMs` when longer: a quiet
   * phrase heard in bursts stays one candidate. Absent: `silenceMs`.
   */
  candidateGapMs?: number;
  /** Emit `audio` events while an utterance is open (see above). */
  streamAudio?: boolean;
}
