/** A failure that retrying cannot fix (bad URL, refused address, audio too long, undecodable). */
export class PermanentError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

/** The run lost its lease (another process resumed the workflow); stop quietly. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
}

/** The process is stopping; the run gives its lease back and another process resumes it. */
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
