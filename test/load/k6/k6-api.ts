/**
 * The part of k6's JavaScript API that our k6 scripts use, implemented on
 * Node for node-runner.ts (see there): k6/websockets, k6/metrics, k6/timers.
 * Kept apart from the runner because the scripts import it while the runner
 * is still evaluating.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import WebSocketImpl from 'ws';

export interface Vu {
  id: number;
  iteration: number;
  pending: number;
  sockets: Set<WebSocketImpl>;
  timers: Set<NodeJS.Timeout>;
  idle?: () => void;
}

export const vuContext = new AsyncLocalStorage<Vu>();

function current(): Vu {
  const vu = vuContext.getStore();
  if (!vu) throw new Error('k6 API used outside a VU iteration');
  return vu;
}

export function hold(vu: Vu): void {
  vu.pending++;
}

export function release(vu: Vu): void {
  if (--vu.pending === 0) vu.idle?.();
}

// ---------------------------------------------------------------- k6/metrics

export const metrics = new Map<string, Trend | Counter>();

export class Trend {
  readonly values: number[] = [];
  constructor(
    readonly name: string,
    readonly isTime = false,
  ) {
    metrics.set(name, this);
  }
  add(v: number): void {
    this.values.push(v);
  }
  stat(name: string): number {
    const sorted = [...this.values].sort((a, b) => a - b);
    if (sorted.length === 0) return NaN;
    const pct = /^p\((\d+(?:\.\d+)?)\)$/.exec(name);
    if (pct)
      return sorted[Math.min(sorted.length - 1, Math.ceil((Number(pct[1]) / 100) * sorted.length) - 1)];
    switch (name) {
      case 'avg':
        return sorted.reduce((a, b) => a + b, 0) / sorted.length;
      case 'min':
        return sorted[0];
      case 'max':
        return sorted[sorted.length - 1];
      case 'med':
        return sorted[Math.floor((sorted.length - 1) / 2)];
      case 'count':
        return sorted.length;
      default:
        throw new Error(`unsupported trend statistic ${name}`);
    }
  }
}

export class Counter {
  total = 0;
  constructor(readonly name: string) {
    metrics.set(name, this);
  }
  add(v: number): void {
    this.total += v;
  }
  stat(name: string): number {
    if (name === 'count') return this.total;
    throw new Error(`unsupported counter statistic ${name}`);
  }
}

// ---------------------------------------------------------------- k6/timers

export function setTimeout(fn: () => void, ms = 0): NodeJS.Timeout {
  const vu = current();
  hold(vu);
  const t = global.setTimeout(() => {
    vu.timers.delete(t);
    try {
      fn();
    } finally {
      release(vu);
    }
  }, ms);
  vu.timers.add(t);
  return t;
}

export function clearTimeout(t: NodeJS.Timeout): void {
  const vu = current();
  if (vu.timers.delete(t)) {
    global.clearTimeout(t);
    release(vu);
  }
}

export function setInterval(fn: () => void, ms = 0): NodeJS.Timeout {
  const vu = current();
  hold(vu);
  const t = global.setInterval(fn, ms);
  vu.timers.add(t);
  return t;
}

export const clearInterval = clearTimeout;

// ---------------------------------------------------------------- k6/websockets

interface MessageEventLike {
  data: string | ArrayBuffer;
}

export class WebSocket {
  binaryType: 'arraybuffer' | 'blob' = 'blob';
  onopen: (() => void) | null = null;
  onmessage: ((e: MessageEventLike) => void) | null = null;
  onclose: ((e: { code: number; reason: string }) => void) | null = null;
  onerror: ((e: { error: string }) => void) | null = null;
  private readonly ws: WebSocketImpl;

  constructor(
    url: string,
    protocols?: string | string[] | null,
    params?: { headers?: Record<string, string> },
  ) {
    const vu = current();
    hold(vu);
    this.ws = new WebSocketImpl(url, protocols ?? undefined, { headers: params?.headers });
    vu.sockets.add(this.ws);
    this.ws.on('open', () => this.onopen?.());
    this.ws.on('message', (data, isBinary) => {
      if (!isBinary) return this.onmessage?.({ data: data.toString() });
      const buf = data as Buffer;
      this.onmessage?.({
        data: buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer,
      });
    });
    this.ws.on('error', (err) => this.onerror?.({ error: err.message }));
    this.ws.on('close', (code, reason) => {
      vu.sockets.delete(this.ws);
      try {
        this.onclose?.({ code, reason: reason.toString() });
      } finally {
        release(vu);
      }
    });
  }

  get readyState(): number {
    return this.ws.readyState;
  }

  send(data: string | ArrayBuffer): void {
    if (this.ws.readyState === WebSocketImpl.OPEN)
      this.ws.send(typeof data === 'string' ? data : Buffer.from(data));
  }

  close(code?: number, reason?: string): void {
    this.ws.close(code, reason);
  }
}
