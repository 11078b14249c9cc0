/**
 * docker/haproxy.cfg rendered for one machine: the public `bind` lines (TLS
 * and plain, chosen by HAProxy from TLS_CERT_FILE) move to the given loopback port, and in each backend the server lines become one line
 * per local instance (the first server line of the backend is the template:
 * its name and host lose their trailing number, its options are kept).
 * Everything else (checks, timeouts, retries, error pages) is the file the
 * images use.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
/** From scripts/cluster (sources) or dist/scripts/cluster (build): the repository's docker/haproxy.cfg. */
export function haproxyConfigPath(): string {
  for (const up of ['../..', '../../..']) {
    const p = path.resolve(here, up, 'docker/haproxy.cfg');
    if (fs.existsSync(p)) return p;
  }
  throw new Error('docker/haproxy.cfg not found');
}

export interface RenderTarget {
  /** Loopback address and port of the public frontend. */
  bind: string;
  /** Addresses (host:port) of each tier's instances, by the host name prefix in the source (api, realtime). */
  servers: Record<string, string[]>;
}

const SERVER_LINE = /^(\s*)server\s+(\S+?)\d*\s+([A-Za-z][\w.-]*?)\d*:\d+(\s.*)?$/;

export function renderHaproxyConfig(source: string, target: RenderTarget): string {
  const out: string[] = [];
  let templated = false;
  let binds = 0;
  for (const line of source.split('\n')) {
    if (/^\S/.test(line)) templated = false; // a new section
    const bind = /^(\s*)bind\s+\S+(.*)$/.exec(line);
    if (bind) {
      out.push(`${bind[1]}bind ${target.bind}${bind[2]}`);
      binds++;
      continue;
    }
    const server = SERVER_LINE.exec(line);
    if (!server) {
      out.push(line);
      continue;
    }
    if (templated) continue; // replaced by the lines rendered from the first one
    const [, indent, name, host, options = ''] = server;
    const addrs = target.servers[host];
    if (!addrs?.length) throw new Error(`haproxy.cfg: no local instances for "${host}"`);
    addrs.forEach((addr, i) => out.push(`${indent}server ${name}${i + 1} ${addr}${options}`));
    templated = true;
  }
  // One public frontend; with TLS and without (`.if defined(TLS_CERT_FILE)`), hence one or two lines.
  if (binds < 1 || binds > 2) throw new Error(`haproxy.cfg: expected one or two bind lines, found ${binds}`);
  return out.join('\n');
}
