/**
 * Segmenter policy with a scripted classifier: windows louder than a level are
 * "speech", so tests build exact speech/silence patterns.
 */
import { expect } from 'chai';
import {
  Segmenter,
  WINDOW_BYTES,
  type SegmenterEvent,
  type SegmenterSettings,
} from '../../realtime/vad/segmenter.js';
import { SegmentationRounds, type VadEvent } from '../../realtime/vad/rounds.js';
import type { PoolStats, Vad, WindowClassifier } from '../../realtime/vad/vad.js';

const BASE: SegmenterSettings = {
  vad: true,
  threshold: 0.5,
  silenceMs: 320, // 10 windows
  prefixMs: 96, // 3 windows
  minSpeechMs: 96, // 3 windows
  targetSpeechMs: 10_000,
  maxSpeechMs: 30_000,
  smartSplitWindowMs: 0,
};

/** One window of a constant level (int16 amplitude). */
const win = (amp: number) => {
  const b = Buffer.alloc(WINDOW_BYTES);
  for (let i = 0; i < WINDOW_BYTES / 2; i++) b.writeInt16LE(i % 2 ? amp : -amp, i * 2);
  return b;
};
/** Pattern: S = speech (loud), q = quiet but above the gate, . = digital silence. */
const pcm = (pattern: string, loud = 8000) =>
  Buffer.concat([...pattern].map((ch) => win(ch === 'S' ? loud : ch === 'q' ? 400 : ch === 'm' ? 2000 : 0)));

/** A VAD whose classifiers answer at once: nothing ever waits for `run()`. */
class Loudness implements Vad {
  calls = 0;
  released = 0;
  readonly pending = 0;
  run(): Promise<void> {
    return Promise.resolve();
  }
  get stats(): PoolStats {
    return { created: 0, inUse: 0, idle: 0, calls: this.calls, windows: this.calls };
  }
  acquire(): WindowClassifier {
    return {
      isSpeech: (w) => {
        this.calls++;
        let s = 0;
        for (const v of w) s += v * v;
        return Math.sqrt(s / w.length) > 0.03;
      },
      release: () => {
        this.released++;
      },
    };
  }
}

const stops = (evs: SegmenterEvent[]) =>
  evs.filter((e) => e.type === 'stop') as Extract<SegmenterEvent, { type: 'stop' }>[];

