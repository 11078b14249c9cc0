/**
 * The streaming decoders of a thread share their language models (issue 40,
 * "Footprint"; shared/stt/pocketsphinx/models.ts): a decoder past the first
 * adds far less memory than a copy of the models would, and words one key's
 * prompt or vocabulary adds on one decoder reach no other decoder of the
 * thread: the other key's transcript is the one it was, on an older decoder
 * and on one created after the words went into the shared `extras` model;
 * and a decoder's words do not change when the decoder whose log-math the
 * models were read with is gone.
 */
import { expect } from 'chai';
import { loadConfig } from '../../shared/config/index.js';
import { initialCmn } from '../../shared/stt/pocketsphinx/cmn.js';
import { Decoder, type DecoderOptions } from '../../shared/stt/pocketsphinx/decoder.js';
import { sharedModelCount } from '../../shared/stt/pocketsphinx/models.js';
import { BiasCompiler, specFor, type PromptBias } from '../../shared/stt/bias/index.js';
import { prepareLexicon } from '../../shared/stt/bias/lexicon.js';
import { termsClip } from '../audio/corpus/terms.js';

const MiB = 1024 * 1024;
/** RSS a decoder past the first may add: a private copy of the models made it about 88 MiB, sharing about 45. */
const PER_DECODER_LIMIT_MIB = 65;

describe('speech: the decoders of a thread share their language models (issue 40)', function () {
  this.timeout(300_000);
  const b = loadConfig({}).speech.builtin;
  // A lexicon cut at 50,000 words, past which "dashboards" (the model's 52,173rd) falls: the prompt below
  // adds a word the general model knows, which must leave the search with the prompt (PAST_CUT).
  const files = prepareLexicon({ ...b, searchWords: 50_000 });
  const bias: PromptBias = { files, compiler: new BiasCompiler(files) };
  const opts: DecoderOptions = {
    hmm: b.hmm,
    lm: b.lm,
    dict: bias.files.dict,
    extras: bias.files.extras,
    pocketsphinxLibrary: b.pocketsphinxLibrary,
    sphinxbaseLibrary: b.sphinxbaseLibrary,
    extraArgs: [...b.extraArgs, ...b.streamExtraArgs],
    sessionCmn: b.streamCmn,
  };
  // "we moved the grafana dashboards onto kubernetes last week", flite slt, clean.
  const k8s = termsClip('00-0-flite-slt-clean.flac');
  const pcm = new Int16Array(k8s.pcm.buffer, k8s.pcm.byteOffset, k8s.pcm.length / 2);
  const decoders: Decoder[] = [];
  after(() => {
    for (const d of decoders.splice(0)) d.close();
  });

  const fresh = () => {
    const d = new Decoder(opts);
    decoders.push(d);
    return d;
  };
  const transcript = (d: Decoder, prompt?: string) => {
    d.bias(specFor(bias, prompt, undefined));
    d.begin(initialCmn());
    for (let i = 0; i < pcm.length; i += 320) d.feed(pcm.subarray(i, i + 320));
    return d
      .end()
      .map((w) => w.word)
      .join(' ');
  };
  const rss = () => {
    global.gc?.();
    return process.memoryUsage().rss;
  };

  it('a decoder past the first adds far less memory than a copy of the models', () => {
    const first = fresh();
    transcript(first);
    expect(sharedModelCount(), 'the general model and extras, once').to.equal(2);
    const before = rss();
    const more = 3;
    for (let i = 0; i < more; i++) transcript(fresh());
    const perDecoder = (rss() - before) / more / MiB;
    expect(sharedModelCount()).to.equal(2);
    expect(perDecoder, `RSS added per decoder, MiB`).to.be.below(PER_DECODER_LIMIT_MIB);
  });

  it("one key's prompt words reach no other decoder of the thread", () => {
    const [other, prompted] = [fresh(), fresh()];
    const before = transcript(other);
    expect(before).not.to.match(/kubernetes|grafana/);
    // The prompt adds its words to the prompted decoder's dictionary, through the shared extras model:
    // those no model knows and "dashboards", which the general model ranks past the search's words.
    expect(transcript(prompted, 'Dashboards for Kubernetes and Grafana.')).to.match(/grafana dashboards/);
    expect(transcript(other), 'a decoder made before the words were added').to.equal(before);
    expect(transcript(fresh()), 'a decoder made after').to.equal(before);
    // The prompted decoder itself, back on the general model, says what the others say.
    expect(transcript(prompted)).to.equal(before);
  });

  it('decodes as before once the decoder that read the models is gone', () => {
    const [reader, other] = [decoders[0], fresh()];
    const prompt = 'Dashboards for Kubernetes and Grafana.';
    const expected = [transcript(other), transcript(other, prompt)];
    decoders.splice(decoders.indexOf(reader), 1);
    reader.close();
    // Decoders made and freed meanwhile reuse what was freed.
    for (let i = 0; i < 3; i++) fresh();
    for (const d of decoders.splice(-3)) d.close();
    expect([transcript(other), transcript(other, prompt)]).to.deep.equal(expected);
  });
});
