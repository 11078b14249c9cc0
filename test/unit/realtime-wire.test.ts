import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import fc from 'fast-check';
import { LOWPASS_48K, Resampler24To16 } from '../../realtime/resample.js';
import { fastAppend, parseAppend } from '../../realtime/protocol.js';
import { decodeBase64 } from '../../realtime/kernel.js';
import { WASM_SOURCES, compileWat, moduleText } from '../../scripts/wasm.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

const tone = (hz: number, seconds: number, rate: number, amplitude = 8000): Buffer => {
  const n = Math.round(seconds * rate);
  const buf = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++)
    buf.writeInt16LE(Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / rate)), i * 2);
  return buf;
};

const rms = (pcm: Buffer, from = 0): number => {
  let sum = 0;
  const n = pcm.length >> 1;
  for (let i = from; i < n; i++) sum += pcm.readInt16LE(i * 2) ** 2;
  return Math.sqrt(sum / Math.max(1, n - from));
};

/** Feeds `pcm` in chunks whose sample counts cycle through `sizes`. */
const resampleIn = (pcm: Buffer, sizes: number[]): Buffer => {
  const r = new Resampler24To16();
  const parts: Buffer[] = [];
  let at = 0;
  for (let k = 0; at < pcm.length; k++) {
    const bytes = Math.min(pcm.length - at, sizes[k % sizes.length] * 2);
    // Odd byte offsets too: frames arrive as slices of larger buffers.
    const chunk = Buffer.alloc(bytes + 1).subarray(1);
    pcm.copy(chunk, 0, at, at + bytes);
    parts.push(r.push(chunk));
    at += bytes;
  }
  return Buffer.concat(parts);
};

