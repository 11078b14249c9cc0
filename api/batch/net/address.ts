/**
 * Which addresses an outbound request may connect to. Only globally routable
 * unicast addresses pass by default: loopback, private (RFC 1918, ULA),
 * link-local (which holds the cloud metadata address 169.254.169.254),
 * carrier-grade NAT, multicast, reserved and the IPv6 transition ranges that
 * can embed any of those are refused. An operator allow-list (CIDRs or host
 * names) opens specific destinations, e.g. 127.0.0.1 for local testing.
 */
import ipaddr from 'ipaddr.js';

type Addr = ipaddr.IPv4 | ipaddr.IPv6;

function normalise(ip: string): Addr | null {
  const bare = ip.startsWith('[') && ip.endsWith(']') ? ip.slice(1, -1) : ip;
  // Zone ids (fe80::1%eth0) are never public anyway.
  if (!ipaddr.isValid(bare)) return null;
  let a: Addr = ipaddr.parse(bare);
  if (a.kind() === 'ipv6' && (a as ipaddr.IPv6).isIPv4MappedAddress()) a = (a as ipaddr.IPv6).toIPv4Address();
  return a;
}

export function isIpLiteral(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return ipaddr.isValid(bare);
}

/** IPv4-compatible IPv6 (::/96, deprecated by RFC 4291): ipaddr.js calls it unicast, yet ::a9fe:a9fe embeds 169.254.169.254. */
const IPV4_COMPATIBLE = ipaddr.parseCIDR('::/96');

/** True for globally routable unicast addresses. */
export function isPublicAddress(ip: string): boolean {
  const a = normalise(ip);
  if (a === null || a.range() !== 'unicast') return false;
  return !(a.kind() === 'ipv6' && a.match(IPV4_COMPATIBLE));
}

export class AddressPolicy {
  private readonly cidrs: [Addr, number][] = [];
  private readonly hosts = new Set<string>();

  constructor(allow: string[] = []) {
    for (const entry of allow) {
      const e = entry.trim().toLowerCase();
      if (!e) continue;
      if (e.includes('/')) {
        this.cidrs.push(ipaddr.parseCIDR(e));
      } else if (isIpLiteral(e)) {
        const a = normalise(e)!;
        this.cidrs.push([a, a.kind() === 'ipv4' ? 32 : 128]);
      } else {
        this.hosts.add(e);
      }
    }
  }

  /** Host names on the allow-list may resolve anywhere. */
  hostAllowed(host: string): boolean {
    return this.hosts.has(host.toLowerCase());
  }

  /** May we connect to this address (for a request to `host`)? */
  addressAllowed(ip: string, host?: string): boolean {
    if (host && this.hostAllowed(host)) return true;
    const a = normalise(ip);
    if (!a) return false;
    if (isPublicAddress(ip)) return true;
    return this.cidrs.some(([net, bits]) => net.kind() === a.kind() && a.match(net, bits));
  }
}