describe('realtime VAD segmenter policy', () => {
  it('opens after min speech with the prefix, ends after the silence, trailing pad at most the prefix', () => {
    const src = new Loudness();
    const seg = new Segmenter(BASE, src, { gateDbfs: -50, releaseAfterMs: 10_000 });
    const evs = seg.push(pcm('.....qqqq' + 'SSSSSSSSSS' + 'qqqqqqqqqqqq'));
    expect(evs.map((e) => e.type)).to.deep.equal(['start', 'stop']);
    const [stop] = stops(evs);
    expect(stop.reason).to.equal('end_of_speech');
    // 3 prefix windows + 10 speech + 3 trailing pad.
    expect(stop.pcm.length).to.equal(16 * WINDOW_BYTES);
    expect(stop.speechMs).to.equal(320);
    expect(evs[0]).to.include({ type: 'start', audioStartMs: 6 * 32 });
  });

  it('ignores speech shorter than the minimum (clicks)', () => {
    const seg = new Segmenter(BASE, new Loudness(), { gateDbfs: -50, releaseAfterMs: 10_000 });
    expect(seg.push(pcm('SS' + 'q'.repeat(12) + 'S' + 'q'.repeat(12)))).to.deep.equal([]);
  });

  it('past the target length ends at the next short pause (target_duration)', () => {
    const seg = new Segmenter({ ...BASE, targetSpeechMs: 640 }, new Loudness(), {
      gateDbfs: -50,
      releaseAfterMs: 10_000,
    });
    const evs = seg.push(pcm('S'.repeat(25) + 'qqqqq' + 'S'.repeat(5) + 'q'.repeat(12)));
    const s = stops(evs);
    expect(s[0].reason).to.equal('target_duration');
    expect(s[0].pcm.length).to.equal((25 + 3) * WINDOW_BYTES);
  });

  it('at the maximum cuts at the quietest window of the smart-split window; the next utterance starts at once', () => {
    const seg = new Segmenter(
      { ...BASE, maxSpeechMs: 1280, targetSpeechMs: 1280, smartSplitWindowMs: 320 },
      new Loudness(),
      {
        gateDbfs: -50,
        releaseAfterMs: 10_000,
      },
    );
    // 40 windows = max. The quietest window inside the last 10 is index 33 ('m' is quieter than S but still speech).
    const evs = seg.push(pcm('S'.repeat(33) + 'm' + 'S'.repeat(6) + 'S'.repeat(10) + 'q'.repeat(12)));
    const types = evs.map((e) => (e.type === 'stop' ? `stop:${e.reason}` : e.type));
    expect(types).to.deep.equal(['start', 'stop:max_duration', 'start', 'stop:end_of_speech']);
    const [first, second] = stops(evs);
    expect(first.pcm.length).to.equal(34 * WINDOW_BYTES);
    expect(evs[2]).to.include({ type: 'start', audioStartMs: first.audioEndMs });
    expect(second.audioStartMs).to.equal(first.audioEndMs);
  });

  it('without smart split the maximum cuts exactly at the limit', () => {
    const seg = new Segmenter({ ...BASE, maxSpeechMs: 1280, targetSpeechMs: 1280 }, new Loudness(), {
      gateDbfs: -50,
      releaseAfterMs: 10_000,
    });
    const s = stops(seg.push(pcm('S'.repeat(45))));
    expect(s[0].reason).to.equal('max_duration');
    expect(s[0].pcm.length).to.equal(40 * WINDOW_BYTES);
  });

  it('flush ends the open utterance, including the partial window', () => {
    const seg = new Segmenter(BASE, new Loudness(), { gateDbfs: -50, releaseAfterMs: 10_000 });
    seg.push(pcm('SSSSS'));
    seg.push(Buffer.alloc(100));
    const s = stops(seg.flush());
    expect(s[0].reason).to.equal('flush');
    expect(s[0].pcm.length).to.equal(5 * WINDOW_BYTES + 100);
    expect(seg.flush()).to.deep.equal([]);
  });

  it('with VAD off everything is speech until flush or the maximum', () => {
    const src = new Loudness();
    const seg = new Segmenter({ ...BASE, vad: false }, src, { gateDbfs: -50, releaseAfterMs: 10_000 });
    const evs = seg.push(pcm('....'));
    expect(evs.map((e) => e.type)).to.deep.equal(['start']);
    expect(stops(seg.flush())[0].pcm.length).to.equal(4 * WINDOW_BYTES);
    expect(src.calls).to.equal(0);
  });

  it('silence below the gate never reaches the model, and the model is handed back after gated silence', () => {
    const src = new Loudness();
    const seg = new Segmenter(BASE, src, { gateDbfs: -50, releaseAfterMs: 320 });
    seg.push(pcm('.'.repeat(100)));
    expect(src.calls).to.equal(0);
    seg.push(pcm('SSSSSS' + 'q'.repeat(12)));
    expect(seg.holdsModel).to.equal(true);
    seg.push(pcm('.'.repeat(12)));
    expect(seg.holdsModel).to.equal(false);
    expect(src.released).to.equal(1);
  });

  it('speech hold skips the model on loud windows mid-utterance, never on pauses', () => {
    const src = new Loudness();
    const seg = new Segmenter(BASE, src, { gateDbfs: -50, releaseAfterMs: 10_000, holdDb: 10, maxSkip: 2 });
    // Floor from quiet windows, then loud speech, then a pause that must end the utterance.
    const evs = seg.push(pcm('qqqqqq' + 'S'.repeat(30) + 'q'.repeat(12)));
    expect(stops(evs).map((s) => s.reason)).to.deep.equal(['end_of_speech']);
    expect(seg.modelCalls).to.be.lessThan(seg.windows - 15);
    const full = new Loudness();
    const ref = new Segmenter(BASE, full, { gateDbfs: -50, releaseAfterMs: 10_000 });
    const refStops = stops(ref.push(pcm('qqqqqq' + 'S'.repeat(30) + 'q'.repeat(12))));
    expect(stops(evs)[0].pcm.length).to.equal(refStops[0].pcm.length);
  });

  it('quiet ends: a window at the floor ends speech at once, though the model trails on (quietDb)', () => {
    /** Like silero: "speech" goes on for 4 windows after the sound stops. */
    class Trailing {
      private after = 99;
      acquire(): WindowClassifier {
        return {
          isSpeech: (w) => {
            let s = 0;
            for (const v of w) s += v * v;
            this.after = Math.sqrt(s / w.length) > 0.03 ? 0 : this.after + 1;
            return this.after <= 4;
          },
          release: () => {},
        };
      }
    }
    // Pauses of digital silence (below the gate) and of a noise floor (q, heard before the speech).
    for (const pause of ['.', 'q']) {
      const input = pcm('qqqq' + 'S'.repeat(10) + pause.repeat(12));
      const quiet = new Segmenter(BASE, new Trailing(), {
        gateDbfs: -50,
        releaseAfterMs: 10_000,
        quietDb: 6,
      });
      const [stop] = stops(quiet.push(input));
      expect(stop?.reason, pause).to.equal('end_of_speech');
      // 3 prefix windows + 10 speech + 3 trailing pad: the silence counted from the first quiet window.
      expect(stop.pcm.length, pause).to.equal(16 * WINDOW_BYTES);
      // Without the rule the trailing answers hold it open: 12 windows of pause are not yet 10 of silence.
      const modelOnly = new Segmenter(BASE, new Trailing(), { gateDbfs: -50, releaseAfterMs: 10_000 });
      expect(stops(modelOnly.push(input)), pause).to.have.length(0);
    }
    // A pause louder than the floor by more than quietDb is the model's to judge.
    const loudPause = new Segmenter(BASE, new Trailing(), {
      gateDbfs: -50,
      releaseAfterMs: 10_000,
      quietDb: 6,
    });
    expect(stops(loudPause.push(pcm('qqqq' + 'S'.repeat(10) + 'm'.repeat(12))))).to.have.length(0);
  });

  it("a candidate counts the model's soft answers as speech and survives a pause of candidateGapMs", () => {
    /** Like silero on a quiet phrase: only loud windows (m) pass its threshold; quiet ones (q) pass its exit threshold. */
    const lukewarm = {
      acquire: (): WindowClassifier => {
        let rms = 0;
        return {
          isSpeech: (w) => {
            let s = 0;
            for (const v of w) s += v * v;
            rms = Math.sqrt(s / w.length);
            return rms > 0.05;
          },
          soft: () => rms > 0.01,
          release: () => {},
        };
      },
    };
    const opts = { gateDbfs: -50, releaseAfterMs: 10_000 };
    const minSpeech = { ...BASE, minSpeechMs: 256 }; // 8 windows
    // Bursts of 2 windows over the threshold within a phrase the model hears softly: 2 + 6 soft windows.
    const phrase = pcm('mmqqqqqq' + '.'.repeat(20), 2000);
    expect(stops(new Segmenter(minSpeech, lukewarm, opts).push(phrase))).to.have.length(1);
    // A classifier with no soft answer hears only the bursts.
    const hard = {
      acquire: (): WindowClassifier => {
        const c = lukewarm.acquire();
        return { isSpeech: c.isSpeech, release: c.release };
      },
    };
    expect(stops(new Segmenter(minSpeech, hard, opts).push(phrase))).to.have.length(0);
    // Soft answers count only before the utterance opens: once open, a soft window is a pause (the model's own
    // hysteresis decides), so the silence window still ends it.
    const open = stops(
      new Segmenter(BASE, lukewarm, opts).push(pcm('SSSS' + 'q'.repeat(12) + '.'.repeat(4))),
    );
    expect(open.map((s) => s.reason)).to.deep.equal(['end_of_speech']);
    // Two parts of 4 speech windows, 12 windows apart: broken by a 320 ms window (10 windows) unless the candidate's
    // gap is longer.
    const parts = pcm('...' + 'SSSS' + '.'.repeat(12) + 'SSSS' + '.'.repeat(20));
    expect(stops(new Segmenter(minSpeech, new Loudness(), opts).push(parts))).to.have.length(0);
    const joined = stops(
      new Segmenter(minSpeech, new Loudness(), { ...opts, candidateGapMs: 500 }).push(parts),
    );
    expect(joined).to.have.length(1);
    // The utterance holds both parts: 3 prefix windows, 4 + 12 + 4, 3 trailing.
    expect(joined[0].pcm.length).to.equal(26 * WINDOW_BYTES);
    // An open utterance still ends after the session's silence window, not the candidate's gap.
    const ends = stops(
      new Segmenter(BASE, new Loudness(), { ...opts, candidateGapMs: 500 }).push(
        pcm('S'.repeat(10) + '.'.repeat(12) + 'S'.repeat(10) + '.'.repeat(12)),
      ),
    );
    expect(ends).to.have.length(2);
  });

  it('quiet ends leave low signal-to-noise speech to the model (within 20 dB of the loudest window)', () => {
    /** Hears speech a few dB above a noise floor (rms 0.018 over a floor of 0.012). */
    const keen = {
      acquire: (): WindowClassifier => ({
        isSpeech: (w) => {
          let s = 0;
          for (const v of w) s += v * v;
          return Math.sqrt(s / w.length) > 0.015;
        },
        release: () => {},
      }),
    };
    // Floor from q windows (-38 dBFS), then 20 windows of speech only 3.5 dB above it, then the floor.
    const seg = new Segmenter(BASE, keen, { gateDbfs: -50, releaseAfterMs: 10_000, quietDb: 6 });
    const all = stops(seg.push(Buffer.concat([pcm('qqqq'), pcm('S'.repeat(20), 600), pcm('q'.repeat(12))])));
    expect(all.map((x) => x.reason)).to.deep.equal(['end_of_speech']);
    // 3 prefix windows + all 20 of speech + 3 trailing pad: not cut inside the speech.
    expect(all[0].pcm.length).to.equal(26 * WINDOW_BYTES);
  });

  it('streamAudio: audio events between start and stop add up to the stop pcm, in any frame size, with every cut', () => {
    const settings = { ...BASE, maxSpeechMs: 1280, targetSpeechMs: 1280, smartSplitWindowMs: 320 };
    const audio = pcm(
      '.....qq' + 'S'.repeat(33) + 'm' + 'S'.repeat(16) + 'q'.repeat(4) + 'SSSSS' + 'q'.repeat(14) + 'SSSS',
    );
    const run = (frame: number) => {
      const seg = new Segmenter(settings, new Loudness(), {
        gateDbfs: -50,
        releaseAfterMs: 10_000,
        streamAudio: true,
      });
      const evs: SegmenterEvent[] = [];
      for (let off = 0; off < audio.length; off += frame)
        evs.push(...seg.push(audio.subarray(off, off + frame)));
      evs.push(...seg.flush());
      return evs;
    };
    const reference = run(audio.length);
    for (const frame of [640, 2048, 16_000]) {
      const evs = run(frame);
      const utterances: { streamed: Buffer[]; stop?: Buffer; reason?: string }[] = [];
      for (const e of evs) {
        if (e.type === 'start') utterances.push({ streamed: [] });
        else if (e.type === 'audio') utterances.at(-1)!.streamed.push(e.pcm);
        else if (e.type === 'stop') Object.assign(utterances.at(-1)!, { stop: e.pcm, reason: e.reason });
      }
      expect(utterances.map((u) => u.reason)).to.deep.equal(['max_duration', 'end_of_speech', 'flush']);
      for (const u of utterances) expect(Buffer.concat(u.streamed).equals(u.stop!)).to.equal(true);
      expect(stops(evs).map((e) => e.pcm.length)).to.deep.equal(stops(reference).map((e) => e.pcm.length));
    }
  });
});

