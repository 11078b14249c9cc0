import os from 'node:os';
import { type Env, str, int, num, bool, list, ConfigError } from './env.js';

/** One member of the remote OpenAI-compatible worker pool. */
/** Session feature normalisation of the built-in engine's streaming form (shared/stt/pocketsphinx/cmn.ts). */
export interface CmnSettings {
  /** Frames (10 ms) of the session's own audio that set the first estimate. */
  bootstrapFrames: number;
  /** Weight of the model's prior while fewer frames have been seen. */
  priorFrames: number;
  /** Frames the running mean remembers (older frames decay). */
  window: number;
  /**
   * During the bootstrap, a frame waits at most this many frames for a
   * better estimate, then is searched with a provisional one (the session's
   * frames so far, with the prior); at least `bootstrapFrames`: frames wait
   * for the whole bootstrap.
   */
  lookaheadFrames?: number;
  /**
   * The provisional estimate is kept while the session's estimate stays
   * within this distance of it (Euclidean, over the cepstral coefficients);
   * beyond, the utterance is searched again from its start with the newer
   * estimate, at the latest when the bootstrap or the utterance ends.
   */
  researchDistance?: number;
  /** Before the bootstrap ends, a new search from the start waits until the utterance has grown this many times since the last. */
  researchGrowth?: number;
  /**
   * When the bootstrap ends, or the utterance ends during it, the utterance
   * is searched again from its start only if the estimate moved more than
   * this since its last search from the start (`Infinity`: never; measured
   * in docs/decisions/speech.md).
   */
  settleDistance?: number;
}

/** Measured in docs/decisions.md ("The first utterance is searched while it is spoken"). */
export const DEFAULT_CMN: Required<CmnSettings> = {
  bootstrapFrames: 300,
  priorFrames: 10,
  window: 3000,
  lookaheadFrames: 50,
  researchDistance: 8,
  researchGrowth: 2,
  settleDistance: Infinity,
};

export interface RemoteWorkerConfig {
  /** Stable id used in X-Worker-Id and for pinning (`worker_id`). */
  id: string;
  /** Base URL; requests go to `${url}/v1/audio/transcriptions` and `${url}/health`. */
  url: string;
}

/** Speech engine settings (built-in PocketSphinx engine, remote worker pool, audio decoding). */
export interface SpeechConfig {
  /** `builtin` runs PocketSphinx in worker threads; `remote` calls STT_WORKER_URLS. */
  engine: 'builtin' | 'remote';
  builtin: {
    /** Decoder threads (one PocketSphinx decoder each). */
    threads: number;
    /**
     * The clip threads start with the first clip request instead of at once (the realtime tier, where
     * the clip form is only a fallback: about 110 MiB per thread not held until one is needed).
     */
    clipOnDemand?: boolean;
    /** Acoustic model directory, language model, pronunciation dictionary. */
    hmm: string;
    lm: string;
    dict: string;
    /** Shared-library names or paths passed to dlopen. */
    pocketsphinxLibrary: string;
    sphinxbaseLibrary: string;
    /** More decoder arguments (`-name value` pairs); default skips the flat-lexicon second pass. */
    extraArgs: string[];
    /** Longest wait for a free decoder. */
    queueTimeoutMs: number;
    /** Decode time limit = timeoutBaseMs + timeoutPerAudioSecondMs x clip seconds. */
    timeoutBaseMs: number;
    timeoutPerAudioSecondMs: number;
    /** Requests waiting for a free decoder beyond this are refused (503 engine_overloaded). */
    maxQueue: number;
    /** Streaming form (realtime tier): incremental decoding while an utterance is spoken. */
    streaming: boolean;
    /** Threads of the streaming form, and its decoders in all (the memory bound; none free = clip form). */
    streamThreads: number;
    streamDecoders: number;
    /** Session feature normalisation of the streaming form (shared/stt/pocketsphinx/cmn.ts). */
    streamCmn: CmnSettings;
    /** Decoder arguments of the streaming form, after `extraArgs` (bounds on the search per frame). */
    streamExtraArgs: string[];
  };
  remote: {
    workers: RemoteWorkerConfig[];
    /** Sent as `Authorization: Bearer` to every worker (hosted APIs need one). */
    apiKey: string | undefined;
    /** Model name sent to workers when the request names none. */
    model: string;
    /** Interface section 8: 800 ms per attempt, 2 attempts (primary then one fallback), about 1.6 s in all. */
    attemptTimeoutMs: number;
    maxAttempts: number;
    budgetMs: number;
    healthIntervalMs: number;
    healthTimeoutMs: number;
    /** When a request pins a worker (`worker_id`), may another worker answer if it fails? */
    pinnedFallback: boolean;
  };
  /** Every ffmpeg decode of the service (segment uploads, batch downloads): shared/audio. */
  audio: {
    ffmpegPath: string;
    /** ffmpeg is stopped after this long without progress (a stall watchdog, not a budget). */
    decodeTimeoutMs: number;
  };
  segment: {
    /** Largest accepted upload (413 file_too_large above). */
    maxUploadBytes: number;
    /** Model identifier reported when the client names none. */
    defaultModel: string;
    /**
     * The share of this process's clip slots one key may hold (0–1, at
     * least one slot): the rest stay free for other keys (shared/fairShare.ts).
     */
    keyShare: number;
  };
  /** The standalone worker process (engine/server.ts). */
  engineServer: {
    host: string;
    port: number;
    /** When set, the worker requires `Authorization: Bearer <key>`. */
    apiKey: string | undefined;
    /** Longest clip it accepts (400 `audio_too_long` past it); decoding stops there. */
    maxAudioSeconds: number;
  };
}

