/**
 * OpenAI's ephemeral-secret endpoints for realtime transcription (issue 25),
 * backed by this service's `rt_` session tokens (60 s, bound to the calling
 * key): `POST /v1/realtime/client_secrets` (the current form: `{value,
 * expires_at, session}`) and `POST /v1/realtime/transcription_sessions` (the
 * beta form: `{client_secret: {value, expires_at}, ...}`). The secret opens
 * `WS /v1/realtime` from a browser (subprotocol
 * `openai-insecure-api-key.<secret>`) or anywhere (`Authorization: Bearer`).
 * The session configuration given here is checked for what the endpoint
 * serves and echoed; the client applies it with `session.update` after
 * connecting (an `rt_` token carries no configuration): docs/decisions.md.
 */
import type { AppDeps } from '../../deps.js';
import { authError, requireApiKey } from '../../http/auth.js';
import { jsonBody } from '../../http/body.js';
import { ApiError, usePlane } from '../../http/errors.js';
import { requestRateLimit } from '../../http/rateLimit.js';
import type { Route } from '../../http/routes.js';
import { apiErrorSchema, tooManyRequests } from '../../openapi/schemas.js';
import type { Principal } from '../../../shared/auth/index.js';
import { checkFields } from '../../../shared/sessionUpdate/native.js';
import { openAIParam, readOpenAISession, type Form } from '../../../shared/sessionUpdate/openai.js';
import { isObject } from '../../../shared/validation.js';

/**
 * Refuses a session the endpoint would not serve, as `session.update` on `/v1/realtime` would refuse
 * it once the client applies it there (the same reader and checks: shared/sessionUpdate), so that
 * the client hears of it now rather than after connecting. `root` is the session's path in the
 * request.
 */
function checkSession(session: unknown, form: Form, root: string): void {
  const read = readOpenAISession(session, form, root);
  if (!read.ok) throw new ApiError(400, read.code, read.message);
  const refused = checkFields(read.native);
  if (refused)
    throw new ApiError(
      400,
      refused.code,
      refused.field ? `${refused.message} (${openAIParam(refused.field, form, root)})` : refused.message,
    );
}

function mint(deps: AppDeps, principal: Principal): { value: string; expires_at: number } {
  const issued = deps.auth.issueSessionToken(principal);
  if ('ok' in issued) throw authError(issued);
  return { value: issued.token, expires_at: Math.floor(Date.now() / 1000) + issued.expires_in };
}

const secretSchema = {
  type: 'object',
  required: ['value', 'expires_at'],
  properties: { value: { type: 'string', pattern: '^rt_' }, expires_at: { type: 'integer' } },
} as const;

const errors = {
  '400': {
    description:
      '`unsupported_session_type`, `unsupported_audio_format`, `unsupported_turn_detection`, ' +
      '`invalid_session_update` (what `session.update` on `/v1/realtime` refuses), `invalid_json`',
    schema: apiErrorSchema,
  },
  '401': { description: 'Missing, invalid, revoked or expired key', schema: apiErrorSchema },
  '429': tooManyRequests('Request rate limit exceeded', apiErrorSchema),
  '503': { description: '`token_issuer_unavailable` or `auth_unavailable`', schema: apiErrorSchema },
};

export function openaiTokenRoutes(deps: AppDeps): Route[] {
  const chain = [
    usePlane('api'),
    requireApiKey(deps.auth),
    requestRateLimit(deps.limits),
    jsonBody(deps.config.http.maxJsonBytes, { allowEmpty: true }),
  ];
  const vad = deps.config.realtime.vadDefaults;
  const defaultTurn = {
    type: 'server_vad',
    threshold: vad.threshold,
    prefix_padding_ms: vad.prefixMs,
    silence_duration_ms: vad.silenceMs,
  };
  return [
    {
      method: 'post',
      path: '/v1/realtime/client_secrets',
      chain: [
        ...chain,
        (ctx) => {
          const body = isObject(ctx.request.body) ? ctx.request.body : {};
          checkSession(body.session ?? {}, 'ga', 'session');
          const session = isObject(body.session) ? body.session : {};
          const secret = mint(deps, ctx.state.principal);
          ctx.res.setHeader('Cache-Control', 'no-store');
          ctx.body = {
            ...secret,
            session: {
              type: 'transcription',
              object: 'realtime.transcription_session',
              audio: session.audio ?? { input: { format: { type: 'audio/pcm', rate: 24000 } } },
              include: session.include ?? [],
              expires_at: secret.expires_at,
            },
          };
        },
      ],
      doc: {
        operationId: 'createRealtimeClientSecret',
        summary: "OpenAI's client secret for WS /v1/realtime (an rt_ token, 60 s)",
        tags: ['realtime'],
        security: 'apiKey',
        responses: {
          '200': {
            description: 'Secret',
            schema: {
              ...secretSchema,
              properties: { ...secretSchema.properties, session: { type: 'object' } },
            },
          },
          ...errors,
        },
      },
    },
    {
      method: 'post',
      path: '/v1/realtime/transcription_sessions',
      chain: [
        ...chain,
        (ctx) => {
          const body = isObject(ctx.request.body) ? ctx.request.body : {};
          checkSession(body, 'beta', 'body');
          const secret = mint(deps, ctx.state.principal);
          ctx.res.setHeader('Cache-Control', 'no-store');
          ctx.body = {
            object: 'realtime.transcription_session',
            client_secret: secret,
            input_audio_format: body.input_audio_format ?? 'pcm16',
            input_audio_transcription: body.input_audio_transcription ?? null,
            // The session's own defaults (what session.created reports), not OpenAI's 500 ms.
            turn_detection: body.turn_detection === undefined ? defaultTurn : body.turn_detection,
            input_audio_noise_reduction: body.input_audio_noise_reduction ?? null,
            include: body.include ?? [],
            modalities: ['text'],
          };
        },
      ],
      doc: {
        operationId: 'createRealtimeTranscriptionSession',
        summary:
          "OpenAI's beta transcription session: a client secret for WS /v1/realtime (an rt_ token, 60 s)",
        tags: ['realtime'],
        security: 'apiKey',
        responses: {
          '200': {
            description: 'Session with its client secret',
            schema: {
              type: 'object',
              required: ['client_secret'],
              properties: { client_secret: secretSchema },
            },
          },
          ...errors,
        },
      },
    },
  ];
}
