/**
 * A local certificate authority for the embedded start (issue 39): clients
 * that dial only wss:// (the official OpenAI SDK's realtime client) reach
 * `npm start` over HTTPS with a certificate they can trust by
 * NODE_EXTRA_CA_CERTS. Made once with openssl under DATA_DIR/tls and kept:
 * `ca.pem` (the CA, valid 10 years), `server.pem` and `server.key` (for
 * localhost, 127.0.0.1 and ::1, signed by it). Keys are 0600.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export interface LocalTls {
  caFile: string;
  cert: Buffer;
  key: Buffer;
}

export function ensureLocalTls(dataDir: string): LocalTls {
  const dir = path.resolve(dataDir, 'tls');
  const caFile = path.join(dir, 'ca.pem');
  const certFile = path.join(dir, 'server.pem');
  const keyFile = path.join(dir, 'server.key');
  if (!fs.existsSync(certFile) || !fs.existsSync(keyFile) || !fs.existsSync(caFile)) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const caKey = path.join(dir, 'ca.key');
    const csr = path.join(dir, 'server.csr');
    const ext = path.join(dir, 'server.ext');
    const openssl = (args: string[]) =>
      execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    openssl([
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-sha256',
      '-days',
      '3650',
      '-keyout',
      caKey,
      '-out',
      caFile,
      '-subj',
      '/CN=stt-service local CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    openssl([
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-sha256',
      '-keyout',
      keyFile,
      '-out',
      csr,
      '-subj',
      '/CN=localhost',
    ]);
    fs.writeFileSync(
      ext,
      'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\n' +
        'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n',
    );
    openssl([
      'x509',
      '-req',
      '-sha256',
      '-days',
      '825',
      '-in',
      csr,
      '-CA',
      caFile,
      '-CAkey',
      caKey,
      '-CAcreateserial',
      '-out',
      certFile,
      '-extfile',
      ext,
    ]);
    for (const f of [caKey, keyFile]) fs.chmodSync(f, 0o600);
    for (const f of [csr, ext, path.join(dir, 'ca.srl')]) fs.rmSync(f, { force: true });
  }
  return { caFile, cert: fs.readFileSync(certFile), key: fs.readFileSync(keyFile) };
}
