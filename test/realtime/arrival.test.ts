/**
 * Words independent of how the audio arrives (issue 21): the same clip
 * streamed into the realtime tier (silero VAD, the built-in engine's
 * streaming form) after 0 to 2 s of lead-in (zero samples or a faint noise
 * floor), in 20 ms to 500 ms frames, binary or base64, at real-time pace or
 * faster, gives the same words. Before the fix, an utterance's frames were
 * laid from wherever the VAD window that opened it fell, so the lead-in
 * shifted every frame against the speech: jfk.wav gave 5% WER after 300 ms
 * and 73% after 500 ms.
 */
import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { connect, bearer, readPcm, refs, silence, realtimeWithBuiltinEngine } from './helpers.js';
import { wer } from '../speech/helpers.js';
import { corpusPcm, loadCorpus, percentile, timing } from '../speech/corpus.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';

/** A noise floor about 60 dB below full scale (deterministic per length). */
function noiseFloor(ms: number): Buffer {
  const n = Math.round(ms * 16);
  const out = Buffer.alloc(n * 2);
  const r = randomBytes(n);
  for (let i = 0; i < n; i++) out.writeInt16LE((r[i] - 128) >> 3, i * 2);
  return out;
}

interface Arrival {
  name: string;
  lead: Buffer;
  frameMs: number;
  base64: boolean;
  pace: number;
}

const ARRIVALS: Arrival[] = [
  { name: 'no lead-in, 20 ms binary', lead: Buffer.alloc(0), frameMs: 20, base64: false, pace: 0 },
  { name: '500 ms zeros, 100 ms binary', lead: silence(500), frameMs: 100, base64: false, pace: 0 },
  { name: '1300 ms zeros, 500 ms base64', lead: silence(1300), frameMs: 500, base64: true, pace: 0 },
  { name: '2000 ms noise floor, 40 ms base64', lead: noiseFloor(2000), frameMs: 40, base64: true, pace: 0 },
];

describe('realtime words do not depend on how the audio arrives', function () {
  this.timeout(600_000);
  const ctx = realtimeWithBuiltinEngine();

  async function completed(pcm: Buffer, a: Arrival): Promise<Record<string, any>[]> {
    const { key } = await ctx().issueKey('pro');
    const c = await connect(ctx().url, bearer(key));
    await c.next('session.created');
    c.send({ type: 'session.update', language: 'en' });
    await c.next('session.updated');
    await c.stream(Buffer.concat([a.lead, pcm, silence(900)]), {
      frameBytes: a.frameMs * 32,
      base64: a.base64,
      pace: a.pace,
    });
    await c.finals(120_000);
    c.ws.close(1000);
    await c.closed;
    return c.of(COMPLETED).sort((x, y) => x.utterance_index - y.utterance_index);
  }

  async function transcript(pcm: Buffer, a: Arrival): Promise<string> {
    return (await completed(pcm, a))
      .map((e) => e.text as string)
      .join(' ')
      .trim();
  }

  const corpus = loadCorpus('short').filter((c) => c.voice.startsWith('flite') && Number(c.pause) >= 1);
  const clips = [
    { name: 'jfk.wav', pcm: () => readPcm('jfk.wav'), reference: refs().get('jfk.wav')! },
    ...[corpus[0], corpus[5], corpus[11]].map((c) => ({
      name: c.file,
      pcm: () => corpusPcm(c),
      reference: c.reference,
    })),
  ];

  it('the same words after 0-2 s of lead-in, in 20-500 ms frames, binary or base64, on several clips', async function () {
    const errors = ARRIVALS.map(() => 0);
    let words = 0;
    const differ: string[] = [];
    for (const clip of clips) {
      const pcm = clip.pcm();
      const texts: string[] = [];
      for (const [i, a] of ARRIVALS.entries()) {
        const text = await transcript(pcm, a);
        texts.push(text);
        errors[i] += wer(clip.reference, text) * clip.reference.split(' ').length;
      }
      words += clip.reference.split(' ').length;
      texts.forEach(
        (t, i) =>
          t !== texts[0] && differ.push(`${clip.name} (${ARRIVALS[i].name}): "${t}" vs "${texts[0]}"`),
      );
    }
    const rates = errors.map((e) => (100 * e) / words);
    // Word-weighted WER moves by at most a point with the arrival, and most clips give identical words.
    expect(
      Math.max(...rates) - Math.min(...rates),
      `WER per arrival ${rates.map((r) => r.toFixed(1))}\n${differ.join('\n')}`,
    ).to.be.at.most(1.5);
    expect(differ.length, differ.join('\n')).to.be.at.most(1);
  });

  it("completed events carry the words with times on the session's audio, inside the speech they name", async function () {
    const outside: string[] = [];
    const starts: number[] = [];
    for (const [i, c] of corpus.slice(0, 6).entries()) {
      const lead = [700, 1300, 0][i % 3];
      const events = await completed(corpusPcm(c), { ...ARRIVALS[1], lead: silence(lead) });
      const ws = events.flatMap((e) => e.words as { word: string; start: number; end: number }[]);
      expect(ws.map((w) => w.word).join(' ')).to.equal(
        events
          .map((e) => e.text)
          .join(' ')
          .trim(),
      );
      // The clip starts `lead` into the session.
      const report = timing(
        c,
        ws.map((w) => ({ ...w, start: w.start - lead / 1000, end: w.end - lead / 1000 })),
      );
      starts.push(...report.startErrors);
      for (const w of report.outside)
        outside.push(`${c.file}: "${w.word}" ${w.start}-${w.end} (${w.by.toFixed(2)} s out)`);
    }
    expect(outside, outside.join('\n')).to.deep.equal([]);
    expect(starts.length).to.be.at.least(6);
    expect(percentile(starts, 95), starts.map((x) => x.toFixed(2)).join(' ')).to.be.at.most(0.15);
  });

  it('jfk.wav at real-time pace gives the words it gives faster, whatever the lead-in', async function () {
    const pcm = readPcm('jfk.wav');
    const fast = await transcript(pcm, ARRIVALS[0]);
    const slow = await transcript(pcm, { ...ARRIVALS[1], frameMs: 20, pace: 1 });
    expect(slow).to.equal(fast);
    expect(wer(refs().get('jfk.wav')!, slow)).to.be.below(0.6);
  });
});
