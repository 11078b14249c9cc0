/** A failure that retrying cannot fix (bad URL, refused address, audio too long, undecodable). */
export class PermanentError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

/**
 * The run lost its pg-boss job (pg-boss found its heartbeat stale and
 * retried the job elsewhere, or the workflow was terminated): stop quietly.
 */
export class RunLostError extends Error {
  override name = 'RunLostError';
}

/** The process is stopping; the run gives its workflow back and another process resumes it. */
export class ShutdownError extends Error {
  override name = 'ShutdownError';
}

/**
 * A failure's message as the job's owner sees it (poll `error`, step rows,
 * webhooks): absolute server paths (`/tmp/…/input`, `file:///…`) become
 * `<file>`. URLs keep their paths (the slash follows a host, not a space).
 */
export function withoutPaths(message: string): string {
  return message.replace(/file:\/\/\/[^\s'"`]*|(?<![\w:/.~-])\/(?:[^\s/'"`:,;()<>]+\/?)+/g, '<file>');
}
