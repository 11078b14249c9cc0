/**
 * OpenAI's error `type` vocabulary, one table for every tier that answers
 * in OpenAI's shape: the API's `{error: {message, type, code}}` bodies
 * (api/http/errors.ts), the engine worker's (engine/app.ts) and the
 * realtime tier's OpenAI events (realtime/openai.ts). docs/decisions/
 * platform.md, "Error shapes".
 */
export const OPENAI_ERROR_TYPES = {
  /** The request is at fault (every 4xx below, every realtime `error` event). */
  request: 'invalid_request_error',
  authentication: 'authentication_error',
  permission: 'permission_error',
  rateLimit: 'rate_limit_error',
  /** The service is at fault (5xx, a realtime transcription that failed). */
  server: 'server_error',
} as const;

export type OpenAIErrorType = (typeof OPENAI_ERROR_TYPES)[keyof typeof OPENAI_ERROR_TYPES];

const BY_STATUS: Partial<Record<number, OpenAIErrorType>> = {
  401: OPENAI_ERROR_TYPES.authentication,
  403: OPENAI_ERROR_TYPES.permission,
  429: OPENAI_ERROR_TYPES.rateLimit,
};

/** The `type` of a refusal with HTTP `status`, unless the refusal names its own (`given`, HttpRefusal's `opts.type`). */
export function openAIErrorType(status: number, given?: string): string {
  if (given) return given;
  if (status >= 500) return OPENAI_ERROR_TYPES.server;
  return BY_STATUS[status] ?? OPENAI_ERROR_TYPES.request;
}
