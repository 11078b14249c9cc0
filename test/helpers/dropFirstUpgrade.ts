/**
 * A TCP proxy in front of a service that passes the first WebSocket
 * connection's upgrade answer (the 101) and then drops the connection, as
 * uWebSockets.js 20.57's cork bug does (docs/decisions/realtime.md,
 * "session.created after the upgrade call"); every other connection, plain
 * HTTP included, passes untouched.
 */
import net from 'node:net';

export interface DroppingProxy {
  url: string;
  /** WebSocket upgrades seen so far. */
  upgrades(): number;
  close(): Promise<void>;
}

export async function dropFirstUpgrade(target: string): Promise<DroppingProxy> {
  const to = new URL(target);
  let upgrades = 0;
  const proxy = net.createServer((client) => {
    const server = net.connect(Number(to.port), to.hostname);
    let drop = false;
    let head = Buffer.alloc(0);
    client.once('data', (d: Buffer) => {
      if (/^upgrade:\s*websocket/im.test(d.toString('latin1'))) drop = upgrades++ === 0;
      server.write(d);
      client.pipe(server);
    });
    server.on('data', (d: Buffer) => {
      if (!drop) return void client.write(d);
      head = Buffer.concat([head, d]);
      const end = head.indexOf('\r\n\r\n');
      if (end >= 0) client.write(head.subarray(0, end + 4), () => (client.destroy(), server.destroy()));
    });
    client.on('error', () => server.destroy());
    server.on('error', () => client.destroy());
    client.on('close', () => server.destroy());
    server.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`,
    upgrades: () => upgrades,
    close: () => new Promise((r) => proxy.close(() => r())),
  };
}
