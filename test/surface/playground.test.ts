/**
 * The playground at `/` in a real browser: Debian's Chromium driven by
 * playwright-core against the whole service (npm start's code path). A test
 * clip is spoken into Chromium's fake microphone, dropped on the page, and
 * fetched by a batch job; each must produce its words on the page. Keeps a
 * screenshot of each in docs/ (docs/playground-*.png; `UPDATE_SCREENSHOTS=1` refreshes them, otherwise they go to test/.tmp).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { issueServiceKey, REPO_ROOT, startService, type RunningService } from '../helpers/service.js';
import { startFileServer, type FileServer } from '../batch/helpers.js';
import { wer } from '../speech/helpers.js';

export const CHROMIUM = '/usr/bin/chromium';
const SAMPLE = path.join(REPO_ROOT, 'samples/jfk.wav');
const JFK =
  'and so my fellow americans ask not what your country can do for you ask what you can do for your country';
/** The microphone's clip: one that the realtime plane's utterance splitting leaves intact (jfk's pauses split it badly). */
const MIC_CLIP = path.resolve(REPO_ROOT, 'test/audio/librispeech-1089-134686-0001.wav');
const MIC_REF =
  'after early nightfall the yellow lamps would light up here and there the squalid quarter of the brothels';

/** Chromium with a fake microphone that plays `wav` (looped); `fakeUi` grants the permission prompt. */
export function launchChromium(wav: string, fakeUi = true): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      ...(fakeUi ? ['--use-fake-ui-for-media-stream'] : []),
      '--use-fake-device-for-media-stream',
      `--use-file-for-fake-audio-capture=${wav}`,
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/** Waits for `selector`; on a timeout the error says what the page showed in `explain`. */
async function waitOn(page: Page, selector: string, explain: string, timeout = 120_000): Promise<void> {
  try {
    await page.locator(selector).waitFor({ timeout });
  } catch (err) {
    const shown = await page
      .locator(explain)
      .innerText()
      .catch(() => '?');
    throw new Error(`${(err as Error).message}\npage showed: ${shown}`);
  }
}

/** Screenshots go to test/.tmp; `UPDATE_SCREENSHOTS=1 npm test` refreshes the ones kept in docs/. */
function screenshot(page: Page, name: string) {
  const dir = process.env.UPDATE_SCREENSHOTS === '1' ? 'docs' : 'test/.tmp';
  fs.mkdirSync(path.join(REPO_ROOT, dir), { recursive: true });
  return page.screenshot({ path: path.join(REPO_ROOT, dir, `playground-${name}.png`), fullPage: true });
}

