/**
 * Outbound HTTP for user-supplied URLs (batch audio, webhooks). The address
 * check runs where it cannot be bypassed: on the DNS answer the socket is
 * actually about to connect to (a custom `lookup`), again on the connected
 * socket's remote address, on IP-literal hosts, and anew after every
 * redirect. Bodies are capped in bytes and the whole exchange in time.
 */
import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction, Socket } from 'node:net';
import type { Writable } from 'node:stream';
import { AddressPolicy, isIpLiteral } from './address.js';
import { InsufficientStorageError } from '../../../shared/disk.js';
import { OUTBOUND_CONNECT_TIMEOUT_MS, OUTBOUND_MAX_REDIRECTS } from '../../../shared/config/batch.js';

export type OutboundErrorCode =
  | 'invalid_url'
  | 'blocked_destination'
  | 'too_many_redirects'
  | 'too_large'
  | 'too_slow'
  | 'timeout'
  | 'network_error'
  | 'aborted';

export class OutboundError extends Error {
  constructor(
    readonly code: OutboundErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'OutboundError';
  }
}

export interface OutboundOptions {
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: Buffer | string;
  /** Follow at most this many redirects (GET only; other methods never follow). */
  maxRedirects?: number;
  /** Cap on the response body; exceeding it aborts with `too_large`. */
  maxBytes?: number;
  /** Answer with the status and headers as soon as they arrive; the body is not read (webhook receipts). */
  statusOnly?: boolean;
  /** Deadline for the whole exchange including redirects and body. */
  timeoutMs?: number;
  connectTimeoutMs?: number;
  /** Stream the body here instead of buffering it. */
  sink?: Writable;
  /** Free space for the sink: a body declared larger fails at its headers with InsufficientStorageError. */
  sinkRoomBytes?: number;
  signal?: AbortSignal;
  /**
   * Fails with `too_slow` when fewer than `bytes` arrive in any `windowMs`
   * from the request on (a server that stalls or trickles), instead of
   * holding the caller until `timeoutMs`. Not counted while the sink holds
   * the response back.
   */
  minRate?: { bytes: number; windowMs: number };
}

export interface OutboundResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Buffered body (empty when a sink was given). */
  body: Buffer;
  bytes: number;
  /** Final URL after redirects. */
  url: string;
  /** Address actually connected to. */
  remoteAddress: string | undefined;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

export class OutboundClient {
  readonly policy: AddressPolicy;

  constructor(
    allow: string[] = [],
    private readonly defaults: { maxRedirects?: number; connectTimeoutMs?: number } = {},
  ) {
    this.policy = new AddressPolicy(allow);
  }

