/** Helpers of the /v1/realtime tests: a clip at another rate (ffmpeg), a certificate (openssl), TLS in front of a port. */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { AUDIO_DIR } from './helpers.js';

/** A clip as mono PCM16LE at `rate`, by ffmpeg (a real conversion, not ours). */
export function pcmAt(file: string, rate: number): Buffer {
  return execFileSync('ffmpeg', [
    '-loglevel',
    'error',
    '-i',
    path.join(AUDIO_DIR, file),
    '-ac',
    '1',
    '-ar',
    String(rate),
    '-f',
    's16le',
    '-',
  ]);
}

/** A self-signed certificate for 127.0.0.1 and localhost (openssl). */
export function selfSigned(dir: string): { key: string; cert: string } {
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=IP:127.0.0.1,DNS:localhost',
      '-keyout',
      key,
      '-out',
      cert,
    ],
    { stdio: 'ignore' },
  );
  return { key: fs.readFileSync(key, 'utf8'), cert: fs.readFileSync(cert, 'utf8') };
}

/** TLS in front of a TCP port: bytes pass through untouched once decrypted. */
export async function tlsFront(
  port: number,
  creds: { key: string; cert: string },
): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = tls.createServer(creds, (client) => {
    const up = net.connect(port, '127.0.0.1');
    sockets.add(client).add(up);
    client.pipe(up).pipe(client);
    const done = () => {
      client.destroy();
      up.destroy();
    };
    client.on('error', done).on('close', done);
    up.on('error', done).on('close', done);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