/** Share of the reference's distinct words that appear in `text`. */
function overlap(reference: string, text: string): number {
  const seen = new Set(
    text
      .toLowerCase()
      .replace(/[^a-z' ]+/g, ' ')
      .split(/\s+/),
  );
  const words = new Set(reference.split(' '));
  return [...words].filter((w) => seen.has(w)).length / words.size;
}

describe('playground in a real browser (Chromium, fake microphone)', function () {
  this.timeout(300_000);
  let db: TestDatabase;
  let svc: RunningService;
  let files: FileServer;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let tmp: string;
  const offOrigin: string[] = [];
  const pageErrors: string[] = [];
  /** What the browser itself fetched for the page (not its API calls) and did not get. */
  const missing: string[] = [];

  async function openWithKey(p: Page, key: string) {
    await p.goto(`${svc.baseUrl}/`);
    await p.fill('#key', key);
    await p.click('#key-form button');
    await p.locator('#key-status.ok').waitFor({ timeout: 30_000 });
  }

  before(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-playground-'));
    // The clip then 3 s of silence, so every loop of the fake microphone ends an utterance.
    const mic = path.join(tmp, 'mic.wav');
    execFileSync('sox', [MIC_CLIP, mic, 'pad', '0', '3']);
    db = await createTestDatabase('stt_playground');
    files = await startFileServer(path.join(REPO_ROOT, 'samples'));
    svc = await startService({
      DATABASE_URL: db.url,
      OUTBOUND_ALLOW: '127.0.0.1',
      // Generous decode limits: the test machine is shared and loaded.
      STT_BUILTIN_TIMEOUT_BASE_MS: '120000',
      PLANS_JSON: JSON.stringify({ brief: { maxSessionSeconds: 6, maxConnectionsPerMinute: 60 } }),
    });
    const { key } = await issueServiceKey(svc, { owner_id: 'playground' });
    browser = await launchChromium(mic);
    context = await browser.newContext({ viewport: { width: 390, height: 844 }, acceptDownloads: true });
    page = await context.newPage();
    page.on('request', (r) => {
      if (!r.url().startsWith(svc.baseUrl) && !/^(blob|data):/.test(r.url())) offOrigin.push(r.url());
    });
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.on('response', (r) => {
      const kind = r.request().resourceType();
      if (r.status() >= 400 && kind !== 'fetch' && kind !== 'xhr') missing.push(`${r.status()} ${r.url()}`);
    });
    await openWithKey(page, key);
  });

  after(async () => {
    await browser?.close();
    await svc?.stop();
    await files?.close();
    await db?.drop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('serves the page from the API itself, with the key only in memory', async () => {
    const res = await fetch(`${svc.baseUrl}/`);
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.match(/^text\/html/);
    expect(res.headers.get('content-security-policy')).to.include("default-src 'self'");
    expect(await page.locator('#key').inputValue()).to.equal('');
    const stored = await page.evaluate(
      () => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }),
    );
    expect(stored).not.to.include('sk-');
  });

  it('speaking a clip into the microphone puts its words on the page, with latency', async () => {
    await page.click('#mic-start');
    await page.locator('#mic-status.ok').waitFor({ timeout: 30_000 });
    const done = page.locator('#utterances li.done');
    // The fake microphone loops the clip: wait until enough of its words have arrived.
    let text = '';
    for (const t0 = Date.now(); Date.now() - t0 < 120_000; await page.waitForTimeout(1000)) {
      text = (await done.locator('.text').allInnerTexts()).join(' ');
      if (overlap(MIC_REF, text) >= 0.6) break;
    }
    expect(overlap(MIC_REF, text), text).to.be.at.least(0.6);
    expect(await done.first().locator('.meta').innerText()).to.match(/\d+ ms latency/);
    const events = (await page.locator('#mic-events').textContent()) ?? '';
    expect(events).to.include('speech started').and.include('speech stopped');
    await screenshot(page, 'microphone');
    await page.click('#mic-stop');
    await page.locator('#mic-start:enabled').waitFor();
  });

  it('dropping a file shows its transcript and offers srt and vtt', async () => {
    const bytes = fs.readFileSync(SAMPLE).toString('base64');
    await page.evaluate((b64) => {
      const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bin], 'jfk.wav', { type: 'audio/wav' }));
      document
        .getElementById('drop')!
        .dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, bytes);
    await waitOn(page, '#file-status.ok', '#file-status');
    const text = await page.locator('#file-text').innerText();
    expect(wer(JFK, text), text).to.be.below(0.5);
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#dl-srt')]);
    expect(download.suggestedFilename()).to.equal('jfk.srt');
    const srt = fs.readFileSync((await download.path())!, 'utf8');
    expect(srt).to.match(/^1\n00:00:\d\d,\d{3} --> 00:00:\d\d,\d{3}\n/);
    const [vtt] = await Promise.all([page.waitForEvent('download'), page.click('#dl-vtt')]);
    expect(fs.readFileSync((await vtt.path())!, 'utf8')).to.match(/^WEBVTT\n\n00:00:/);
    await screenshot(page, 'file');
  });

  it('a batch job from a URL completes on the page, steps, result and artifacts', async () => {
    await page.fill('#batch-url', `${files.url}/jfk.wav`);
    await page.click('#batch-form button');
    await waitOn(page, '#batch-status.ok', '#batch-section', 180_000);
    expect(await page.locator('#batch-status').innerText()).to.match(/cf_[0-9a-f]{64}: complete/);
    const steps = await page.locator('#batch-steps li').allInnerTexts();
    expect(steps.length).to.be.at.least(3);
    expect(
      steps.every((s) => /: (complete|skipped)/.test(s)),
      steps.join('\n'),
    ).to.equal(true);
    expect(steps.filter((s) => s.includes(': complete')).length).to.be.at.least(3);
    // Batch splits jfk at its pauses, which costs PocketSphinx accuracy (docs/benchmarks.md).
    expect(wer(JFK, await page.locator('#batch-text').innerText())).to.be.below(0.6);
    await page.click('#batch-artifacts a:text("result.json")');
    await page.locator('#artifact-view:not([hidden])').waitFor();
    expect(await page.locator('#artifact-view').innerText()).to.include('"segments"');
    // Usage refreshed after the job: all three planes show up.
    await page.click('#usage-refresh');
    await page.waitForFunction(() =>
      /batch jobs\s*\d+\.\d\s*1/.test(document.getElementById('usage-table')!.innerText),
    );
    expect(await page.locator('#usage-window').innerText()).to.match(/: \d+\.\d s of \d+ s used, /);
    await screenshot(page, 'batch');
  });

  it('shows errors in the service’s words, and a refused private URL names OUTBOUND_ALLOW', async () => {
    await page.fill('#batch-url', 'http://10.0.0.1/a.wav');
    await page.click('#batch-form button');
    await page.locator('#batch-status.error').waitFor();
    expect(await page.locator('#batch-status').innerText())
      .to.include('OUTBOUND_ALLOW')
      .and.include('(invalid_request)');
  });

  it('shows a close code and reason, and reconnects where the interface says to', async () => {
    const { key } = await issueServiceKey(svc, { owner_id: 'playground', plan: 'brief' });
    const p = await context.newPage();
    await openWithKey(p, key);
    await p.click('#mic-start');
    // maxSessionSeconds 6: closed 1008 session_duration_limit, reconnected at once (interface 7.3).
    await p
      .waitForFunction(
        () => {
          const log = document.getElementById('mic-events')!.textContent ?? '';
          return (
            log.includes('1008 session_duration_limit') && (log.match(/session\.created/g) ?? []).length >= 2
          );
        },
        undefined,
        { timeout: 60_000 },
      )
      .catch(async (err: Error) => {
        throw new Error(`${err.message}\n${await p.locator('#mic-section').textContent()}`);
      });
    await p.click('#mic-stop');
    await p.close();
  });

  it('says so when the microphone is denied', async () => {
    const denied = await launchChromium(path.join(tmp, 'mic.wav'), false);
    try {
      const p = await denied.newPage();
      const { key } = await issueServiceKey(svc, { owner_id: 'playground' });
      await openWithKey(p, key);
      await p.click('#mic-start');
      await p.locator('#mic-status.error').waitFor({ timeout: 30_000 });
      expect(await p.locator('#mic-status').innerText()).to.include('Microphone access was denied');
      expect(await p.locator('#mic-start').isEnabled()).to.equal(true);
    } finally {
      await denied.close();
    }
  });

  it('made no request outside its own origin, missed no resource (a favicon.ico 404 was one) and raised no script errors', () => {
    expect(offOrigin).to.deep.equal([]);
    expect(missing).to.deep.equal([]);
    expect(pageErrors).to.deep.equal([]);
  });

  it('declares its icon, so a browser does not ask for /favicon.ico (404)', async () => {
    expect(await page.locator('link[rel="icon"]').count()).to.equal(1);
  });
});
