/**
 * The fields of the native `session.update` (interface 4.9) with their
 * snake_case aliases and the JSON Schema each value must meet, and the check
 * of an update's values against them. Shared by the realtime tier, which
 * applies updates (realtime/options.ts), and the API's secret endpoints,
 * which refuse at minting what the session would refuse on connecting
 * (api/routes/tokens/openai.ts, through shared/sessionUpdate/openai.ts).
 */
import type { ErrorObject } from 'ajv';
import { normalizeLanguage } from '../stt/language.js';
import { FREE_TEXT, PRINTABLE_TEXT, compile } from '../validation.js';

export const MAX_PROMPT_CHARS = 2000;

/** The session setting a field sets (realtime/options.ts `SessionSettings`). */
export type SettingKey =
  | 'language'
  | 'prompt'
  | 'backend'
  | 'sttModel'
  | 'normalizerModel'
  | 'vad'
  | 'threshold'
  | 'silenceMs'
  | 'prefixMs'
  | 'minSpeechMs'
  | 'targetSpeechMs'
  | 'maxSpeechMs'
  | 'smartSplitWindowMs'
  | 'eagerness'
  | 'translateTo';

/** A refused update: `invalid_session_update` and the field, in the words clients see. */
export interface FieldRefusal {
  ok: false;
  code: string;
  message: string;
  field?: string;
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
  key: SettingKey;
  schema: { type: readonly string[]; [k: string]: unknown };
}

/** Client name (camelCase and snake_case alias) to setting and the schema its value must meet. */
export const FIELDS: Record<string, FieldSpec> = {
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
function invalid(e: ErrorObject | undefined): FieldRefusal {
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

/** Language hint as the session stores it: `auto` or a two-letter code. */
export function normalizeSessionLanguage(v: string): string | undefined {
  const trimmed = v.trim().toLowerCase();
  if (trimmed === '' || trimmed === 'auto') return 'auto';
  const code = normalizeLanguage(trimmed);
  return code && /^[a-z]{2}$/.test(code) ? code : undefined;
}

const validate = compile(sessionUpdateSchema);

/**
 * The first value of `src` (an update's fields, `type` and `session` nesting removed) that its
 * field refuses, or null. Unknown names pass (the session strips them); whether the engine serves
 * a language is the session's to say.
 */
export function checkFields(src: Record<string, unknown>): FieldRefusal | null {
  if (!validate(src)) return invalid(validate.errors?.[0]);
  if (typeof src.language === 'string' && !normalizeSessionLanguage(src.language))
    return bad('language', 'must be a language code such as "en", "zh-cn" or "auto"');
  return null;
}

export function bad(field: string, what: string): FieldRefusal {
  return { ok: false, code: 'invalid_session_update', field, message: `session.update: ${field} ${what}` };
}
