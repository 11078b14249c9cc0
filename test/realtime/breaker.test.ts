import { expect } from 'chai';
import { CircuitBreaker } from '../../realtime/breaker.js';

describe('realtime circuit breaker', () => {
  it('opens after N consecutive failures, reports Retry-After, half-opens after the open time, closes on success', () => {
    let now = 0;
    const changes: string[] = [];
    const b = new CircuitBreaker({ failureThreshold: 3, openMs: 1000 }, () => now);
    b.onChange((s) => changes.push(s));
    b.failure();
    b.failure();
    b.success(); // a success resets the count
    b.failure();
    b.failure();
    expect(b.state).to.equal('closed');
    b.failure();
    expect(b.state).to.equal('open');
    now = 400;
    expect(b.retryAfterMs()).to.equal(600);
    now = 1000;
    expect(b.state).to.equal('half_open');
    expect(b.retryAfterMs()).to.equal(0);
    b.failure(); // a failed probe re-opens at once
    expect(b.state).to.equal('open');
    now = 2100;
    b.success();
    expect(b.state).to.equal('closed');
    expect(changes).to.deep.equal(['open', 'open', 'closed']);
  });
});
