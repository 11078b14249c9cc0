/**
 * How every ffmpeg child of the service is started (segment uploads and batch
 * audio alike): it may read only the input it is given, through the one
 * protocol that input needs, with a demuxer from a fixed list of audio
 * containers, and it runs under a memory and CPU bound set by the kernel
 * (setrlimit through the shell's `ulimit`), so a hostile file is refused
 * instead of reading local files, taking gigabytes or minutes of CPU.
 */

/**
 * The demuxers the service means to read. Playlists and scripts (hls, dash,
 * concat, webm_dash_manifest, image2, ...) and tracker modules are not here:
 * they open other files or synthesize unbounded audio.
 */
export const FFMPEG_INPUT_FORMATS = [
  'wav',
  'w64',
  'mp3',
  'flac',
  'ogg',
  'mov',
  'matroska',
  'aac',
  'aiff',
  'caf',
  'amr',
  'asf',
  'au',
  'ac3',
  'eac3',
  'wv',
] as const;

/** Data segment (heap and private mappings) of one ffmpeg child. */
export const FFMPEG_MAX_DATA_BYTES = 256 * 1024 * 1024;
/** CPU seconds every decode may use, plus FFMPEG_CPU_SECONDS_PER_MB per MiB of input. */
export const FFMPEG_BASE_CPU_SECONDS = 2;
export const FFMPEG_CPU_SECONDS_PER_MB = 6;

/** Input options: before `-i`. `pipe` for stdin, `file` for a file on disk. */
export function ffmpegInputArgs(protocol: 'pipe' | 'file'): string[] {
  return ['-protocol_whitelist', protocol, '-format_whitelist', FFMPEG_INPUT_FORMATS.join(',')];
}

/** The CPU seconds a decode of `inputBytes` may take. */
export function ffmpegCpuSeconds(inputBytes: number): number {
  return Math.ceil(FFMPEG_BASE_CPU_SECONDS + (inputBytes / (1024 * 1024)) * FFMPEG_CPU_SECONDS_PER_MB);
}

/** The command and arguments that run ffmpeg under the data and CPU bounds (`spawn(cmd, args)`). */
export function boundedFfmpeg(
  ffmpegPath: string,
  args: string[],
  inputBytes: number,
): { command: string; args: string[] } {
  const script = `ulimit -d ${FFMPEG_MAX_DATA_BYTES / 1024} && ulimit -t ${ffmpegCpuSeconds(inputBytes)} && exec "$0" "$@"`;
  return { command: '/bin/sh', args: ['-c', script, ffmpegPath, ...args] };
}

/**
 * What went wrong, in the client's words, when ffmpeg stopped: a container
 * that is not on the list, memory or CPU past the bound. Undefined otherwise.
 */
export function ffmpegRefusal(
  stderr: string,
  signal: NodeJS.Signals | null,
  killedByUs: boolean,
): string | undefined {
  // Soft and hard CPU limits are equal, so the kernel sends SIGKILL at the bound (SIGXCPU would let
  // ffmpeg stop gracefully and exit 0 with part of the audio).
  if ((signal === 'SIGKILL' && !killedByUs) || signal === 'SIGXCPU')
    return 'The file needs more decoding work than its size allows; it was refused.';
  const format = /\[([\w,]+) @ [^\]]*\] Format not on whitelist/.exec(stderr);
  if (format)
    return `The file's container (${format[1].split(',')[0]}) is not an audio format the service reads.`;
  if (/Protocol '[^']*' not on whitelist/.test(stderr))
    return 'The file refers to other files or URLs, which the service does not read.';
  if (/Cannot allocate memory|cannot allocate|Out of memory/i.test(stderr))
    return 'The file needs more memory to decode than the service allows; it was refused.';
  return undefined;
}
