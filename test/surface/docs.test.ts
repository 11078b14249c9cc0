/**
 * The interactive documentation at /docs in a real browser (Debian's Chromium
 * driven by playwright-core): "Try it out" on the segment operation uploads a
 * file and gets its transcript, with the optional form fields left empty.
 */
import path from 'node:path';
import { expect } from 'chai';
import { chromium, type Browser, type Page } from 'playwright-core';
import { REPO_ROOT } from '../helpers/service.js';
import { startSpeechApp, type SpeechTestApp } from '../speech/app.js';
import { wer } from '../speech/helpers.js';

const CHROMIUM = '/usr/bin/chromium';
const JFK_WAV = path.join(REPO_ROOT, 'test/audio/jfk.wav');
const JFK =
  'and so my fellow americans ask not what your country can do for you ask what you can do for your country';
const OPTIONAL_FIELDS = ['model', 'language', 'prompt', 'response_format', 'worker_id', 'stream'];

describe('/docs in a real browser (Chromium): Try it out on POST /v1/audio/transcriptions', function () {
  this.timeout(120_000);
  let t: SpeechTestApp;
  let key: string;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];

  before(async () => {
    t = await startSpeechApp();
    ({ key } = await t.issueKey('pro'));
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    page = await browser.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) pageErrors.push(m.text());
    });
    await page.goto(`${t.url}/docs`);
    // Authorize with the API key (the `apiKey` bearer scheme).
    await page.click('button.authorize');
    const scheme = page.locator('.auth-container').filter({ hasText: 'apiKey' });
    await scheme.locator('input').fill(key);
    await scheme.locator('button.authorize').click();
    await page.click('.modal-ux button.close-modal');
    // Open the operation and switch it to "Try it out".
    const op = page.locator('#operations-segment-transcribeSegment');
    await op.locator('.opblock-summary').click();
    await op.locator('button.try-out__btn').click();
  });

  after(async () => {
    await browser?.close();
    await t?.close();
  });

  const op = () => page.locator('#operations-segment-transcribeSegment');
  const field = (name: string) => op().locator(`tr[data-property-name="${name}"]`);

  it('is served under a Content-Security-Policy that forbids framing, and runs under it', async () => {
    const res = await fetch(`${t.url}/docs`);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).to.include("frame-ancestors 'none'").and.include("script-src 'self' 'sha256-");
    expect(csp).to.not.match(/script-src[^;]*unsafe-inline/);
    expect(res.headers.get('x-frame-options')).to.equal('DENY');
    expect(pageErrors).to.deep.equal([]);
  });

  it('shows `file` as a file input and leaves every optional field empty', async () => {
    expect(await op().locator('select.content-type').first().inputValue()).to.equal('multipart/form-data');
    expect(await field('file').locator('input[type=file]').count()).to.equal(1);
    for (const name of OPTIONAL_FIELDS) {
      const input = field(name).locator('input:not([type=checkbox]), select');
      expect(await input.count(), name).to.equal(1);
      expect(await input.inputValue(), name).to.equal('');
    }
  });

  it('Execute uploads test/audio/jfk.wav and answers 200 with its transcript', async () => {
    await field('file').locator('input[type=file]').setInputFiles(JFK_WAV);
    await op().locator('button.execute').click();
    const response = op().locator('.live-responses-table .response').first();
    await response.waitFor({ timeout: 90_000 });
    expect((await response.locator('.response-col_status').innerText()).trim()).to.equal('200');
    const body = JSON.parse(await response.locator('.response-col_description pre').first().innerText());
    expect(body).to.include.keys('text', 'language', 'duration', 'segments', 'words');
    expect(wer(JFK, body.text), body.text).to.be.below(0.5);
    expect(pageErrors).to.deep.equal([]);
  });
});
