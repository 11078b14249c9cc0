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
import fs from 'node:fs';
import { loadConfig } from '../../shared/config/index.js';
import { ALTERNATES_WORDS, SEARCH_VOCABULARY_WORDS } from '../../shared/config/speech.js';
import { promptBias, respell } from '../../shared/stt/bias/index.js';
import { PHONES } from '../../shared/stt/bias/pronounce.js';
import { PAST_CUT, UnpronounceableError } from '../../shared/stt/bias/compile.js';

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

  it('searches the model’s most frequent words; a prompt adds one it ranks past them, as the dictionary says it', () => {
    const words = (file: string) =>
      new Set(
        fs
          .readFileSync(file, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => l.slice(0, l.indexOf(' ')).replace(/\(\d+\)$/, '')),
      );
    const searched = words(bias.files.dict);
    const tail = words(bias.files.tail);
    expect(searched.size).to.equal(SEARCH_VOCABULARY_WORDS);
    for (const w of ['the', 'country', 'kitchen', 'dashwood', 'dashboards'])
      expect(searched.has(w), w).to.equal(true);
    // "launchings" is the model's 65,003rd word: past the cut, its pronunciation kept in the tail.
    expect(searched.has('launchings')).to.equal(false);
    expect(tail.has('launchings')).to.equal(true);
    // Every word the model knows is in one of the two (en-us.lm.bin: 72,545 with a pronunciation).
    expect(searched.size + tail.size).to.equal(72_545);
    expect([...tail].filter((w) => searched.has(w))).to.deep.equal([]);
    // Alternate pronunciations only for the most frequent words: "either" (the model's 316th word) is
    // searched both ways, "pecan" (its 25,815th; three in the dictionary) as the dictionary first says it.
    const entries = fs
      .readFileSync(bias.files.dict, 'utf8')
      .split('\n')
      .map((l) => l.slice(0, l.indexOf(' ')));
    expect(ALTERNATES_WORDS).to.be.within(316, 25_814);
    expect(entries).to.include.members(['either', 'either(2)', 'pecan']);
    expect(entries).to.not.include('pecan(2)');
    expect(entries.filter((e) => e.endsWith(')')).length).to.be.below(2000);
    // A prompt or vocabulary that names "pecan" has it searched all three ways again (as further
    // pronunciations of the searched word); "either" has its own already.
    const alternates = (spec: ReturnType<typeof bias.compiler.compile>) =>
      spec?.words.map((w) => `${w.word} ${w.phones.join(' ')}`);
    const pecan = ['pecan(11) P IY K AA N', 'pecan(12) P IH K AE N'];
    expect(alternates(bias.compiler.compile('Pecan pie, either way', undefined))).to.deep.equal(pecan);
    expect(
      alternates(bias.compiler.compile(undefined, [{ word: 'pecan' }, { word: 'either' }])),
    ).to.deep.equal(pecan);
    // Added under a name of its own (PAST_CUT): the general model, which knows "launchings", does not
    // know it, so the word leaves the search with the prompt. Results show it as the dictionary writes it.
    const spec = bias.compiler.compile('Grafana launchings', undefined)!;
    expect(spec.words.find((w) => w.word === `launchings${PAST_CUT}`)?.phones.join(' ')).to.equal(
      'L AO N CH IH NG Z',
    );
    expect(spec.arpa).to.include(` grafana launchings${PAST_CUT}\n`);
    expect(spec.display).to.deep.include({ [`launchings${PAST_CUT}`]: 'launchings', grafana: 'Grafana' });
    // A word past the cut is shown by its own name, even from a decoder that holds it from another prompt.
    const raw = [{ word: `launchings${PAST_CUT}` }, { word: 'grafana' }, { word: 'the' }];
    expect(respell(raw, spec).map((w) => w.word)).to.deep.equal(['launchings', 'Grafana', 'the']);
    expect(respell(raw, undefined).map((w) => w.word)).to.deep.equal(['launchings', 'grafana', 'the']);
    // The extras model lists the searched words (and the sentence markers), nothing else.
    expect(fs.readFileSync(bias.files.extras, 'utf8')).to.include(`ngram 1=${SEARCH_VOCABULARY_WORDS + 2}\n`);
  });
});
