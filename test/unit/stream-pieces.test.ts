/**
 * Where `stream=true` cuts a clip (api/routes/openai/stream.ts, issue 39):
 * a long first piece goes first only up to a pause a few seconds in, then
 * whole again with only its words after that pause kept; short first pieces
 * and every later piece are the batch cut's. Pure: the cut of test audio, no
 * engine.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { loadConfig } from '../../shared/config/index.js';
import { canonicalWavSamples, type DecodedAudio } from '../../shared/audio/index.js';
import { utterancePieces } from '../../api/batch/pieces.js';
import {
  FIRST_PIECE_MAX_SECONDS,
  FIRST_PIECE_MIN_SECONDS,
  streamPieces,
} from '../../api/routes/openai/stream.js';
import { buildMinuteOfSpeech } from '../batch/helpers.js';
import { pcmOf } from '../speech/helpers.js';

const cfg = loadConfig({}).batch;
const decoded = (pcm: Buffer) => ({ pcm, seconds: pcm.length / 32000 }) as DecodedAudio;

describe('unit: the pieces of a streamed transcription', () => {
  it('a long first piece: its head first, then the whole piece from the head’s end on', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stream-pieces-'));
    try {
      const pcm = canonicalWavSamples(fs.readFileSync(buildMinuteOfSpeech(path.join(dir, 'minute.wav'))))!;
      const batch = await utterancePieces(pcm, cfg);
      expect(batch[0].end - batch[0].start).to.be.above(FIRST_PIECE_MAX_SECONDS);
      const pieces = (await streamPieces(decoded(pcm), cfg))!;
      const [head, whole, ...rest] = pieces;
      expect(head.start).to.equal(batch[0].start);
      expect(head.end - head.start).to.be.within(FIRST_PIECE_MIN_SECONDS, FIRST_PIECE_MAX_SECONDS);
      expect(whole).to.deep.include({ start: batch[0].start, end: batch[0].end, keepFrom: head.end });
      expect(rest.map((p) => [p.start, p.end])).to.deep.equal(batch.slice(1).map((p) => [p.start, p.end]));
      expect(pieces.map((p) => p.index)).to.deep.equal(pieces.map((_, i) => i));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a short first piece (jfk.wav) is cut as batch cuts it', async () => {
    const pcm = pcmOf(path.resolve('samples/jfk.wav'));
    expect(await streamPieces(decoded(pcm), cfg)).to.deep.equal(await utterancePieces(pcm, cfg));
  });
});