describe('realtime VAD segmenter: sentence-end pauses', () => {
  // A pause of 4 windows (128 ms) is put to the owner; 10 windows of silence end speech regardless.
  const SETTINGS: SegmenterSettings = { ...BASE, sentenceEndSilenceMs: 128 };
  const OPTS = { gateDbfs: -50, releaseAfterMs: 10_000, streamAudio: true };
  const AUDIO = pcm('....' + 'S'.repeat(8) + 'qqqqqq' + 'S'.repeat(8) + 'q'.repeat(14));

  /** Pushes `audio` in `frame`-byte pieces, answering each pause with `judge(n)` (the silence that ends it, ms). */
  function run(frame: number, judge: (pause: number) => number) {
    const seg = new Segmenter(SETTINGS, new Loudness(), OPTS);
    const evs: SegmenterEvent[] = [];
    const take = (got: SegmenterEvent[]) => {
      for (const e of got) {
        evs.push(e);
        if (e.type === 'pause') {
          expect(seg.judging).to.equal(true);
          take(seg.verdict(e.pause, judge(e.pause)));
        }
      }
    };
    for (let off = 0; off < AUDIO.length; off += frame) take(seg.push(AUDIO.subarray(off, off + frame)));
    take(seg.flush());
    return evs;
  }

  it('ends the utterance at a pause judged a sentence end, and only there', () => {
    const evs = run(AUDIO.length, () => 0);
    expect(evs.filter((e) => e.type !== 'audio').map((e) => e.type)).to.deep.equal([
      'start',
      'pause',
      'stop',
      'start',
      'pause',
      'stop',
    ]);
    const [first, second] = stops(evs);
    expect(first.reason).to.equal('end_of_speech');
    // 3 prefix windows + 8 speech + 3 of the pause's 4 windows (trailing pad at most the prefix).
    expect(first.pcm.length).to.equal(14 * WINDOW_BYTES);
    expect(second.reason).to.equal('end_of_speech');
  });

  it('goes on through a pause judged mid-sentence; the silence window still ends it', () => {
    const evs = run(AUDIO.length, () => Infinity);
    const [only, ...rest] = stops(evs);
    expect(rest).to.deep.equal([]);
    expect(only.reason).to.equal('end_of_speech');
    // 3 prefix + 8 speech + 6 pause + 8 speech + 3 trailing pad.
    expect(only.pcm.length).to.equal(28 * WINDOW_BYTES);
  });

  it('a verdict that asks for more silence ends the utterance once the pause is that long, not before', () => {
    // The pause inside is 6 windows: 5 windows (160 ms) end it there, 7 (224 ms) let it go on.
    const ends = (ms: number) => stops(run(AUDIO.length, () => ms)).length;
    expect(ends(160)).to.equal(2);
    expect(ends(224)).to.equal(1);
    const [first] = stops(run(AUDIO.length, () => 160));
    // 3 prefix + 8 speech + 3 of the pause's windows (trailing pad at most the prefix), as at once.
    expect(first.pcm.length).to.equal(14 * WINDOW_BYTES);
  });

  it('waits for the verdict, so the cut depends on the audio alone, not on how it arrives', () => {
    // Audio that arrives while a pause waits is queued, not judged by a later window.
    const seg = new Segmenter(SETTINGS, new Loudness(), OPTS);
    const evs = seg.push(AUDIO);
    expect(evs.at(-1)?.type).to.equal('pause');
    expect(seg.push(pcm('SSSS'))).to.deep.equal([]);
    expect(() => seg.flush()).to.throw(/verdict/);
    expect(seg.verdict(99, 0), 'an answer to another pause').to.deep.equal([]);
    const reference = run(AUDIO.length, (n) => (n === 1 ? 0 : Infinity)).filter((e) => e.type !== 'audio');
    for (const frame of [2, 640, 3 * WINDOW_BYTES, 4096])
      expect(run(frame, (n) => (n === 1 ? 0 : Infinity)).filter((e) => e.type !== 'audio')).to.deep.equal(
        reference,
      );
  });

  it("a closing session's flush does not wait for a verdict: it ends the utterance with all audio before it", async () => {
    // Nobody answers the pause: before, the flush queued behind it until the verdict came (a decoder
    // behind real time held a draining session past its drain window).
    const got = new Map<number, VadEvent[]>();
    const rounds = new SegmentationRounds(new Loudness(), OPTS, (out) => {
      for (const [id, evs] of out) got.set(id, [...(got.get(id) ?? []), ...evs]);
    }, (err) => { throw err; }); // prettier-ignore
    const audio = Buffer.concat([AUDIO.subarray(0, 20 * WINDOW_BYTES), pcm('S'.repeat(8) + 'q'.repeat(6))]);
    // Stream 1 closes (a drain); stream 2's client flushes: that flush waits, so cuts depend on the audio alone.
    for (const [id, closing] of [
      [1, true],
      [2, false],
    ] as const) {
      rounds.add({ op: 'open', id, settings: SETTINGS, streamAudio: true });
      rounds.add({ op: 'push', id, pcm: audio });
      rounds.add({ op: 'flush', id, closing });
    }
    await new Promise((r) => setTimeout(r, 20));
    const types = (id: number) =>
      got
        .get(id)!
        .filter((e) => e.type !== 'audio')
        .map((e) => e.type);
    // The pause in the audio after the first was never put (the flush was waiting).
    expect(types(1)).to.deep.equal(['start', 'pause', 'stop', 'flushed']);
    const [stop] = stops(got.get(1) as SegmenterEvent[]);
    expect(stop.reason).to.equal('flush');
    // Everything from the prefix (3 windows before the speech, which starts at window 4) to the flush.
    expect(stop.pcm.length).to.equal(audio.length - WINDOW_BYTES);
    expect(types(2)).to.deep.equal(['start', 'pause']);
  });

  it('puts no pause to an owner without a streaming decoder, and none a window as long as the silence window', () => {
    const plain = new Segmenter(SETTINGS, new Loudness(), { gateDbfs: -50, releaseAfterMs: 10_000 });
    expect(plain.push(AUDIO).map((e) => e.type)).to.deep.equal(['start', 'stop']);
    const long = new Segmenter({ ...SETTINGS, sentenceEndSilenceMs: 320 }, new Loudness(), OPTS);
    expect(long.push(AUDIO).filter((e) => e.type === 'pause')).to.deep.equal([]);
  });
});
