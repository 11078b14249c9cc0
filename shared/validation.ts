/**
 * The one ajv instance of the project: request bodies, query strings and
 * multipart fields of the API (api/http/validate.ts) and `session.update`
 * options of the realtime tier (realtime/options.ts) are all checked by it,
 * against the JSON Schemas their types are derived from.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';

// ajv-formats is CommonJS; its default export arrives wrapped under ESM.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (
  a: Ajv,
) => Ajv;

export const ajv = addFormats(
  new Ajv({ allErrors: false, useDefaults: true, strict: false, coerceTypes: false }),
);

/**
 * Printable text only (ajv compiles patterns with the `u` flag): no C0 or C1
 * controls (NUL cannot be stored), no bidirectional overrides or isolates and
 * no line or paragraph separators (they reach logs and admin JSON), and no
 * lone surrogates (UTF-8 cannot carry them: Postgres would store each as
 * U+FFFD, so `"a\ud800"` and `"a\udfff"` became the same owner), and no
 * invisible characters that make two names look alike (soft hyphen,
 * zero-width space, word joiner and invisible operators, byte-order mark,
 * interlinear annotations, tag characters; the zero-width joiner and
 * non-joiner stay: scripts and emoji need them). Names, labels, vocabulary
 * words.
 */
export const PRINTABLE_TEXT =
  '^[^\\u0000-\\u001f\\u007f-\\u009f\\u00ad\\u061c\\u200b\\u200e\\u200f\\u2028-\\u202e\\u2060-\\u2064\\u2066-\\u2069\\ufeff\\ufff9-\\ufffb\\ud800-\\udfff\\u{e0000}-\\u{e007f}]*$';

/**
 * Free text a user writes (a prompt): tabs and line breaks and any script's
 * direction marks are allowed; other controls (NUL included) and lone
 * surrogates are not.
 */
export const FREE_TEXT = '^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\ud800-\\udfff]*$';

/** A JSON object (not null, not an array): what request bodies and their nested settings must be. */
export const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

const compiled = new WeakMap<object, ValidateFunction>();

/** The validator of a schema object, compiled once. */
export function compile(schema: object): ValidateFunction {
  let v = compiled.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    compiled.set(schema, v);
  }
  return v;
}
