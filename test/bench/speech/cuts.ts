/**
 * The speech benchmarks' view of the realtime cuts: the realtime segmenter
 * (silero VAD, default settings) over a clip as the realtime tests stream it
 * (300 ms silence + clip + 900 ms silence), the decoder options of the
 * built-in engine, and a streamed decode fed in 20 ms pieces.
 */
import type { Config } from '../../../shared/config/index.js';
import { loadConfig } from '../../../shared/config/index.js';
import { DEFAULT_CMN, type CmnEstimate, type CmnSettings } from '../../../shared/stt/pocketsphinx/cmn.js';
import { Decoder, type DecoderOptions } from '../../../shared/stt/pocketsphinx/decoder.js';
import { Segmenter } from '../../../realtime/vad/segmenter.js';
import { loadVad } from '../../../realtime/vad/factory.js';
import type { Vad } from '../../../realtime/vad/vad.js';
import { pushThrough } from '../../../realtime/vad/rounds.js';

export const silence = (ms: number) => Buffer.alloc(Math.round(ms * 32));
export const i16 = (buf: Buffer) =>
  new Int16Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
export const text = (ws: { word: string }[]) => ws.map((w) => w.word).join(' ');
/** 20 ms of samples, the realtime tests' frame. */
export const CHUNK = 320;

/** The clip as the realtime tests and benchmarks stream it. */
export const streamOf = (pcm: Buffer) => Buffer.concat([silence(300), pcm, silence(900)]);

/** The built-in engine's decoder options: the clip form's, or with `streaming` the streaming form's arguments. */
export function decoderOptions(config: Config, streaming = false): DecoderOptions {
  const b = config.speech.builtin;
  return {
    hmm: b.hmm,
    lm: b.lm,
    dict: b.dict,
    pocketsphinxLibrary: b.pocketsphinxLibrary,
    sphinxbaseLibrary: b.sphinxbaseLibrary,
    extraArgs: streaming ? [...b.extraArgs, ...b.streamExtraArgs] : b.extraArgs,
  };
}

export function withDecoder<T>(o: DecoderOptions, fn: (d: Decoder) => T): T {
  const d = new Decoder(o);
  try {
    return fn(d);
  } finally {
    d.close();
  }
}

/** Feeds `pcm` in 20 ms pieces, then ends the utterance. */
export function streamed(dec: Decoder, pcm: Buffer, cmn?: CmnEstimate): string {
  dec.begin(cmn);
  const x = i16(pcm);
  for (let i = 0; i < x.length; i += CHUNK) dec.feed(x.subarray(i, i + CHUNK));
  return text(dec.end());
}

/** Cuts a stream the way the realtime tier does. */
export class RealtimeCutter {
  private constructor(
    private readonly config: Config,
    private readonly pool: Vad,
  ) {}

  static async create(config: Config): Promise<RealtimeCutter> {
    return new RealtimeCutter(
      config,
      await loadVad({ modelPath: config.realtime.vad.modelPath, warm: 1, max: 4 }),
    );
  }

  /** [start, end) byte ranges of the realtime segmenter's utterances in `stream`. */
  async cuts(stream: Buffer): Promise<[number, number][]> {
    const v = this.config.realtime.vad;
    const seg = new Segmenter({ ...this.config.realtime.vadDefaults }, this.pool, {
      gateDbfs: v.gateDbfs,
      releaseAfterMs: v.releaseAfterMs,
      holdDb: v.holdDb,
      maxSkip: v.maxSkip,
    });
    const evs = [...(await pushThrough(seg, this.pool, stream)), ...seg.flush()];
    seg.close();
    const out: [number, number][] = [];
    for (const e of evs)
      if (e.type === 'stop') out.push([e.audioStartMs * 32, e.audioStartMs * 32 + e.pcm.length]);
    return out;
  }
}

/** `--name=a:b:c,...` as settings objects (numbers; `inf` for Infinity), or `dflt`. */
export function settingsArg<K extends string>(
  name: string,
  keys: readonly K[],
  dflt: Record<K, number>,
): Record<K, number>[] {
  const raw = process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  if (!raw) return [dflt];
  return raw.split(',').map((v) => {
    const xs = v.split(':').map((x) => (x === 'inf' ? Infinity : Number(x)));
    return Object.fromEntries(keys.map((k, i) => [k, xs[i] ?? dflt[k]])) as Record<K, number>;
  });
}

/** `--cmn=B:P:W:D:T:G:E,...`: session normalisation settings to try (cmn.ts order); default `dflt`. */
export function cmnVariants(dflt: Required<CmnSettings>): Required<CmnSettings>[] {
  return settingsArg(
    'cmn',
    [
      'bootstrapFrames',
      'priorFrames',
      'window',
      'lookaheadFrames',
      'researchDistance',
      'researchGrowth',
      'settleDistance',
    ] as const,
    dflt,
  );
}

/** What the decoder benchmarks (tail.ts, bootstrap.ts) start from: the streaming form's options, the realtime cutter, the `--cmn` variants. */
export async function streamingBench(): Promise<{
  config: Config;
  opts: DecoderOptions;
  cutter: RealtimeCutter;
  variants: Required<CmnSettings>[];
}> {
  const config = loadConfig({});
  return {
    config,
    opts: decoderOptions(config, true),
    cutter: await RealtimeCutter.create(config),
    variants: cmnVariants(DEFAULT_CMN),
  };
}
