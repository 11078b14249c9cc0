/**
 * The WebAssembly kernel of the realtime tier's per-frame arithmetic
 * (realtime/kernel.wat, embedded in kernelBinary.ts by `npm run build:wasm`):
 * base64 appends decoded straight from the frame's bytes, and the 24 -> 16 kHz
 * filter (realtime/resample.ts). One instance per process: its memory is a
 * scratch area every session's frames pass through in turn (the event loop is
 * single), grown to the largest frame seen.
 */
import { WASM_BASE64 } from './kernelBinary.js';

/** Fixed regions of the kernel's memory (see kernel.wat). */
export const TAPS_AT = 0;
const ALPHABET_AT = 192;
/** Where each call's own regions start. */
export const FREE_AT = 512;

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const EQUALS = 0x3d;
const A = 0x41;

export interface Kernel {
  /** The memory's buffer once it holds `bytes` (growing replaces the buffer: take it after). */
  heap(bytes: number): ArrayBuffer;
  /** Strict base64 bytes at `src` (`n` of them, no padding) to 3n/4 bytes at `dst` (+4 scratch); 1 if valid. */
  b64(src: number, n: number, dst: number): number;
  /** The filter of realtime/resample.ts (its arguments are documented there). */
  run(...args: number[]): void;
}

let kernel: Kernel | undefined;

export function loadKernel(): Kernel {
  if (kernel) return kernel;
  const instance = new WebAssembly.Instance(new WebAssembly.Module(Buffer.from(WASM_BASE64, 'base64')), {});
  const memory = instance.exports.memory as WebAssembly.Memory;
  const alphabet = new Uint8Array(memory.buffer, ALPHABET_AT, 256).fill(255);
  for (let i = 0; i < ALPHABET.length; i++) alphabet[ALPHABET.charCodeAt(i)] = i;
  kernel = {
    heap(bytes) {
      if (memory.buffer.byteLength < bytes)
        memory.grow(Math.ceil((bytes - memory.buffer.byteLength) / 65536));
      return memory.buffer;
    },
    b64: instance.exports.b64 as Kernel['b64'],
    run: instance.exports.run as Kernel['run'],
  };
  return kernel;
}

/** What `text` decodes to if it is strict base64 (as far as its length and padding tell), else -1. */
export function base64Length(text: Uint8Array): number {
  const n = text.length;
  if (n % 4 !== 0) return -1;
  const pad = n > 0 && text[n - 1] === EQUALS ? (text[n - 2] === EQUALS ? 2 : 1) : 0;
  return (n / 4) * 3 - pad;
}

/**
 * Decodes `text` (its length checked by base64Length) into the kernel's memory at `dst`, having
 * copied it to `src` (neither overlapping the other, `dst` with 4 bytes to spare); false if it is
 * not strict base64: a character outside the standard alphabet, or padding anywhere but at the end.
 * Bits past the last byte of a padded group are ignored, as Node's decoder ignores them.
 */
export function decodeBase64At(heap: ArrayBuffer, text: Uint8Array, src: number, dst: number): boolean {
  const k = loadKernel();
  const at = new Uint8Array(heap, src, text.length);
  at.set(text);
  const n = text.length;
  // Padding becomes 'A' (zero bits) for the kernel; a '=' anywhere else stays and fails there.
  if (n > 0 && at[n - 1] === EQUALS) {
    at[n - 1] = A;
    if (at[n - 2] === EQUALS) at[n - 2] = A;
  }
  return k.b64(src, n, dst) === 1;
}

/** Strict base64 bytes as a new Buffer of at most `maxBytes`; null if too large or not strict base64. */
export function decodeBase64(text: Uint8Array, maxBytes: number): Buffer | null {
  const len = base64Length(text);
  if (len < 0 || len > maxBytes) return null;
  const dst = FREE_AT + ((text.length + 15) & ~15);
  const heap = loadKernel().heap(dst + len + 16);
  if (!decodeBase64At(heap, text, FREE_AT, dst)) return null;
  const out = Buffer.allocUnsafe(len);
  out.set(new Uint8Array(heap, dst, len));
  return out;
}
