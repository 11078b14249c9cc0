/**
 * Lets uWebSockets.js 20.57's Linux addon load on glibc older than 2.38
 * (Debian 12 has 2.36). The addon was linked against glibc 2.38 and asks for
 * three of its C23 entry points, `__isoc23_strtol`, `__isoc23_strtoul` and
 * `__isoc23_sscanf`, which differ from the C99 ones only in also reading a
 * `0b` binary prefix. Everything else it asks for is in glibc 2.36.
 *
 * On such a machine, a copy of the addon is written to the temporary folder
 * with those three symbols bound to `strtol`, `strtoul` and `__isoc99_sscanf`
 * (their names in the dynamic string table point at the C99 names, and their
 * version becomes the default one) and its need for GLIBC_2.38 marked weak,
 * so the dynamic linker no longer refuses it. The package's file is never
 * changed; on glibc 2.38 or newer none of this runs.
 * docs/decisions/realtime.md, "uWebSockets.js on Node 24".
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const SHT_DYNSYM = 11;
const SHT_GNU_VERNEED = 0x6ffffffe;
const SHT_GNU_VERSYM = 0x6fffffff;
const VER_NDX_GLOBAL = 1;
const VER_FLG_WEAK = 0x2;
const MISSING_VERSION = 'GLIBC_2.38';
/** What each C23 name becomes: a suffix of it, or its C99 twin of the same length. */
const REBIND: Record<string, { suffix?: number; rename?: string }> = {
  __isoc23_strtol: { suffix: '__isoc23_'.length },
  __isoc23_strtoul: { suffix: '__isoc23_'.length },
  __isoc23_sscanf: { rename: '__isoc99_sscanf' },
};

/** glibc's version as [major, minor], or undefined off glibc (musl, macOS, Windows). */
export function glibcVersion(): [number, number] | undefined {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)
    ?.header;
  const m = /^(\d+)\.(\d+)/.exec(header?.glibcVersionRuntime ?? '');
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

export function needsGlibcShim(version = glibcVersion()): boolean {
  return version !== undefined && (version[0] < 2 || (version[0] === 2 && version[1] < 38));
}

function cString(buf: Buffer, at: number): string {
  return buf.toString('latin1', at, buf.indexOf(0, at));
}

/**
 * The addon with its C23 references rebound as above, or undefined when it
 * asks for none of them (nothing to do). Throws on an ELF file it cannot read.
 */
export function rebindC23(elf: Buffer): Buffer | undefined {
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) {
    throw new Error('not a 64-bit little-endian ELF file');
  }
  const out = Buffer.from(elf);
  const shoff = Number(out.readBigUInt64LE(0x28));
  const shentsize = out.readUInt16LE(0x3a);
  const shnum = out.readUInt16LE(0x3c);
  const sections = Array.from({ length: shnum }, (_, i) => {
    const at = shoff + i * shentsize;
    return {
      type: out.readUInt32LE(at + 4),
      offset: Number(out.readBigUInt64LE(at + 0x18)),
      size: Number(out.readBigUInt64LE(at + 0x20)),
      link: out.readUInt32LE(at + 0x28),
      entsize: Number(out.readBigUInt64LE(at + 0x38)),
    };
  });
  const dynsym = sections.find((s) => s.type === SHT_DYNSYM);
  const versym = sections.find((s) => s.type === SHT_GNU_VERSYM);
  const verneed = sections.find((s) => s.type === SHT_GNU_VERNEED);
  if (!dynsym || !versym || !verneed) return undefined;
  const dynstr = sections[dynsym.link].offset;

  let changed = 0;
  for (let i = 0; i < dynsym.size / dynsym.entsize; i++) {
    const at = dynsym.offset + i * dynsym.entsize;
    const nameAt = dynstr + out.readUInt32LE(at);
    const how = REBIND[cString(out, nameAt)];
    if (!how) continue;
    if (how.suffix !== undefined) out.writeUInt32LE(out.readUInt32LE(at) + how.suffix, at);
    else out.write(how.rename!, nameAt, 'latin1');
    out.writeUInt16LE(VER_NDX_GLOBAL, versym.offset + i * 2);
    changed++;
  }
  if (changed === 0) return undefined;

  // Elf64_Verneed { vn_version u16, vn_cnt u16, vn_file u32, vn_aux u32, vn_next u32 }
  // Elf64_Vernaux { vna_hash u32, vna_flags u16, vna_other u16, vna_name u32, vna_next u32 }
  const verstr = sections[verneed.link].offset;
  for (let need = verneed.offset; ;) {
    const cnt = out.readUInt16LE(need + 2);
    for (let k = 0, aux = need + out.readUInt32LE(need + 8); k < cnt; k++) {
      if (cString(out, verstr + out.readUInt32LE(aux + 8)) === MISSING_VERSION) {
        out.writeUInt16LE(out.readUInt16LE(aux + 4) | VER_FLG_WEAK, aux + 4);
      }
      const next = out.readUInt32LE(aux + 12);
      if (next === 0) break;
      aux += next;
    }
    const next = out.readUInt32LE(need + 12);
    if (next === 0) break;
    need += next;
  }
  return out;
}

/**
 * A folder of the temporary one that only this user can write: nobody else plants the copy. A real
 * folder, not a link: another user could point a link of theirs at one of ours while it is checked and
 * at one of theirs when the copy is loaded (found in a hostile pass; the sticky temporary folder keeps
 * others from moving a folder we own).
 */
export function privateDir(base = os.tmpdir()): string {
  const dir = path.join(base, `stt-uws-${process.getuid?.() ?? 'user'}`);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = fs.lstatSync(dir);
  if (!st.isDirectory()) throw new Error(`${dir} is not a folder: refusing to load uWebSockets.js from it`);
  if ((process.getuid && st.uid !== process.getuid()) || (st.mode & 0o022) !== 0) {
    throw new Error(`${dir} is writable by other users: refusing to load uWebSockets.js from it`);
  }
  return dir;
}

/**
 * The file to load for `addon`: the addon itself where glibc is new enough or
 * it needs nothing rebound, else its rebound copy in `dir` (written once,
 * named by the original's content hash).
 */
export function loadablePath(addon: string, dir = privateDir()): string {
  if (!needsGlibcShim()) return addon;
  const elf = fs.readFileSync(addon);
  const hash = createHash('sha256').update(elf).digest('hex').slice(0, 16);
  const copy = path.join(dir, `stt-uws-${hash}-glibc236.node`);
  if (fs.existsSync(copy)) return copy;
  const rebound = rebindC23(elf);
  if (!rebound) return addon;
  const tmp = `${copy}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, rebound, { mode: 0o555 });
  fs.renameSync(tmp, copy);
  return copy;
}
