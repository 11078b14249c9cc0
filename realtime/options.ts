/**
 * `session.update` (interface 4.9): every listed field with its snake_case
 * alias, validated as a whole (an invalid value rejects the update and leaves
 * the settings as they were), unknown fields stripped, gateway fields and
 * audio settings not overridable.
 */
import type { ErrorObject } from 'ajv';
import { normalizeLanguage } from '../shared/stt/language.js';
import { FREE_TEXT, PRINTABLE_TEXT, compile } from '../shared/validation.js';
import type { SegmenterSettings } from './vad/segmenter.js';
import type { PresentedSettings } from './wire.js';
import { isObject } from '../shared/validation.js';
import { FIXED_SILENCE_MS, SENTENCE_END_SILENCE_MS, TURN_LEVELS } from '../shared/config/realtime.js';

export const MAX_PROMPT_CHARS = 2000;

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

/**
 * A field's JSON Schema: null unsets a string setting and leaves any other as
 * it is. Names are short: every `session.updated` echoes them, so a 500 KB
 * `backend` turned each 25-byte update into 500 KB sent (issue 41, third pass).
 */
const text = { type: ['string', 'null'], maxLength: 200, pattern: PRINTABLE_TEXT } as const;
const flag = { type: ['boolean', 'null'] } as const;
/** Turn-end eagerness (OpenAI's semantic_vad levels); null: a fixed silence window. */
const eagerness = { type: ['string', 'null'], enum: ['low', 'medium', 'high', 'auto', null] } as const;
/** Every number has both bounds: JSON's `1e309` parses as Infinity, which a bare minimum lets through. */
const num = (minimum: number, maximum: number) => ({ type: ['number', 'null'], minimum, maximum });
/** The longest any duration option may ask for (ms); the session's own caps clamp it further. */
const MAX_MS = 3_600_000;

interface FieldSpec {
  key: keyof SessionSettings;
  schema: { type: readonly string[]; [k: string]: unknown };
}

/** Client name (camelCase and snake_case alias) to setting and the schema its value must meet. */
const FIELDS: Record<string, FieldSpec> = {
  language: { key: 'language', schema: text },
  // Characters, not UTF-16 code units (ajv counts code points): an emoji counts once.
  prompt: { key: 'prompt', schema: { ...text, maxLength: MAX_PROMPT_CHARS, pattern: FREE_TEXT } },
  backend: { key: 'backend', schema: text },
  sttModel: { key: 'sttModel', schema: text },
  stt_model: { key: 'sttModel', schema: text },
  normalizerModel: { key: 'normalizerModel', schema: text },
  normalizer_model: { key: 'normalizerModel', schema: text },
  vad: { key: 'vad', schema: flag },
  vadThreshold: { key: 'threshold', schema: num(0.05, 0.95) },
  vad_threshold: { key: 'threshold', schema: num(0.05, 0.95) },
  vadSilenceMs: { key: 'silenceMs', schema: num(32, 10_000) },
  vad_silence_ms: { key: 'silenceMs', schema: num(32, 10_000) },
  vadPrefixMs: { key: 'prefixMs', schema: num(0, 5_000) },
  vad_prefix_ms: { key: 'prefixMs', schema: num(0, 5_000) },
  vadMinSpeechMs: { key: 'minSpeechMs', schema: num(0, 10_000) },
  vad_min_speech_ms: { key: 'minSpeechMs', schema: num(0, 10_000) },
  vadTargetSpeechMs: { key: 'targetSpeechMs', schema: num(500, MAX_MS) },
  vad_target_speech_ms: { key: 'targetSpeechMs', schema: num(500, MAX_MS) },
  vadMaxSpeechMs: { key: 'maxSpeechMs', schema: num(1000, MAX_MS) },
  vad_max_speech_ms: { key: 'maxSpeechMs', schema: num(1000, MAX_MS) },
  vadSmartSplitWindowMs: { key: 'smartSplitWindowMs', schema: num(0, MAX_MS) },
  vad_smart_split_window_ms: { key: 'smartSplitWindowMs', schema: num(0, MAX_MS) },
  // Not in the interface (4.9): docs/decisions/turns.md, "Turn ends".
  vadEagerness: { key: 'eagerness', schema: eagerness },
  vad_eagerness: { key: 'eagerness', schema: eagerness },
  // The interface lists translate_to alone (no camelCase alias): `translateTo` is stripped like any other unknown name.
  translate_to: { key: 'translateTo', schema: text },
};

/** The options of one update (unknown names are allowed here and stripped below). */
export const sessionUpdateSchema = {
  type: 'object',
  properties: Object.fromEntries(Object.entries(FIELDS).map(([name, f]) => [name, f.schema])),
};

/** The first problem ajv found, in the words of `bad`. */
function invalid(e: ErrorObject | undefined): UpdateResult {
  const field = e?.instancePath.slice(1) ?? 'session';
  const p = (e?.params ?? {}) as { type?: string; comparison?: string; limit?: number };
  switch (e?.keyword) {
    case 'type':
      return bad(field, `must be a ${String(p.type).split(',')[0]}`);
    case 'minimum':
    case 'maximum':
      return bad(field, `must be ${p.comparison} ${p.limit}`);
    case 'maxLength':
      return bad(field, `must be at most ${p.limit} characters`);
    case 'enum':
      return bad(field, 'must be one of "low", "medium", "high", "auto" or null');
    case 'pattern':
      return bad(
        field,
        (e?.params as { pattern?: string }).pattern === FREE_TEXT
          ? 'must not contain control characters (tabs and line breaks are allowed)'
          : 'must not contain control, invisible or text-direction characters',
      );
    default:
      return bad(field, e?.message ?? 'is invalid');
  }
}

export type UpdateResult =
  | { ok: true; settings: SessionSettings; ignored: string[]; languageChanged: boolean }
  | { ok: false; code: string; message: string; field?: string };

/** Language hint as the session stores it: `auto` or a two-letter code. */
export function normalizeSessionLanguage(v: string): string | undefined {
  const trimmed = v.trim().toLowerCase();
  if (trimmed === '' || trimmed === 'auto') return 'auto';
  const code = normalizeLanguage(trimmed);
  return code && /^[a-z]{2}$/.test(code) ? code : undefined;
}

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
  const validate = compile(sessionUpdateSchema);
  if (!validate(src)) return invalid(validate.errors?.[0]);
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
      const lang = normalizeSessionLanguage(value as string);
      if (!lang) return bad(name, 'must be a language code such as "en", "zh-cn" or "auto"');
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

function bad(field: string, what: string): UpdateResult {
  return { ok: false, code: 'invalid_session_update', field, message: `session.update: ${field} ${what}` };
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
