/**
 * `npm run cluster` passes the service settings an operator set in its
 * environment on to every instance (as a compose file's environment would),
 * and keeps the topology it sets itself.
 */
import { expect } from 'chai';
import { clusterOptionsFromEnv, operatorSettings } from '../../scripts/cluster/index.js';

describe('unit: cluster settings from the environment', () => {
  const secrets = { GATEWAY_ADMIN_TOKEN: 'a', GATEWAY_SESSION_TOKEN_SECRET: 'b', WEBHOOK_SECRET: 'c' };

  it('passes service settings on, not other variables or each instance own address and data', () => {
    const s = operatorSettings({
      ...secrets,
      OUTBOUND_ALLOW: '127.0.0.1',
      POLL_REQUESTS_PER_MINUTE: '60',
      PORT: '8090',
      HOST: '0.0.0.0',
      DATA_DIR: '/tmp/x',
      HOME: '/root',
      CLUSTER_APIS: '3',
    });
    expect(s).to.deep.equal({ ...secrets, OUTBOUND_ALLOW: '127.0.0.1', POLL_REQUESTS_PER_MINUTE: '60' });
  });

  it('takes them from the environment of npm run cluster', () => {
    const o = clusterOptionsFromEnv({ ...secrets, OUTBOUND_ALLOW: '127.0.0.1', PORT: '8090' });
    expect(o.port).to.equal(8090);
    expect(o.settings).to.include({ OUTBOUND_ALLOW: '127.0.0.1' });
  });
});
