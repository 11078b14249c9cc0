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
  writeAtomically(file, secrets);
  return { secrets, created: true };
}

/** Records that the admin token has been shown; later starts only say where it is kept. */
export function markAnnounced(dataDir: string, secrets: EmbeddedSecrets): void {
  const file = path.join(dataDir, 'secrets.json');
  writeAtomically(file, { ...secrets, announced: true });
}

/**
 * Replaces the file whole (a temporary file renamed over it): a reader never
 * sees it empty or half written, and a crash mid-write leaves the old secrets,
 * without which the embedded database could not be opened again.
 */
function writeAtomically(file: string, secrets: EmbeddedSecrets): void {
  const tmp = `${file}.${process.pid}.tmp`;
  const fd = fs.openSync(tmp, 'w', 0o600);
  try {
    fs.writeFileSync(fd, JSON.stringify(secrets, null, 2) + '\n');
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
}
