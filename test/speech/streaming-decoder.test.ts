/**
 * The streaming decoder's session normalisation (issue 13): a session's first
 * utterance is searched while it is fed, with a provisional estimate, so its
 * end leaves only the lookahead to search; the words do not depend on how the
 * audio is chunked (searches from the utterance's start included).
 */
import { expect } from 'chai';
import { loadConfig } from '../../shared/config/index.js';
import { DEFAULT_CMN, initialCmn, type CmnSettings } from '../../shared/stt/pocketsphinx/cmn.js';
import { Decoder, type DecoderOptions } from '../../shared/stt/pocketsphinx/decoder.js';
import { clip, pcmOf } from './helpers.js';
import { corpusPcm, loadCorpus } from './corpus.js';
import { RealtimeCutter, streamOf } from '../bench/speech/cuts.js';

describe('speech: streaming decoder, a session’s first utterance', function () {
  this.timeout(120_000);
  const b = loadConfig({}).speech.builtin;
  const opts = (cmn: CmnSettings): DecoderOptions => ({
    hmm: b.hmm,
    lm: b.lm,
    dict: b.dict,
    pocketsphinxLibrary: b.pocketsphinxLibrary,
    sphinxbaseLibrary: b.sphinxbaseLibrary,
    extraArgs: [...b.extraArgs, ...b.streamExtraArgs],
    sessionCmn: cmn,
  });
  // "and so my fellow americans": 2.6 s, shorter than the 3 s bootstrap of the session's estimate.
  const pcm = pcmOf(clip('jfk.wav').path);
  const first = new Int16Array(pcm.buffer.slice(pcm.byteOffset, pcm.byteOffset + 2 * 41_600));
  const frames = first.length / 160;

  function decode(d: Decoder, chunk: number) {
    d.begin(initialCmn());
    const trace = d.cmnTrace!;
    for (let i = 0; i < first.length; i += chunk) d.feed(first.subarray(i, i + chunk));
    const text = d
      .end()
      .map((w) => w.word)
      .join(' ');
    return { text, trace: { ...trace } };
  }

  it('is searched while it is fed: its end leaves only the lookahead, whatever the chunking', () => {
    const d = new Decoder(opts(b.streamCmn));
    try {
      const lookahead = { ...DEFAULT_CMN, ...b.streamCmn }.lookaheadFrames;
      expect(lookahead, 'frames wait less than the bootstrap').to.be.below(b.streamCmn.bootstrapFrames);
      const runs = [320, 8000, first.length].map((chunk) => decode(d, chunk));
      expect(runs[0].text).to.match(/my fellow american/);
      for (const r of runs) {
        expect(r.text).to.equal(runs[0].text);
        expect(r.trace).to.deep.equal(runs[0].trace);
        // Before, the whole utterance (260 frames) waited for its end.
        expect(r.trace.tail, JSON.stringify(r.trace)).to.be.at.most(lookahead);
        expect(r.trace.restarts).to.be.at.most(3);
      }
      expect(frames).to.be.above(3 * lookahead);
    } finally {
      d.close();
    }
  });

  it('is not searched again from its start when its end settles the estimate (24 corpus clips)', async () => {
    // Its final waits for what end() searches: a search from the start there was the whole utterance at
    // once (250-300 frames, up to 450 ms after the cut on these clips), and it changed no word.
    const cmn = { ...DEFAULT_CMN, ...b.streamCmn };
    const d = new Decoder(opts(b.streamCmn));
    try {
      const clips = loadCorpus('short').filter((_, i) => i % 2 === 0);
      const cutter = await RealtimeCutter.create(loadConfig({}));
      const firsts: { file: string; cut: Buffer }[] = [];
      for (const c of clips) {
        // The session's first utterance as the realtime tier's segmenter (silero, default settings) cuts it.
        const stream = streamOf(corpusPcm(c));
        const [a, e] = (await cutter.cuts(stream))[0];
        firsts.push({ file: c.file, cut: stream.subarray(a, e) });
      }
      const ends = firsts.map(({ file, cut }) => {
        const pcm = new Int16Array(cut.buffer.slice(cut.byteOffset, cut.byteOffset + cut.length));
        d.begin(initialCmn());
        const trace = d.cmnTrace!;
        for (let i = 0; i < pcm.length; i += 320) d.feed(pcm.subarray(i, i + 320));
        d.end();
        return { clip: file, frames: pcm.length / 160, ...trace };
      });
      const shortOnes = ends.filter((e) => e.frames < cmn.bootstrapFrames + cmn.lookaheadFrames);
      expect(shortOnes.length, 'first sentences that end during the bootstrap').to.be.at.least(8);
      expect(ends.filter((e) => e.tail > cmn.lookaheadFrames).map((e) => e.clip)).to.deep.equal([]);
    } finally {
      d.close();
    }
  });
});
