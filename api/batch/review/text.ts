/**
 * Text algorithms of the review: edit distance (bounded, so far pairs cost
 * a few rows) and a small phonetic key, over normalised words.
 */

export function levenshtein(a: string, b: string): number {
  return boundedLevenshtein(a, b, Infinity);
}

/**
 * Edit distance, or `bound + 1` as soon as it is known to exceed `bound`
 * (each row's minimum never decreases), so a far pair costs a few rows.
 */
export function boundedLevenshtein(a: string, b: string, bound: number): number {
  if (a === b) return 0;
  if (Math.abs(a.length - b.length) > bound) return bound + 1;
  if (!a.length) return b.length;
  if (!b.length) return a.length;
  let prev = new Uint32Array(b.length + 1);
  let cur = new Uint32Array(b.length + 1);
  for (let j = 0; j <= b.length; j++) prev[j] = j;
  for (let i = 1; i <= a.length; i++) {
    cur[0] = i;
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const v = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      cur[j] = v;
      if (v < rowMin) rowMin = v;
    }
    if (rowMin > bound) return bound + 1;
    [prev, cur] = [cur, prev];
  }
  return prev[b.length];
}

/** A small English phonetic key (Metaphone-like): similar-sounding spellings agree. */
export function phoneticKey(word: string): string {
  let w = word.toLowerCase().replace(/[^a-z]/g, '');
  if (!w) return '';
  w = w
    .replace(/^kn|^gn|^pn|^wr/, (m) => m[1])
    .replace(/^x/, 's')
    .replace(/ph/g, 'f')
    .replace(/ck/g, 'k')
    .replace(/sch/g, 'sk')
    .replace(/tch/g, 'ch')
    .replace(/c(?=[eiy])/g, 's')
    .replace(/dg(?=[eiy])/g, 'j')
    .replace(/gh(?![aeiou])/g, '')
    .replace(/q/g, 'k')
    .replace(/c/g, 'k')
    .replace(/x/g, 'ks')
    .replace(/z/g, 's')
    .replace(/v/g, 'f')
    .replace(/th/g, '0')
    .replace(/wh/g, 'w')
    .replace(/d/g, 't')
    .replace(/b/g, 'p')
    .replace(/g/g, 'k');
  const first = w[0];
  const rest = w.slice(1).replace(/[aeiouyhw]/g, '');
  let key = /[aeiouy]/.test(first) ? 'A' : first;
  for (const ch of rest) if (key[key.length - 1] !== ch) key += ch;
  return key;
}

export function norm(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9']/g, '');
}
