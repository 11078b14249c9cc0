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
