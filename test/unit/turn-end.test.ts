/**
 * Turn ends (issue 38): how the decoder's words and the voice at a pause read
 * (readPause), the wait each reading gets per eagerness level (turnWait), and
 * the debug record of a verdict, which carries the last word's class and never
 * the words. Pure functions; the end-to-end behaviour is in
 * test/realtime/sentence-end.test.ts and the figures in test/bench/realtime/turns.ts.
 */
import { Writable } from 'node:stream';
import { expect } from 'chai';
import { pino } from 'pino';
import { logVerdict, readPause, turnWait, type PauseInfo } from '../../realtime/turnEnd.js';
import { TURN_LEVELS } from '../../shared/config/realtime.js';

const level = { pitchSt: 0, energyDb: 0 };
const cues = (words: string, probability: number, order = 3) => ({
  words: words.split(' '),
  probability,
  order,
});

describe('unit: turn ends', () => {
  it('reads articles, possessives, conjunctions and hesitations as a sentence that goes on', () => {
    for (const w of ['over the', 'tell my', 'apples and', 'i need to buy um', 'because'])
      expect(readPause(cues(w, 0.4), level), w).to.equal('continues');
  });

  it('lets the language model end a sentence on a function word that can end one ("thank you", "over there")', () => {
    expect(readPause(cues('thank you', 0.3), level)).to.equal('likely');
    expect(readPause(cues('over there', 0.12), level)).to.equal('likely');
    // Backed off (misheard words get those) or improbable: it goes on.
    expect(readPause(cues('thank you', 0.3, 2), level)).to.equal('continues');
    expect(readPause(cues('bring you', 0.01), level)).to.equal('continues');
  });

  it('ends at once on a trigram sentence end, and waits when nothing can be read', () => {
    expect(readPause(cues('last spring', 0.24), level)).to.equal('finished');
    expect(readPause(null, level)).to.equal('unsure');
    expect(readPause(null, { pitchSt: -3, energyDb: -6 })).to.equal('likely');
  });

  it('turns each reading into a wait no longer than the longest', () => {
    const m = TURN_LEVELS.medium;
    expect(turnWait('finished', 'medium', m.longestMs, 0)).to.equal(0);
    expect(turnWait('likely', 'medium', m.longestMs, 0)).to.equal(m.likelyMs);
    expect(turnWait('unsure', 'medium', m.longestMs, 0)).to.equal(m.unsureMs);
    // A speaker who paused longer and went on is given their pause and a little more, up to the longest.
    expect(turnWait('unsure', 'medium', m.longestMs, 700)).to.equal(796);
    expect(turnWait('unsure', 'medium', m.longestMs, 1000)).to.equal(m.longestMs);
    expect(turnWait('continues', 'medium', 500, 0)).to.equal(500);
    for (const l of ['high', 'medium', 'low'] as const)
      expect(TURN_LEVELS[l].likelyMs).to.be.below(TURN_LEVELS[l].unsureMs);
  });

  it('logs a verdict with its cues and the last word class, never the words', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _e, cb) {
        lines.push(String(chunk));
        cb();
      },
    });
    const ev: PauseInfo = { pause: 1, silenceMs: 128, atMs: 4288, speakerPauseMs: 0, prosody: level };
    logVerdict(pino({ level: 'info' }, sink), 's1', ev, 'finished', cues('secret words', 0.2), 0);
    expect(lines).to.deep.equal([]);
    logVerdict(pino({ level: 'debug' }, sink), 's1', ev, 'finished', cues('secret words', 0.2), 0);
    const rec = JSON.parse(lines[0]) as Record<string, unknown>;
    expect(rec).to.include({ msg: 'turn end judged', sessionId: 's1', atMs: 4288, reading: 'finished' });
    expect(rec).to.include({ last: 'other', order: 3, waitMs: 0 });
    expect(lines[0]).not.to.match(/secret|words/);
  });
});
