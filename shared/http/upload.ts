/**
 * Multipart audio uploads (`POST /v1/audio/transcriptions` of the API and of
 * the engine worker, both Koa apps). The file part is collected in memory
 * (formidable's write-stream hook), never written to a temp file, and capped
 * in size. `receiveClip` is what a route calls: the upload's file and text
 * fields, or an HttpRefusal.
 */
import { Writable } from 'node:stream';
import type { Context } from 'koa';
import { koaBody } from 'koa-body';
import { HttpRefusal } from './refusal.js';

export const NOT_MULTIPART = 'The request body must be multipart/form-data with a "file" field.';

/** A clip upload as read: the file's bytes and the form's text fields. */
export interface ReceivedClip {
  file: Buffer;
  fields: Record<string, string>;
}

/** Reads a clip upload (multipart, capped at `maxFileBytes`), or refuses it in the one mapping. */
export async function receiveClip(ctx: Context, maxFileBytes: number): Promise<ReceivedClip> {
  if (!isMultipart(ctx)) throw new HttpRefusal(400, 'invalid_content_type', NOT_MULTIPART);
  const upload = await parseAudioUpload(ctx, maxFileBytes).catch((err: unknown) => {
    throw err instanceof UploadError ? new HttpRefusal(err.status, err.code, err.message) : err;
  });
  if (!upload.file) throw new HttpRefusal(400, 'missing_file', 'The multipart field "file" is required.');
  return { file: upload.file.data, fields: upload.fields };
}

/** Aborts when the client goes away (the response closes before it was written). */
export function clientGone(ctx: Context): AbortSignal {
  const aborter = new AbortController();
  ctx.res.once('close', () => !ctx.res.writableFinished && aborter.abort());
  return aborter.signal;
}

export class UploadError extends Error {
  override name = 'UploadError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface AudioUpload {
  file?: { data: Buffer; filename: string | null; mimetype: string | null };
  fields: Record<string, string>;
}

/** Limits of the non-file part of an upload (decisions: Segment uploads). */
export const MAX_FIELDS_BYTES = 64 * 1024;
export const MAX_FIELDS = 100;
export const MAX_FILES = 4;

/**
 * Maps a multipart parser failure to the limit it hit. The message is ours,
 * never the parser's (which names its own options and may name a temp path).
 */
function uploadError(err: unknown, maxFileBytes: number): UploadError {
  const code = (err as { code?: unknown })?.code;
  switch (code) {
    case 1009: // total file bytes
    case 1016: // one file's bytes
      return new UploadError(413, 'file_too_large', `The upload exceeds the limit of ${maxFileBytes} bytes.`);
    case 1015:
      return new UploadError(413, 'too_many_files', `A multipart body may carry at most ${MAX_FILES} files.`);
    case 1007:
      return new UploadError(
        413,
        'too_many_fields',
        `A multipart body may carry at most ${MAX_FIELDS} fields.`,
      );
    case 1006:
      return new UploadError(
        413,
        'fields_too_large',
        `The multipart fields exceed ${MAX_FIELDS_BYTES} bytes in total.`,
      );
    default:
      return new UploadError(400, 'invalid_multipart', 'The multipart body could not be read (malformed).');
  }
}

export function isMultipart(ctx: Context): boolean {
  return Boolean(ctx.request.is('multipart/form-data'));
}

/** Parses the multipart body; `file` is its one file part named `file` (two are refused). */
export async function parseAudioUpload(ctx: Context, maxFileBytes: number): Promise<AudioUpload> {
  const declared = Number(ctx.get('content-length') || 0);
  if (declared > maxFileBytes + MAX_FIELDS_BYTES + 64 * 1024) {
    throw new UploadError(413, 'file_too_large', `The upload exceeds the limit of ${maxFileBytes} bytes.`);
  }
  const contents = new WeakMap<object, Buffer[]>();
  let failure: UploadError | undefined;
  const parse = koaBody({
    multipart: true,
    json: false,
    urlencoded: false,
    text: false,
    patchKoa: true,
    formidable: {
      maxFiles: MAX_FILES,
      maxFields: MAX_FIELDS,
      maxFileSize: maxFileBytes,
      maxTotalFileSize: maxFileBytes,
      maxFieldsSize: MAX_FIELDS_BYTES,
      allowEmptyFiles: true,
      minFileSize: 0,
      fileWriteStreamHandler: (file?: unknown) => {
        const chunks: Buffer[] = [];
        if (file) contents.set(file, chunks);
        return new Writable({
          write(chunk: Buffer, _enc, cb) {
            chunks.push(chunk);
            cb();
          },
        });
      },
    },
    onError: (err) => {
      failure = uploadError(err, maxFileBytes);
      throw failure;
    },
  });
  try {
    await parse(ctx, async () => {});
  } catch (err) {
    throw failure ?? err;
  }
  const fields: Record<string, string> = {};
  const body = (ctx.request.body ?? {}) as Record<string, unknown>;
  for (const [k, v] of Object.entries(body)) {
    const values = (Array.isArray(v) ? v : [v]).filter((x): x is string => typeof x === 'string');
    if (values.length === 0) continue;
    // A list, as OpenAI's SDKs send one (`timestamp_granularities[]` once per value): its values joined
    // by commas. Any other field repeated: its first value.
    fields[k] = k.endsWith('[]') ? values.join(',') : values[0];
  }
  const files = (ctx.request.files ?? {}) as Record<string, unknown>;
  const raw = files.file;
  // One clip per request: a second `file` part was dropped without a word.
  if (Array.isArray(raw) && raw.length > 1)
    throw new UploadError(
      400,
      'invalid_request',
      `The form has ${raw.length} parts named "file": send one clip per request.`,
    );
  const part = (Array.isArray(raw) ? raw[0] : raw) as
    { originalFilename?: string; mimetype?: string } | undefined;
  if (!part) return { fields };
  return {
    fields,
    file: {
      data: Buffer.concat(contents.get(part) ?? []),
      filename: part.originalFilename ?? null,
      mimetype: part.mimetype ?? null,
    },
  };
}