describe('unit: 24 kHz audio on the OpenAI endpoint', () => {
  it('gives two output samples per three input samples, whatever the frame sizes', () => {
    const pcm = tone(440, 1, 24000);
    const whole = resampleIn(pcm, [24000]);
    expect(whole.length / 2).to.equal(16000);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 4000 }), { minLength: 1, maxLength: 8 }), (sizes) => {
        if (sizes.every((s) => s === 0)) return;
        expect(resampleIn(pcm, sizes).equals(whole)).to.equal(true);
      }),
      { numRuns: 60 },
    );
  });

  it('equals the textbook filter (zero-stuff by 2, low-pass, keep every third) within its Q15 taps, clipped at full scale', () => {
    // Full-scale noise: many outputs overshoot and must clip, not wrap.
    let seed = 7;
    const rand = (): number => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
    const n = 4800;
    const x = Array.from({ length: n }, () => Math.round(rand() * 32767));
    const pcm = Buffer.alloc(n * 2);
    x.forEach((v, i) => pcm.writeInt16LE(v, i * 2));
    const got = resampleIn(pcm, [480, 7, 1000]);
    let clipped = 0;
    let squares = 0;
    for (let m = 0; m < got.length / 2; m++) {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const k = 3 * m - 2 * i;
        if (k >= 0 && k < LOWPASS_48K.length) acc += LOWPASS_48K[k] * x[i];
      }
      const want = Math.max(-32768, Math.min(32767, Math.round(acc)));
      if (want !== Math.round(acc)) clipped++;
      // Taps rounded to 16 bits: at most 24 half-steps of 2^-15 each, times full scale (12 LSB);
      // an indexing or phase error would be off by thousands.
      const err = got.readInt16LE(m * 2) - want;
      expect(Math.abs(err), `sample ${m}`).to.be.at.most(4);
      squares += err * err;
    }
    expect(Math.sqrt(squares / (got.length / 2)), 'RMS error, LSB').to.be.below(1);
    expect(clipped).to.be.above(10);
  });

  it('gives the same samples four hours into a session as at its start', () => {
    // One second of a 100 Hz tone repeats exactly: so must its 16 kHz form, however far in.
    const second = tone(100, 1, 24000);
    const r = new Resampler24To16();
    const first = [r.push(second), r.push(second)][1];
    let last = first;
    for (let s = 2; s < 4 * 3600; s++) last = r.push(second);
    expect(last.equals(first)).to.equal(true);
  });

  it('runs the kernel compiled from realtime/kernel.wat (npm run build:wasm)', async () => {
    for (const s of WASM_SOURCES) {
      const embedded = fs.readFileSync(path.join(repoRoot, s.module), 'utf8');
      expect(embedded, `${s.module} is out of date: npm run build:wasm`).to.equal(
        moduleText(s.wat, await compileWat(s.wat)),
      );
    }
  });

  it('keeps speech frequencies and removes what 16 kHz cannot hold', () => {
    const passed = rms(resampleIn(tone(1000, 0.5, 24000), [480]), 200) / rms(tone(1000, 0.5, 16000));
    expect(passed).to.be.within(0.97, 1.03);
    // 10 kHz would alias to 6 kHz at 16 kHz: the filter must take it out.
    const stop = resampleIn(tone(10000, 0.5, 24000), [480]);
    expect(rms(stop, 200) / rms(tone(10000, 0.5, 24000))).to.be.below(0.01);
  });

  it('holds only its filter history while the session is idle (10,000 idle sessions stay cheap)', () => {
    const before = process.memoryUsage().arrayBuffers;
    const idle = Array.from({ length: 2000 }, () => new Resampler24To16());
    const perSession = (process.memoryUsage().arrayBuffers - before) / idle.length;
    expect(perSession).to.be.below(1024);
  });

  it('reads an append without JSON.parse only when the frame means exactly that append', () => {
    const head = '{"type":"input_audio_buffer.append","audio":"';
    const piece = fc.constantFrom(
      'AAAA',
      'AQID',
      'AA==',
      'A',
      '"',
      '\\',
      '\n',
      '\u0001',
      '"}',
      '","x":"',
      'é',
      ' ',
      '-',
      '=',
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 8 }), (pieces) => {
        const text = head + pieces.join('') + '"}';
        const fast = fastAppend(Buffer.from(text), 1 << 20);
        if (!fast) return;
        // Taken: the frame is valid JSON, nothing but this type and audio, and the same samples.
        const msg = JSON.parse(text) as Record<string, unknown>;
        expect(Object.keys(msg)).to.deep.equal(['type', 'audio']);
        const full = parseAppend(msg.audio, 1 << 20);
        expect(full.kind).to.equal('audio');
        if (full.kind === 'audio') expect(fast.equals(full.pcm)).to.equal(true);
      }),
      { numRuns: 3000 },
    );
    const frame = (t: string): Buffer => Buffer.from(t);
    expect(fastAppend(frame(head + 'AAAAAA=="}'), 1 << 20)?.length).to.equal(4);
    expect(fastAppend(frame('{"audio":"AAAA","type":"input_audio_buffer.append"}'), 1 << 20)).to.equal(null);
    expect(fastAppend(frame(head + 'AAAAAA=="}'), 2)).to.equal(null); // over the frame limit: the full parser refuses it
    expect(fastAppend(frame(head + 'AA=="}'), 1 << 20)).to.equal(null); // odd bytes: the full parser refuses it
    expect(fastAppend(frame(head + '"}'), 1 << 20)?.length).to.equal(0);
  });

  it('decodes base64 from the frame bytes exactly as Node does, and refuses what is not strict base64', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    // Every length around the 16-character steps, random bytes: the same bytes as Node's decoder.
    for (let len = 0; len < 120; len++) {
      const bytes = Buffer.from(Array.from({ length: len }, (_, i) => (i * 151 + len * 7) & 255));
      const b64 = Buffer.from(bytes.toString('base64'));
      expect(decodeBase64(b64, 1 << 20)?.equals(bytes), `length ${len}`).to.equal(true);
    }
    // Each of the 256 byte values at each position of a 16-character step and of the tail.
    const base = Buffer.from('QUJD'.repeat(9)); // 36 characters: two steps of 16 and a tail group
    for (let at = 0; at < base.length; at++) {
      for (let b = 0; b < 256; b++) {
        const text = Buffer.from(base);
        text[at] = b;
        // '=' is padding in the last place only.
        const strict = alphabet.includes(String.fromCharCode(b)) || (b === 61 && at === base.length - 1);
        const got = decodeBase64(text, 1 << 20);
        if (!strict) {
          expect(got, `byte ${b} at ${at}`).to.equal(null);
          continue;
        }
        expect(got?.equals(Buffer.from(text.toString('latin1'), 'base64')), `byte ${b} at ${at}`).to.equal(
          true,
        );
      }
    }
    // Padding only at the end; bits past the last byte ignored, as Node ignores them.
    expect(decodeBase64(Buffer.from('QR=='), 9)?.toString('latin1')).to.equal('A');
    expect(decodeBase64(Buffer.from('QUI='), 9)?.toString('latin1')).to.equal('AB');
    for (const bad of ['Q===', '====', 'QQ==QUJD', 'QUJ=QUJD', 'QUJ', 'QU-D', 'QU_D'])
      expect(decodeBase64(Buffer.from(bad), 99), bad).to.equal(null);
    expect(decodeBase64(Buffer.from('QUJD'), 2)).to.equal(null); // over the limit
  });

  it('gives the same 16 kHz samples from base64 appends as from their decoded bytes', () => {
    const pcm = tone(300, 0.5, 24000, 12000);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 3000 }), { minLength: 1, maxLength: 6 }), (sizes) => {
        if (sizes.every((s) => s === 0)) return;
        const a = new Resampler24To16();
        const b = new Resampler24To16();
        let at = 0;
        for (let k = 0; at < pcm.length; k++) {
          const chunk = pcm.subarray(at, Math.min(pcm.length, at + sizes[k % sizes.length] * 2));
          // Transient (in the kernel's memory until its next call): copied before the other push.
          const got = a.pushBase64(Buffer.from(chunk.toString('base64')), 1 << 20);
          const copy = got && Buffer.from(got);
          expect(copy?.equals(b.push(chunk))).to.equal(true);
          at += chunk.length;
        }
      }),
      { numRuns: 40 },
    );
    // Refused (not strict base64, odd bytes, too large) without consuming anything.
    const r = new Resampler24To16();
    const fresh = new Resampler24To16();
    expect(r.pushBase64(Buffer.from('AA-A'), 99)).to.equal(null);
    expect(r.pushBase64(Buffer.from('AA=='), 99)).to.equal(null);
    expect(r.pushBase64(Buffer.from(pcm.subarray(0, 960).toString('base64')), 480)).to.equal(null);
    const chunk = pcm.subarray(0, 960);
    const first = Buffer.from(r.pushBase64(Buffer.from(chunk.toString('base64')), 1 << 20)!);
    expect(first.equals(fresh.push(chunk))).to.equal(true);
  });

  it('accepts exactly strict base64 in appends', () => {
    const strict = (s: string): boolean => s.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(s);
    const alphabet = fc.constantFrom(...'AQgw+/=-_ !\n.é'.split(''), 'A', 'b', '9');
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 24 }), (chars) => {
        const s = chars.join('');
        // Decoded into a new buffer, and into the scratch buffer of transient appends (24 kHz).
        for (const transient of [false, true]) {
          const got = parseAppend(s, 1 << 20, transient);
          const accepted = got.kind === 'audio' || (got.kind === 'invalid' && /16-bit/.test(got.message));
          expect(accepted, JSON.stringify(s)).to.equal(strict(s));
        }
      }),
      { numRuns: 3000 },
    );
    for (let n = 0; n < 40; n += 2) {
      const pcm = Buffer.alloc(n, 7);
      for (const transient of [false, true]) {
        const got = parseAppend(pcm.toString('base64'), 1 << 20, transient);
        expect(got.kind).to.equal('audio');
        if (got.kind === 'audio') expect(got.pcm.equals(pcm)).to.equal(true);
      }
    }
    expect(parseAppend(Buffer.alloc(3).toString('base64'), 1 << 20)).to.include({ kind: 'invalid' });
    expect(parseAppend(Buffer.alloc(2000).toString('base64'), 1000)).to.include({ kind: 'tooLarge' });
  });
});
