/**
 * MP4/M4A files written without "faststart" keep their index (`moov`) after
 * the media data (`mdat`). ffmpeg reading from a pipe cannot seek back to the
 * data, so such uploads are rearranged in memory first (the qt-faststart
 * algorithm): `moov` moves in front of `mdat` and every chunk offset in
 * `stco`/`co64` grows by the size of `moov`. No temp file is involved.
 */
interface Box {
  type: string;
  start: number;
  size: number;
  header: number;
}

function readBoxes(buf: Buffer, start: number, end: number): Box[] | undefined {
  const boxes: Box[] = [];
  let pos = start;
  while (pos + 8 <= end) {
    let size = buf.readUInt32BE(pos);
    const type = buf.toString('latin1', pos + 4, pos + 8);
    let header = 8;
    if (size === 1) {
      if (pos + 16 > end) return undefined;
      size = Number(buf.readBigUInt64BE(pos + 8));
      header = 16;
    } else if (size === 0) {
      size = end - pos;
    }
    if (size < header || pos + size > end) return undefined;
    boxes.push({ type, start: pos, size, header });
    pos += size;
  }
  return pos === end ? boxes : undefined;
}

const CONTAINERS = new Set(['moov', 'trak', 'mdia', 'minf', 'stbl', 'edts', 'udta']);

/** Real files nest `stco` five deep (moov/trak/mdia/minf/stbl); anything far deeper is not a recording. */
const MAX_DEPTH = 12;

/**
 * Shifts every chunk offset under `box`; false when the boxes are malformed
 * (nested past MAX_DEPTH, a table declaring more entries than its box holds):
 * the file is then passed on as it is, for ffmpeg to refuse.
 */
function shiftChunkOffsets(moov: Buffer, box: Box, delta: number, depth = 0): boolean {
  if (depth > MAX_DEPTH) return false;
  const children = readBoxes(moov, box.start + box.header, box.start + box.size) ?? [];
  for (const child of children) {
    if (CONTAINERS.has(child.type)) {
      if (!shiftChunkOffsets(moov, child, delta, depth + 1)) return false;
    } else if (child.type === 'stco' || child.type === 'co64') {
      const body = child.start + child.header;
      const end = child.start + child.size;
      if (body + 8 > end) return false;
      const count = moov.readUInt32BE(body + 4);
      const width = child.type === 'stco' ? 4 : 8;
      if (count > (end - body - 8) / width) return false;
      for (let i = 0; i < count; i++) {
        const at = body + 8 + i * width;
        if (width === 4) moov.writeUInt32BE((moov.readUInt32BE(at) + delta) >>> 0, at);
        else moov.writeBigUInt64BE(BigInt.asUintN(64, moov.readBigUInt64BE(at) + BigInt(delta)), at);
      }
    }
  }
  return true;
}

/** True when the buffer starts like an ISO-BMFF file (MP4, M4A, MOV). */
export function isIsoBmff(buf: Buffer): boolean {
  return buf.length >= 12 && buf.toString('latin1', 4, 8) === 'ftyp';
}

/** Returns the file with `moov` before `mdat`, or the input unchanged when already so (or not parseable). */
export function faststart(buf: Buffer): Buffer {
  if (!isIsoBmff(buf)) return buf;
  const boxes = readBoxes(buf, 0, buf.length);
  if (!boxes) return buf;
  const moovIndex = boxes.findIndex((b) => b.type === 'moov');
  const mdatIndex = boxes.findIndex((b) => b.type === 'mdat');
  if (moovIndex < 0 || mdatIndex < 0 || moovIndex < mdatIndex) return buf;
  const moovBox = boxes[moovIndex];
  const moov = Buffer.from(buf.subarray(moovBox.start, moovBox.start + moovBox.size));
  const stco32Limit = buf.length + moov.length;
  if (stco32Limit > 0xffffffff) return buf;
  if (!shiftChunkOffsets(moov, { ...moovBox, start: 0 }, moovBox.size)) return buf;
  const parts: Buffer[] = [];
  boxes.forEach((b, i) => {
    if (i === mdatIndex) parts.push(moov);
    if (i !== moovIndex) parts.push(buf.subarray(b.start, b.start + b.size));
  });
  return Buffer.concat(parts);
}