  /** Throws `invalid_url` unless the URL is absolute http(s). */
  static parseUrl(raw: string): URL {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new OutboundError('invalid_url', 'The URL is not a valid absolute URL.');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new OutboundError('invalid_url', 'Only http and https URLs are allowed.');
    }
    if (url.username || url.password)
      throw new OutboundError('invalid_url', 'URLs with credentials are not allowed.');
    return url;
  }

  /** A lookup that only ever hands the socket an allowed address. */
  private guardedLookup(host: string): LookupFunction {
    return ((hostname: string, options: dns.LookupOptions, callback: (...args: unknown[]) => void) => {
      dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
        if (err) return callback(err);
        const list = addresses;
        const ok = list.filter((a) => this.policy.addressAllowed(a.address, host));
        if (ok.length === 0) {
          const e = new OutboundError(
            'blocked_destination',
            `Destination ${host} resolves to a non-public address (the server setting OUTBOUND_ALLOW lists allowed ones).`,
          );
          return callback(e);
        }
        if (options.all) callback(null, ok);
        else callback(null, ok[0].address, ok[0].family);
      });
    }) as LookupFunction;
  }

  async request(rawUrl: string, opts: OutboundOptions = {}): Promise<OutboundResponse> {
    const method = opts.method ?? 'GET';
    const maxRedirects =
      method === 'GET' ? (opts.maxRedirects ?? this.defaults.maxRedirects ?? OUTBOUND_MAX_REDIRECTS) : 0;
    const deadline = opts.timeoutMs ? Date.now() + opts.timeoutMs : Infinity;
    let url = OutboundClient.parseUrl(rawUrl);
    for (let hop = 0; ; hop++) {
      const res = await this.once(url, method, opts, deadline, maxRedirects > 0);
      if (res.location !== undefined) {
        if (hop >= maxRedirects)
          throw new OutboundError('too_many_redirects', `More than ${maxRedirects} redirects.`);
        url = OutboundClient.parseUrl(new URL(res.location, url).toString());
        continue;
      }
      return res.response;
    }
  }

  private once(
    url: URL,
    method: string,
    opts: OutboundOptions,
    deadline: number,
    follow: boolean,
  ): Promise<{ status: number; location?: string; response: OutboundResponse }> {
    const host = url.hostname;
    const bareHost = host.startsWith('[') ? host.slice(1, -1) : host;
    if (isIpLiteral(bareHost) && !this.policy.addressAllowed(bareHost, host)) {
      return Promise.reject(
        new OutboundError(
          'blocked_destination',
          `Destination ${host} is not a public address (the server setting OUTBOUND_ALLOW lists allowed ones).`,
        ),
      );
    }
    const remaining = deadline - Date.now();
    if (remaining <= 0) return Promise.reject(new OutboundError('timeout', 'The request timed out.'));
    const mod = url.protocol === 'https:' ? https : http;
    const maxBytes = opts.maxBytes ?? Infinity;

    return new Promise((resolve, reject) => {
      let settled = false;
      let remoteAddress: string | undefined;
      let received = 0;
      let response: http.IncomingMessage | undefined;
      const rate = opts.minRate;
      const rateTimer = rate
        ? setInterval(() => {
            const got = received;
            received = 0;
            if (got >= rate.bytes || response?.isPaused()) return;
            fail(
              new OutboundError(
                'too_slow',
                `The server sent less than ${rate.bytes} bytes in ${Math.round(rate.windowMs / 1000)} s.`,
              ),
            );
          }, rate.windowMs)
        : undefined;
      const fail = (e: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearInterval(rateTimer);
        opts.signal?.removeEventListener('abort', onAbort);
        req.destroy();
        reject(e);
      };
      const onAbort = () => fail(new OutboundError('aborted', 'The request was aborted.'));
      const timer = Number.isFinite(remaining)
        ? setTimeout(() => fail(new OutboundError('timeout', 'The request timed out.')), remaining)
        : undefined;

      const req = mod.request(url, {
        method,
        headers: opts.headers,
        agent: false,
        lookup: this.guardedLookup(host),
        timeout: opts.connectTimeoutMs ?? this.defaults.connectTimeoutMs ?? OUTBOUND_CONNECT_TIMEOUT_MS,
      });
      // Heard before anything can destroy the request: a request destroyed before its response emits
      // "socket hang up", which unheard is uncaught (an already aborted signal did that, below).
      req.on('error', (err) => {
        if (err instanceof OutboundError) return fail(err);
        const cause = (err as { cause?: unknown }).cause;
        if (cause instanceof OutboundError) return fail(cause);
        fail(
          new OutboundError(
            'network_error',
            `Request failed: ${(err as NodeJS.ErrnoException).code ?? err.message}`,
          ),
        );
      });
      // The sink failing (our disk full) ends the request with its own error; unheard, it would be uncaught.
      opts.sink?.on('error', fail);
      if (opts.signal) {
        if (opts.signal.aborted) return onAbort();
        opts.signal.addEventListener('abort', onAbort, { once: true });
      }
      req.on('socket', (socket: Socket) => {
        socket.once('connect', () => {
          remoteAddress = socket.remoteAddress;
          // Second line of defence: the address really connected to.
          if (remoteAddress && !this.policy.addressAllowed(remoteAddress, host)) {
            fail(
              new OutboundError(
                'blocked_destination',
                `Destination ${host} connected to a non-public address.`,
              ),
            );
          }
        });
      });
      req.on('timeout', () => fail(new OutboundError('timeout', 'Connecting timed out.')));
      req.on('response', (res) => {
        response = res;
        const status = res.statusCode ?? 0;
        const location = res.headers.location;
        if (follow && REDIRECTS.has(status) && location !== undefined) {
          res.resume();
          settled = true;
          clearTimeout(timer);
          clearInterval(rateTimer);
          req.destroy();
          resolve({ status, location, response: null as unknown as OutboundResponse });
          return;
        }
        if (opts.statusOnly) {
          settled = true;
          clearTimeout(timer);
          clearInterval(rateTimer);
          opts.signal?.removeEventListener('abort', onAbort);
          req.destroy();
          const empty = Buffer.alloc(0);
          resolve({
            status,
            response: {
              status,
              headers: res.headers,
              body: empty,
              bytes: 0,
              url: url.toString(),
              remoteAddress,
            },
          });
          return;
        }
        const declared = Number(res.headers['content-length'] ?? NaN);
        if (Number.isFinite(declared) && declared > maxBytes) {
          return fail(new OutboundError('too_large', `The response is larger than ${maxBytes} bytes.`));
        }
        // Our disk cannot hold it: nothing is downloaded (the job pauses until there is room).
        if (Number.isFinite(declared) && opts.sinkRoomBytes !== undefined && declared > opts.sinkRoomBytes) {
          return fail(
            new InsufficientStorageError(
              `The audio (${declared} bytes) does not fit the server's free disk space.`,
            ),
          );
        }
        const chunks: Buffer[] = [];
        let bytes = 0;
        res.on('data', (chunk: Buffer) => {
          if (settled) return;
          bytes += chunk.length;
          received += chunk.length;
          if (bytes > maxBytes)
            return fail(new OutboundError('too_large', `The response is larger than ${maxBytes} bytes.`));
          if (opts.sink) {
            if (!opts.sink.write(chunk)) {
              res.pause();
              opts.sink.once('drain', () => res.resume());
            }
          } else {
            chunks.push(chunk);
          }
        });
        res.on('error', (err) => fail(new OutboundError('network_error', `Response failed: ${err.message}`)));
        res.on('end', () => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          clearInterval(rateTimer);
          opts.signal?.removeEventListener('abort', onAbort);
          resolve({
            status,
            response: {
              status,
              headers: res.headers,
              body: Buffer.concat(chunks),
              bytes,
              url: url.toString(),
              remoteAddress,
            },
          });
        });
      });
      if (opts.body !== undefined) req.end(opts.body);
      else req.end();
    });
  }
}
