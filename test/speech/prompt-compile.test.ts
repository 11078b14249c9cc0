/**
 * How prompts and vocabularies compile for the built-in engine (issue 37),
 * against the real lexicon and eSpeak NG: the prompt model is a well-formed
 * ARPA bigram model of the prompt's words; words the general model lacks get
 * pronunciations in the acoustic model's phones, written back as the prompt
 * writes them; spoken forms become pronunciations; unpronounceable
 * vocabulary words are named; a prompt of words the model knows adds no
 * word; specs are cached by content.
 */
import { expect } from 'chai';
import { loadConfig } from '../../shared/config/index.js';
import { promptBias } from '../../shared/stt/bias/index.js';
import { PHONES } from '../../shared/stt/bias/pronounce.js';
import { UnpronounceableError } from '../../shared/stt/bias/compile.js';

describe('prompt and vocabulary compilation (issue 37)', function () {
  this.timeout(60_000);
  const bias = promptBias(loadConfig({}).speech.builtin)!;

  it('makes a bigram model of the prompt and pronunciations for the words the model lacks', () => {
    const spec = bias.compiler.compile('We run Kubernetes and Grafana; kubernetes pods restart.', undefined)!;
    expect(spec.arpa).to.match(/^\\data\\\nngram 1=\d+\nngram 2=\d+\n/);
    expect(spec.arpa).to.include(' kubernetes\n').and.to.include(' run kubernetes\n');
    // Clauses are separate: no pair across the semicolon.
    expect(spec.arpa).not.to.include(' grafana kubernetes\n');
    const words = spec.words.map((w) => w.word);
    expect(words).to.include('kubernetes').and.to.include('grafana');
    expect(words).not.to.include('run');
    for (const w of spec.words)
      expect(
        w.phones.every((p) => PHONES.has(p)),
        w.word,
      ).to.equal(true);
    expect(spec.display).to.deep.include({ kubernetes: 'Kubernetes', grafana: 'Grafana' });
    expect(spec.display).not.to.have.property('we');
    // Names the model knows are written as the prompt writes them; sentence starts are not names.
    const names = bias.compiler.compile('Okonkwo, Siobhan. The team met Dmitri today.', undefined)!;
    expect(names.display).to.deep.include({ siobhan: 'Siobhan', dmitri: 'Dmitri' });
    expect(names.display).not.to.have.property('the');
  });

  it('adds no word for a prompt the general model knows, and caches by content', () => {
    const a = bias.compiler.compile('the morning train was late', undefined)!;
    expect(a.words).to.deep.equal([]);
    expect(bias.compiler.compile('the morning train was late', undefined)).to.equal(a);
    expect(bias.compiler.compile('', undefined)).to.equal(undefined);
    expect(bias.compiler.compile('  12 345 !!', undefined)).to.equal(undefined);
  });

  it("turns a vocabulary's spoken forms into pronunciations and names words nobody can say", () => {
    const spec = bias.compiler.compile(undefined, [
      { word: 'HAProxy', spoken: ['h a proxy'] },
      { word: 'Saoirse Ronan' },
    ])!;
    const ha = spec.words.filter((w) => w.word.startsWith('haproxy'));
    expect(ha.length).to.be.greaterThan(0);
    // "h" is EY CH in the dictionary; "proxy" is P R AA K S IY.
    expect(ha[0].phones.join(' ')).to.match(/^EY CH .*P R AA K S IY$/);
    expect(spec.display).to.deep.include({ haproxy: 'HAProxy', saoirse: 'Saoirse' });
    expect(() => bias.compiler.check([{ word: 'Жёлудь' }, { word: 'nginx' }]))
      .to.throw(UnpronounceableError)
      .with.property('words')
      .that.deep.equals(['Жёлудь']);
  });
});
