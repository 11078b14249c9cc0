/**
 * `session.update` (interface 4.9): every listed field with its snake_case
 * alias, validated as a whole (an invalid value rejects the update and leaves
 * the settings as they were), unknown fields stripped, gateway fields and
 * audio settings not overridable.
 */
import { normalizeLanguage } from '../shared/stt/language.js';
import type { SegmenterSettings } from '../shared/vad/segmenter.js';

export const MAX_PROMPT_CHARS = 2000;

function countChars(text: string): number {
  // Only strings that could be over the limit in code points need counting.
  if (text.length <= MAX_PROMPT_CHARS) return text.length;
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // A high surrogate followed by a low one is one character.
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

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

type FieldKind = 'string' | 'boolean' | 'number';

interface FieldSpec {
  key: keyof SessionSettings;
  kind: FieldKind;
  /** Inclusive bounds for numbers. */
  min?: number;
  max?: number;
}

/** Client name (camelCase and snake_case alias) to setting. */
const FIELDS: Record<string, FieldSpec> = {
  language: { key: 'language', kind: 'string' },
  prompt: { key: 'prompt', kind: 'string' },
  backend: { key: 'backend', kind: 'string' },
  sttModel: { key: 'sttModel', kind: 'string' },
  stt_model: { key: 'sttModel', kind: 'string' },
  normalizerModel: { key: 'normalizerModel', kind: 'string' },
  normalizer_model: { key: 'normalizerModel', kind: 'string' },
  vad: { key: 'vad', kind: 'boolean' },
  vadThreshold: { key: 'threshold', kind: 'number', min: 0.05, max: 0.95 },
  vad_threshold: { key: 'threshold', kind: 'number', min: 0.05, max: 0.95 },
  vadSilenceMs: { key: 'silenceMs', kind: 'number', min: 32, max: 10_000 },
  vad_silence_ms: { key: 'silenceMs', kind: 'number', min: 32, max: 10_000 },
  vadPrefixMs: { key: 'prefixMs', kind: 'number', min: 0, max: 5_000 },
  vad_prefix_ms: { key: 'prefixMs', kind: 'number', min: 0, max: 5_000 },
  vadMinSpeechMs: { key: 'minSpeechMs', kind: 'number', min: 0, max: 10_000 },
  vad_min_speech_ms: { key: 'minSpeechMs', kind: 'number', min: 0, max: 10_000 },
  vadTargetSpeechMs: { key: 'targetSpeechMs', kind: 'number', min: 500 },
  vad_target_speech_ms: { key: 'targetSpeechMs', kind: 'number', min: 500 },
  vadMaxSpeechMs: { key: 'maxSpeechMs', kind: 'number', min: 1000 },
  vad_max_speech_ms: { key: 'maxSpeechMs', kind: 'number', min: 1000 },
  vadSmartSplitWindowMs: { key: 'smartSplitWindowMs', kind: 'number', min: 0 },
  vad_smart_split_window_ms: { key: 'smartSplitWindowMs', kind: 'number', min: 0 },
  // The interface lists translate_to alone (no camelCase alias): `translateTo` is stripped like any other unknown name.
  translate_to: { key: 'translateTo', kind: 'string' },
};

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
  caps: { maxSpeechMsCap: number },
): UpdateResult {
  // Clients of OpenAI-style APIs nest options under `session`; accept both shapes, and both at once
  // (a field given in both places takes the nested value).
  const nested =
    msg.session && typeof msg.session === 'object' && !Array.isArray(msg.session)
      ? (msg.session as Record<string, unknown>)
      : undefined;
  const src: Record<string, unknown> = { ...msg, ...nested };
  delete src.type;
  if (nested) delete src.session;
  const next: SessionSettings = { ...current };
  const ignored: string[] = [];
  for (const [name, value] of Object.entries(src)) {
    // Own names only: `constructor`, `toString`, `__proto__` are unknown fields, not Object.prototype's.
    const spec = Object.hasOwn(FIELDS, name) ? FIELDS[name] : undefined;
    if (!spec) {
      ignored.push(name);
      continue;
    }
    if (value === null || value === undefined) {
      if (spec.kind === 'string' && spec.key !== 'language')
        (next as unknown as Record<string, unknown>)[spec.key] = undefined;
      continue;
    }
    if (spec.kind === 'string' && typeof value !== 'string') return bad(name, 'must be a string');
    if (spec.kind === 'boolean' && typeof value !== 'boolean') return bad(name, 'must be a boolean');
    if (spec.kind === 'number') {
      if (typeof value !== 'number' || !Number.isFinite(value)) return bad(name, 'must be a number');
      if (spec.min !== undefined && value < spec.min) return bad(name, `must be >= ${spec.min}`);
      if (spec.max !== undefined && value > spec.max) return bad(name, `must be <= ${spec.max}`);
    }
    let v: unknown = value;
    if (spec.key === 'language') {
      const lang = normalizeSessionLanguage(value as string);
      if (!lang) return bad(name, 'must be a language code such as "en", "zh-cn" or "auto"');
      v = lang;
    }
    // Characters, not UTF-16 code units: an emoji or a CJK extension character counts once.
    if (spec.key === 'prompt' && countChars(value as string) > MAX_PROMPT_CHARS) {
      return bad(name, `must be at most ${MAX_PROMPT_CHARS} characters`);
    }
    (next as unknown as Record<string, unknown>)[spec.key] = v;
  }
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

function bad(field: string, what: string): UpdateResult {
  return { ok: false, code: 'invalid_session_update', field, message: `session.update: ${field} ${what}` };
}

/** The effective settings as `session.updated` reports them (snake_case, like the aliases). */
export function presentSettings(s: SessionSettings): Record<string, unknown> {
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
  };
}
