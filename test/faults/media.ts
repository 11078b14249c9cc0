/**
 * Hostile media files for the fault tests, built in memory: playlists that
 * point at local files, MP4s whose index declares far more than they hold,
 * and boxes nested thousands deep.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** An HLS playlist whose only segment is a local file. */
export function hlsPlaylist(target: string): Buffer {
  return Buffer.from(`#EXTM3U\n#EXT-X-TARGETDURATION:11\n#EXTINF:11,\nfile://${target}\n#EXT-X-ENDLIST\n`);
}

/** A DASH manifest whose only representation is a local file. */
export function dashManifest(target: string): Buffer {
  return Buffer.from(
    '<?xml version="1.0"?>\n<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-on-demand:2011" type="static" mediaPresentationDuration="PT11S" minBufferTime="PT1S">\n' +
      `<Period><AdaptationSet mimeType="audio/mp4"><Representation id="a" bandwidth="64000" codecs="mp4a.40.2"><BaseURL>file://${target}</BaseURL></Representation></AdaptationSet></Period></MPD>\n`,
  );
}

function box(type: string, ...body: Buffer[]): Buffer {
  const b = Buffer.concat(body);
  const h = Buffer.alloc(8);
  h.writeUInt32BE(b.length + 8, 0);
  h.write(type, 4, 'latin1');
  return Buffer.concat([h, b]);
}

function u32(...v: number[]): Buffer {
  const b = Buffer.alloc(4 * v.length);
  v.forEach((x, i) => b.writeUInt32BE(x >>> 0, i * 4));
  return b;
}

interface Parsed {
  type: string;
  body: Buffer;
  children?: Parsed[];
}
const CONTAINERS = new Set(['moov', 'trak', 'mdia', 'minf', 'stbl']);
function parse(buf: Buffer): Parsed[] {
  const out: Parsed[] = [];
  for (let pos = 0; pos + 8 <= buf.length;) {
    const size = buf.readUInt32BE(pos);
    const type = buf.toString('latin1', pos + 4, pos + 8);
    const body = buf.subarray(pos + 8, pos + size);
    out.push(CONTAINERS.has(type) ? { type, body, children: parse(body) } : { type, body });
    pos += size;
  }
  return out;
}
function serialize(boxes: Parsed[]): Buffer {
  return Buffer.concat(boxes.map((b) => box(b.type, b.children ? serialize(b.children) : b.body)));
}
function edit(boxes: Parsed[], fn: (b: Parsed) => Parsed): Parsed[] {
  return boxes.map((b) => fn(b.children ? { ...b, children: edit(b.children, fn) } : b));
}

/** A short AAC M4A written by ffmpeg (moov after mdat). */
export function smallM4a(dir: string, seconds = 0.2): Buffer {
  const out = path.join(dir, `small-${seconds}.m4a`);
  execFileSync('ffmpeg', [
    '-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', `sine=f=440:r=16000:d=${seconds}`,
    '-c:a', 'aac', '-b:a', '8k', out,
  ]); // prettier-ignore
  return fs.readFileSync(out);
}

/**
 * An M4A whose sample table declares `samples` samples in its one chunk
 * (stts, stsc, stsz with one constant size): ffmpeg's index for them alone
 * takes 24 bytes a sample.
 */
export function mp4SampleBomb(dir: string, samples = 80_000_000): Buffer {
  const m4a = smallM4a(dir);
  return serialize(
    edit(parse(m4a), (b) => {
      const full = u32(0); // version and flags
      if (b.type === 'stts') return { ...b, body: Buffer.concat([full, u32(1, samples, 1024)]) };
      if (b.type === 'stsc') return { ...b, body: Buffer.concat([full, u32(1, 1, samples, 1)]) };
      if (b.type === 'stsz') return { ...b, body: Buffer.concat([full, u32(6, samples)]) };
      if (b.type === 'stco') return { ...b, body: Buffer.concat([full, u32(1, b.body.readUInt32BE(8))]) };
      return b;
    }),
  );
}

/** An M4A whose stco declares `count` offsets and holds one. */
export function mp4LyingChunkCount(dir: string, count = 0x40000000): Buffer {
  const m4a = smallM4a(dir);
  return serialize(
    edit(parse(m4a), (b) =>
      b.type === 'stco' ? { ...b, body: Buffer.concat([u32(0, count), b.body.subarray(8, 12)]) } : b,
    ),
  );
}

/** An MP4 (ftyp, mdat, then moov) whose moov nests `depth` trak boxes. */
export function mp4DeepNesting(depth = 100_000): Buffer {
  const ftyp = box('ftyp', Buffer.from('M4A \0\0\0\0M4A mp42isom', 'latin1'));
  // One allocation, each level an 8-byte header around the next.
  const nested = Buffer.alloc(depth * 8);
  for (let i = 0; i < depth; i++) {
    nested.writeUInt32BE((depth - i) * 8, i * 8);
    nested.write('trak', i * 8 + 4, 'latin1');
  }
  return Buffer.concat([ftyp, box('mdat', Buffer.alloc(16)), box('moov', nested)]);
}

/**
 * A 4-channel ProTracker module (about 3 KB): one pattern playing a looped
 * square-wave sample. ffmpeg synthesizes audio from it (libopenmpt) for as
 * long as the song says, whatever the file's size.
 */
export function trackerModule(): Buffer {
  const head = Buffer.alloc(1084);
  head.write('loop', 0, 'latin1');
  const s = 20; // sample 1
  head.write('square', s, 'latin1');
  head.writeUInt16BE(500, s + 22); // length in words
  head.writeUInt8(64, s + 25); // volume
  head.writeUInt16BE(0, s + 26); // loop start
  head.writeUInt16BE(500, s + 28); // loop length
  head.writeUInt8(1, 950); // song length: one position
  head.write('M.K.', 1080, 'latin1');
  const pattern = Buffer.alloc(1024);
  // Row 0, channel 0: sample 1 at period 428 (C-2).
  pattern.writeUInt8(0x01, 0);
  pattern.writeUInt8(0xac, 1);
  pattern.writeUInt8(0x10, 2);
  const sample = Buffer.alloc(1000);
  for (let i = 0; i < sample.length; i++) sample[i] = i % 40 < 20 ? 0x60 : 0xa0;
  return Buffer.concat([head, pattern, sample]);
}
