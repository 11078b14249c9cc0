/** Artifact keys (interface 2.5) and the step order of a batch workflow: pure functions, no database. */
import { expect } from 'chai';
import { artifactKeys, runArtifacts } from '../../api/batch/artifacts.js';
import { chunkStep, STEP_ORDER, STEPS } from '../../api/batch/steps/order.js';

describe('unit: batch artifact keys and step order', () => {
  it('names every artifact under transcription/{request_id}/ as the interface lists them', () => {
    const keys = artifactKeys('r-1');
    expect(keys.prefix).to.equal('transcription/r-1/');
    expect(keys.chunk(7)).to.equal('transcription/r-1/chunk_7.json');
    expect(keys.result).to.equal('transcription/r-1/result.json');
    expect(keys.reviewChunk(0)).to.equal('transcription/r-1/review_chunk_0.json');
    expect(keys.reviewedResult).to.equal('transcription/r-1/reviewed_result.json');
    expect(runArtifacts(keys, [0, 1], true)).to.deep.equal([
      'transcription/r-1/chunk_0.json',
      'transcription/r-1/chunk_1.json',
      'transcription/r-1/result.json',
      'transcription/r-1/review_chunk_0.json',
      'transcription/r-1/review_chunk_1.json',
      'transcription/r-1/reviewed_result.json',
    ]);
    expect(runArtifacts(keys, [0], false)).to.deep.equal([
      'transcription/r-1/chunk_0.json',
      'transcription/r-1/result.json',
    ]);
  });

  it("tells the workflow's own artifacts from anything else under the prefix", () => {
    const keys = artifactKeys('r-1');
    for (const k of ['chunk_12.json', 'result.json', 'review_chunk_3.json', 'reviewed_result.json'])
      expect(keys.isOwn(`transcription/r-1/${k}`), k).to.equal(true);
    for (const k of ['raw_result.json', 'chunk_x.json', 'chunk_1.json.tmp', 'notes/result.json'])
      expect(keys.isOwn(`transcription/r-1/${k}`), k).to.equal(false);
    expect(keys.isOwn('transcription/r-2/result.json')).to.equal(false);
  });

  it('keeps the stored step places in run order, chunks between slice and aggregate', () => {
    const places = STEP_ORDER.map(([, seq]) => seq);
    expect(places).to.deep.equal([...places].sort((a, b) => a - b));
    expect(STEP_ORDER.map(([name]) => name)).to.deep.equal([
      'probe',
      'slice',
      'transcribe_chunk',
      'aggregate',
      'review',
      'report',
      'webhook',
    ]);
    expect(chunkStep(0)).to.deep.equal({ name: 'transcribe_chunk_0', seq: 100 });
    expect(chunkStep(899).seq).to.be.below(STEPS.aggregate.seq);
    expect(STEPS.webhook).to.deep.equal({ name: 'webhook', seq: 10_000 });
  });
});
