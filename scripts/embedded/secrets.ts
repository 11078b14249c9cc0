/**
 * Secrets of the embedded start: created on first start with a CSPRNG and
 * kept under DATA_DIR (mode 0600) so they survive restarts.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export interface EmbeddedSecrets {
  adminToken: string;
  sessionTokenSecret: string;
  postgresPassword: string;
  /** Set once a start has shown the admin token (a first start that failed shows it next time). */
  announced?: boolean;
}

export function loadOrCreateSecrets(dataDir: string): { secrets: EmbeddedSecrets; created: boolean } {
  const file = path.join(dataDir, 'secrets.json');
  fs.mkdirSync(dataDir, { recursive: true });
  if (fs.existsSync(file)) {
    return { secrets: JSON.parse(fs.readFileSync(file, 'utf8')) as EmbeddedSecrets, created: false };
  }
  const secrets: EmbeddedSecrets = {
    adminToken: 'adm_' + randomBytes(24).toString('base64url'),
    sessionTokenSecret: randomBytes(32).toString('base64url'),
    postgresPassword: randomBytes(18).toString('base64url'),
  };
  fs.writeFileSync(file, JSON.stringify(secrets, null, 2) + '\n', { mode: 0o600 });
  return { secrets, created: true };
}

/** Records that the admin token has been shown; later starts only say where it is kept. */
export function markAnnounced(dataDir: string, secrets: EmbeddedSecrets): void {
  const file = path.join(dataDir, 'secrets.json');
  fs.writeFileSync(file, JSON.stringify({ ...secrets, announced: true }, null, 2) + '\n', { mode: 0o600 });
}