function parseWorkers(entries: string[]): RemoteWorkerConfig[] {
  const seen = new Set<string>();
  return entries.map((entry) => {
    // `id=url` names a worker; a bare URL is named by its host:port.
    const eq = entry.indexOf('=');
    const hasId = eq > 0 && !entry.slice(0, eq).includes('/');
    const rawUrl = hasId ? entry.slice(eq + 1) : entry;
    let url: URL;
    try {
      url = new URL(rawUrl);
    } catch {
      throw new ConfigError(`STT_WORKER_URLS: "${rawUrl}" is not a URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new ConfigError(`STT_WORKER_URLS: "${rawUrl}" must be http(s)`);
    }
    const id = hasId ? entry.slice(0, eq) : url.host;
    if (seen.has(id)) throw new ConfigError(`STT_WORKER_URLS: duplicate worker id "${id}"`);
    seen.add(id);
    return { id, url: url.toString().replace(/\/+$/, '') };
  });
}

export const POCKETSPHINX_MODEL_DIR = '/usr/share/pocketsphinx/model/en-us';

// Internal tuning of the speech engines (not environment variables; docs/decisions.md, "Configuration surface").
/** Shared libraries of the built-in engine (the Debian/Ubuntu packages scripts/setup.sh installs). */
export const POCKETSPHINX_LIBRARY = 'libpocketsphinx.so.3';
export const SPHINXBASE_LIBRARY = 'libsphinxbase.so.3';
/** More decoder arguments: skip the flat-lexicon second pass. */
export const POCKETSPHINX_ARGS = ['-fwdflat', 'no'];
/** Decoder arguments of the streaming form, after POCKETSPHINX_ARGS (bounds on the search per frame). */
export const STREAM_DECODER_ARGS = ['-maxhmmpf', '6000'];
/**
 * Words of the language model the built-in engine searches: its most frequent ones (by unigram
 * probability; en-us.lm.bin has 72,545 with a pronunciation, the 12,545 past 60,000 carry 0.019 % of
 * its probability). The others are pronounced and added when a prompt or vocabulary names them
 * (bias/lexicon.ts; docs/decisions/prompts.md, "The lexicon").
 */
export const SEARCH_VOCABULARY_WORDS = 60_000;
/**
 * Of the words searched, the most frequent ones keep the dictionary's alternate pronunciations
 * (`the(2)`, `either(2)`); the others are searched with their first one, and their alternates are
 * looked up like words past the cut (a decoder's search tree and dictionary grow with every
 * pronunciation; docs/decisions/prompts.md, "The lexicon").
 */
export const ALTERNATES_WORDS = 10_000;
/** Longest wait of a built-in request for a free decoder. */
export const BUILTIN_QUEUE_TIMEOUT_MS = 60_000;
/** Remote pool: how often and how patiently each worker's /health is checked. */
export const WORKER_HEALTH_INTERVAL_MS = 2000;
export const WORKER_HEALTH_TIMEOUT_MS = 500;
/** ffmpeg is stopped after this long without progress (segment uploads and batch downloads alike). */
export const AUDIO_DECODE_TIMEOUT_MS = 30_000;
/** Model identifier reported when the client names none and the built-in engine answers. */
export const BUILTIN_MODEL_ID = 'pocketsphinx-en-us';

export function speechConfig(env: Env): SpeechConfig {
  const workers = parseWorkers(list(env, 'STT_WORKER_URLS'));
  const engine = str(env, 'STT_ENGINE', workers.length > 0 ? 'remote' : 'builtin');
  if (engine !== 'builtin' && engine !== 'remote')
    throw new ConfigError(`STT_ENGINE must be builtin or remote, got "${engine}"`);
  if (engine === 'remote' && workers.length === 0)
    throw new ConfigError('STT_ENGINE=remote needs STT_WORKER_URLS');
  const modelDir = str(env, 'POCKETSPHINX_MODEL_DIR', POCKETSPHINX_MODEL_DIR);
  const attemptTimeoutMs = int(env, 'STT_ATTEMPT_TIMEOUT_MS', 800, 1);
  const maxAttempts = int(env, 'STT_MAX_ATTEMPTS', 2, 1);
  return {
    engine,
    builtin: {
      threads: int(env, 'STT_THREADS', Math.max(1, os.availableParallelism()), 1),
      hmm: `${modelDir}/en-us`,
      lm: `${modelDir}/en-us.lm.bin`,
      dict: `${modelDir}/cmudict-en-us.dict`,
      pocketsphinxLibrary: POCKETSPHINX_LIBRARY,
      sphinxbaseLibrary: SPHINXBASE_LIBRARY,
      extraArgs: [...POCKETSPHINX_ARGS],
      queueTimeoutMs: BUILTIN_QUEUE_TIMEOUT_MS,
      timeoutBaseMs: int(env, 'STT_BUILTIN_TIMEOUT_BASE_MS', 10_000, 1),
      timeoutPerAudioSecondMs: int(env, 'STT_BUILTIN_TIMEOUT_PER_AUDIO_SECOND_MS', 1000, 0),
      maxQueue: int(env, 'STT_BUILTIN_MAX_QUEUE', 64, 0),
      streaming: bool(env, 'STT_STREAMING', true),
      streamThreads: int(env, 'STT_STREAM_THREADS', Math.max(1, os.availableParallelism()), 1),
      streamDecoders: int(env, 'STT_STREAM_DECODERS', 16, 1),
      streamExtraArgs: [...STREAM_DECODER_ARGS],
      streamCmn: { ...DEFAULT_CMN },
    },
    remote: {
      workers,
      apiKey: str(env, 'STT_WORKER_API_KEY'),
      model: str(env, 'STT_WORKER_MODEL', 'whisper-1'),
      attemptTimeoutMs,
      maxAttempts,
      budgetMs: int(env, 'STT_BUDGET_MS', attemptTimeoutMs * maxAttempts, 1),
      healthIntervalMs: WORKER_HEALTH_INTERVAL_MS,
      healthTimeoutMs: WORKER_HEALTH_TIMEOUT_MS,
      pinnedFallback: bool(env, 'STT_PINNED_FALLBACK', false),
    },
    audio: {
      ffmpegPath: str(env, 'FFMPEG_PATH', 'ffmpeg'),
      decodeTimeoutMs: AUDIO_DECODE_TIMEOUT_MS,
    },
    segment: {
      maxUploadBytes: Math.round(num(env, 'SEGMENT_MAX_UPLOAD_MB', 25, 0.001) * 1024 * 1024),
      defaultModel: BUILTIN_MODEL_ID,
      keyShare: Math.min(1, num(env, 'SEGMENT_KEY_SHARE', 0.5, 0)),
    },
    engineServer: {
      host: str(env, 'ENGINE_HOST', '127.0.0.1'),
      port: int(env, 'ENGINE_PORT', 9000, 0),
      apiKey: str(env, 'ENGINE_API_KEY'),
      maxAudioSeconds: num(env, 'ENGINE_MAX_AUDIO_SECONDS', 3600, 1),
    },
  };
}

/** Defaults of the `npm run transcribe` command-line client (flags override them). */
export interface TranscribeCliConfig {
  baseUrl: string;
  apiKey: string | undefined;
}

export function transcribeCliConfig(env: Env = process.env): TranscribeCliConfig {
  return {
    baseUrl: str(env, 'STT_BASE_URL', 'http://127.0.0.1:8080'),
    apiKey: str(env, 'STT_API_KEY'),
  };
}
