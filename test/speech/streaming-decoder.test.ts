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
});
