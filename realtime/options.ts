/**
 * `session.update` (interface 4.9) applied to a session's settings: every
 * listed field with its snake_case alias (the fields and their checks:
 * shared/sessionUpdate/native.ts), validated as a whole (an invalid value
 * rejects the update and leaves the settings as they were), unknown fields
 * stripped, gateway fields and audio settings not overridable.
 */
import { FIELDS, bad, checkFields, normalizeSessionLanguage } from '../shared/sessionUpdate/native.js';
import type { SegmenterSettings } from './vad/segmenter.js';
import type { PresentedSettings } from './wire.js';
import { isObject } from '../shared/validation.js';
import { FIXED_SILENCE_MS, SENTENCE_END_SILENCE_MS, TURN_LEVELS } from '../shared/config/realtime.js';

export interface SessionSettings extends SegmenterSettings {
  /** Two-letter code or `auto`. */
  language: string;
  prompt: string | undefined;
  backend: string | undefined;
  sttModel: string | undefined;
  normalizerModel: string | undefined;
  /** Accepted and echoed; has no effect for external sessions (interface 1.5). */
  translateTo: string | undefined;
}

export type UpdateResult =
  | { ok: true; settings: SessionSettings; ignored: string[]; languageChanged: boolean }
  | { ok: false; code: string; message: string; field?: string };

export function applySessionUpdate(
  current: SessionSettings,
  msg: Record<string, unknown>,
  caps: {
    maxSpeechMsCap: number;
    /** Languages the engine serving the session transcribes (`*`: any); others are refused here. */
    languages?: string[];
  },
): UpdateResult {
  // Clients of OpenAI-style APIs nest options under `session`; accept both shapes, and both at once
  // (a field given in both places takes the nested value).
  if (msg.session !== undefined && !isObject(msg.session)) return bad('session', 'must be an object');
  const nested = isObject(msg.session) ? msg.session : undefined;
  const src: Record<string, unknown> = { ...msg, ...nested };
  delete src.type;
  if (nested) delete src.session;
  const next: SessionSettings = { ...current };
  const ignored: string[] = [];
  const refused = checkFields(src);
  if (refused) return refused;
  for (const [name, value] of Object.entries(src)) {
    // Own names only: `constructor`, `toString`, `__proto__` are unknown fields, not Object.prototype's.
    const spec = Object.hasOwn(FIELDS, name) ? FIELDS[name] : undefined;
    if (!spec) {
      ignored.push(name);
      continue;
    }
    if (value === null || value === undefined) {
      if (spec.key === 'eagerness' && value === null) next.eagerness = null;
      else if (spec.schema.type[0] === 'string' && spec.key !== 'language')
        (next as unknown as Record<string, unknown>)[spec.key] = undefined;
      continue;
    }
    let v: unknown = value;
    if (spec.key === 'language') {
      // A code (checkFields has refused anything else).
      const lang = normalizeSessionLanguage(value as string) ?? 'auto';
      // Refused now, as the segment endpoint refuses it, not after each utterance has failed.
      const known = caps.languages ?? ['*'];
      if (lang !== 'auto' && !known.includes('*') && !known.includes(lang))
        return {
          ok: false,
          code: 'unsupported_language',
          field: name,
          message: `session.update: language "${value as string}" is not supported (supported: ${known.join(', ')}).`,
        };
      v = lang;
    }
    (next as unknown as Record<string, unknown>)[spec.key] = v;
  }
  applyEagerness(next, src, current);
  if (next.maxSpeechMs > caps.maxSpeechMsCap)
    return bad('vadMaxSpeechMs', `must be <= ${caps.maxSpeechMsCap}`);
  if (next.targetSpeechMs > next.maxSpeechMs) next.targetSpeechMs = next.maxSpeechMs;
  if (next.smartSplitWindowMs >= next.maxSpeechMs) {
    // A window the client sets must fit; one it left alone shrinks to fit a shorter maximum.
    const windowGiven = 'vadSmartSplitWindowMs' in src || 'vad_smart_split_window_ms' in src;
    if (windowGiven) return bad('vadSmartSplitWindowMs', 'must be smaller than vadMaxSpeechMs');
    next.smartSplitWindowMs = Math.floor(next.maxSpeechMs / 2);
  }
  return { ok: true, settings: next, ignored, languageChanged: next.language !== current.language };
}

/**
 * Turn ends (docs/decisions/turns.md, "Turn ends"): with an eagerness the session's pauses are
 * judged and `silenceMs` is the longest wait (the level's unless the client gives one). Without one,
 * the window with the sentence-end check (the default, and `vad_eagerness: null` after a level); a
 * window the client sets without an eagerness is kept exactly (no earlier end).
 */
function applyEagerness(next: SessionSettings, src: Record<string, unknown>, current: SessionSettings): void {
  const silenceGiven = src.vadSilenceMs != null || src.vad_silence_ms != null;
  const levelGiven = 'vadEagerness' in src || 'vad_eagerness' in src;
  if (silenceGiven && !levelGiven) next.eagerness = null;
  if (next.eagerness) {
    const level = TURN_LEVELS[next.eagerness];
    if (!silenceGiven && (levelGiven || !current.eagerness)) next.silenceMs = level.longestMs;
    next.sentenceEndSilenceMs = level.askMs;
  } else if (silenceGiven) {
    next.sentenceEndSilenceMs = 0;
  } else if (levelGiven && current.eagerness) {
    next.silenceMs = FIXED_SILENCE_MS;
    next.sentenceEndSilenceMs = SENTENCE_END_SILENCE_MS;
  }
}

/** The effective settings as `session.updated` reports them (snake_case, like the aliases). */
export function presentSettings(s: SessionSettings): PresentedSettings {
  return {
    language: s.language,
    prompt: s.prompt ?? null,
    backend: s.backend ?? null,
    stt_model: s.sttModel ?? null,
    normalizer_model: s.normalizerModel ?? null,
    translate_to: s.translateTo ?? null,
    vad: s.vad,
    vad_threshold: s.threshold,
    vad_silence_ms: s.silenceMs,
    vad_prefix_ms: s.prefixMs,
    vad_min_speech_ms: s.minSpeechMs,
    vad_target_speech_ms: s.targetSpeechMs,
    vad_max_speech_ms: s.maxSpeechMs,
    vad_smart_split_window_ms: s.smartSplitWindowMs,
    vad_eagerness: s.eagerness ?? null,
  };
}
