/**
 * Ports for processes that bind later (scripts/cluster/processes.ts): never
 * from the kernel's ephemeral range, where `listen(0)` in a test running
 * beside hands out the same port (a full run once had a realtime instance
 * answer on an API's port behind the load balancer), and never twice in one
 * process, even once the port is free again.
 */
import fs from 'node:fs';
import net from 'node:net';
import { expect } from 'chai';
import { freePort } from '../../scripts/cluster/processes.js';

describe('unit: ports for the cluster and the tests', () => {
  it('come from below the ephemeral range, each once, and skip ports in use', async () => {
    const [low] = fs
      .readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    const taken = await freePort();
    // Whoever holds the next one, freePort goes past it.
    const held = net.createServer();
    await new Promise<void>((r) => held.listen(taken + 1, '127.0.0.1', r));
    try {
      const ports = [];
      for (let i = 0; i < 50; i++) ports.push(await freePort());
      expect(new Set([taken, ...ports]).size).to.equal(51);
      expect(ports).to.not.include(taken + 1);
      for (const p of [taken, ...ports]) expect(p).to.be.below(low);
    } finally {
      await new Promise((r) => held.close(r));
    }
  });
});
