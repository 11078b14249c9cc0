/**
 * Turn ends (issue 38): when a pause in the open utterance is judged, how
 * much silence ends the turn. A voice agent answers each final, so a turn
 * that ends inside a sentence interrupts its user, and one that waits a fixed
 * window after every sentence answers late. The verdict combines what the
 * service knows at the pause: the streaming decoder's words so far (the
 * language model's probability of a sentence end after them; a last word
 * that cannot end a sentence, such as an article, a preposition or a
 * conjunction; a hesitation such as "um"), the phrase's prosody (pitch and
 * loudness fall at a sentence end: realtime/vad/prosody.ts) and the
 * speaker's own pauses (someone who paused 600 ms and went on is given
 * longer). Each eagerness level (TURN_LEVELS) turns the verdict into a wait.
 * Tuned on test/audio/corpus/dialog (docs/decisions/turns.md, "Turn ends").
 */
import { TURN_LEVELS, type Eagerness } from '../shared/config/realtime.js';
import type { Logger } from 'pino';
import type { SentenceEndCues, StreamingUtterance } from '../shared/stt/types.js';
import type { Prosody } from './vad/prosody.js';

/** How the words so far read. */
export type Reading = 'finished' | 'likely' | 'unsure' | 'continues';

/** Words after which an English sentence goes on: articles, possessives, subject pronouns, conjunctions. */
const NEVER_ENDS = new Set(
  (
    'a an the my your our their its i we he she they ' +
    'of and or but nor because although though if whereas than unless as very every'
  ).split(' '),
);
/**
 * Function words that usually go on but can end a sentence ("for you", "where it is", "yes i can",
 * "over there", "i like that"): the language model's trigram decides.
 */
const MAY_END = new Set(
  (
    'to in on at for with from by about into onto over under between through during without within ' +
    'is are was were be been being am do does did have has had will would shall should can could may might must ' +
    'you it him her them me us his this these those that which who whose whom there ' +
    'so when while since until more most some any each no not'
  ).split(' '),
);
/** Hesitation sounds (as the decoder spells them). */
const HESITATIONS = new Set(['um', 'uh', 'umm', 'uhm', 'er', 'erm', 'hmm', 'mm', 'ah']);

/** What kind of word ends the words so far (logged instead of the word: transcripts stay out of logs). */
export function lastWordClass(
  cues: SentenceEndCues | null,
): 'none' | 'hesitation' | 'continues' | 'function' | 'other' {
  const last = cues?.words.at(-1);
  if (last === undefined) return 'none';
  if (HESITATIONS.has(last)) return 'hesitation';
  return NEVER_ENDS.has(last) ? 'continues' : MAY_END.has(last) ? 'function' : 'other';
}

/** What the decoder's words and the voice say about the pause. */
export function readPause(cues: SentenceEndCues | null, prosody: Prosody): Reading {
  const last = cues?.words.at(-1);
  // Octave errors of the pitch tracker give 12 semitones and more: not a rise or a fall.
  const fell = prosody.pitchSt <= -1.5 && prosody.pitchSt > -9 && prosody.energyDb <= -3;
  const rose = prosody.pitchSt >= 1.5 && prosody.pitchSt < 9;
  if (!cues || last === undefined) return fell ? 'likely' : 'unsure';
  if (HESITATIONS.has(last)) return 'continues';
  const { probability: p, order } = cues;
  if (NEVER_ENDS.has(last)) return 'continues';
  if (MAY_END.has(last))
    return order === 3 && p >= 0.1 ? 'likely' : order === 3 && p >= 0.03 ? 'unsure' : 'continues';
  if (order === 3 && p >= 0.1) return rose ? 'likely' : 'finished';
  if ((order === 3 && p >= 0.02) || (order === 2 && p >= 0.1))
    return fell ? 'finished' : rose ? 'unsure' : 'likely';
  if (fell) return 'likely';
  return rose ? 'continues' : 'unsure';
}

/** The silence (ms) after which the turn ends, for a reading at an eagerness level. */
export function turnWait(
  reading: Reading,
  level: Eagerness,
  longestMs: number,
  speakerPauseMs: number,
): number {
  const l = TURN_LEVELS[level];
  const cap = (ms: number) => Math.min(ms, longestMs);
  switch (reading) {
    case 'finished':
      return 0;
    case 'likely':
      return cap(l.likelyMs);
    case 'unsure':
      // A speaker who has paused longer than this and gone on gets their own pause and a little more.
      return cap(Math.max(l.unsureMs, speakerPauseMs + 96));
    case 'continues':
      return longestMs;
  }
}

/** What a judged pause carries (the segmenter's `pause` event). */
export interface PauseInfo {
  pause: number;
  silenceMs: number;
  /** Stream position where the speech before the pause ended (ms). */
  atMs: number;
  speakerPauseMs: number;
  prosody: Prosody;
}

/**
 * Judges a pause for the open utterance; `answer(ms)` is always called once. Without a streaming
 * decoder (its pool was exhausted) the words are unknown: the session's unjudged window applies.
 * Without an eagerness (the default), the sentence-end check alone: at once after a trigram the
 * language model knows as a sentence end with `sentenceEndThreshold`, else the window.
 */
export function judgePause(
  p: PauseInfo,
  streaming: StreamingUtterance | null,
  settings: {
    silenceMs: number;
    eagerness?: Eagerness | null;
    unjudgedSilenceMs?: number;
    sentenceEndThreshold?: number;
  },
  answer: (ms: number) => void,
  onReading?: (r: Reading, cues: SentenceEndCues | null, waitMs: number) => void,
): void {
  const level = settings.eagerness;
  const threshold = settings.sentenceEndThreshold;
  if (!level && streaming?.sentenceEnd && threshold !== undefined) {
    return void streaming.sentenceEnd().then(
      (c) => answer(c.order === 3 && c.probability >= threshold ? 0 : settings.silenceMs),
      () => answer(settings.silenceMs),
    );
  }
  if (!level) return answer(settings.silenceMs);
  if (!streaming?.sentenceEnd) return answer(settings.unjudgedSilenceMs ?? settings.silenceMs);
  streaming.sentenceEnd().then(
    (cues) => {
      const r = readPause(cues, p.prosody);
      const wait = turnWait(r, level, settings.silenceMs, p.speakerPauseMs);
      onReading?.(r, cues, wait);
      answer(wait);
    },
    () => answer(settings.silenceMs),
  );
}

/**
 * What a turn-end verdict was made of, at debug level (`turn end judged`): the cues and the wait, with
 * the last word's class instead of the words (transcripts stay out of logs). test/bench/realtime/turns.ts
 * `--cues` reads these records to tune readPause.
 */
export function logVerdict(
  log: Logger,
  sessionId: string,
  ev: PauseInfo,
  reading: Reading,
  cues: SentenceEndCues | null,
  waitMs: number,
): void {
  if (!log.isLevelEnabled('debug')) return;
  log.debug(
    {
      sessionId,
      atMs: ev.atMs,
      reading,
      waitMs,
      p: cues?.probability,
      order: cues?.order,
      last: lastWordClass(cues),
      pitchSt: ev.prosody.pitchSt,
      energyDb: ev.prosody.energyDb,
      speakerPauseMs: ev.speakerPauseMs,
    },
    'turn end judged',
  );
}
