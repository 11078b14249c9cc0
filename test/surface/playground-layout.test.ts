/**
 * The playground's Events list laid out in a real browser (Chromium, a phone's
 * width): every item's number is drawn inside the list's box (not cut at its
 * left edge) and a long line wraps instead of running off the right edge.
 * Marker boxes are read from the layout through the DevTools protocol.
 */
import { expect } from 'chai';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startSpeechApp, type SpeechTestApp } from '../speech/app.js';

const CHROMIUM = '/usr/bin/chromium';
/** The page keeps the newest 200 events (app.js logEvent): three-digit numbers. */
const EVENTS = 200;

interface Box {
  left: number;
  right: number;
}

/** The ::marker boxes of the items of `#id`, in page coordinates. */
async function markerBoxes(page: Page, id: string): Promise<Box[]> {
  const cdp = await page.context().newCDPSession(page);
  try {
    await cdp.send('DOM.enable');
    const { root } = await cdp.send('DOM.getDocument', { depth: -1, pierce: true });
    const { nodeId } = await cdp.send('DOM.querySelector', { nodeId: root.nodeId, selector: `#${id}` });
    const { node } = await cdp.send('DOM.describeNode', { nodeId, depth: 1 });
    const boxes: Box[] = [];
    for (const li of node.children ?? []) {
      const marker = li.pseudoElements?.find((p) => p.pseudoType === 'marker');
      expect(marker, 'every item has a marker').to.not.equal(undefined);
      const { model } = await cdp.send('DOM.getBoxModel', { backendNodeId: marker!.backendNodeId });
      const xs = model.border.filter((_, i) => i % 2 === 0);
      boxes.push({ left: Math.min(...xs), right: Math.max(...xs) });
    }
    return boxes;
  } finally {
    await cdp.detach();
  }
}

describe('playground layout in a real browser (Chromium): the Events list', function () {
  this.timeout(60_000);
  let t: SpeechTestApp;
  let browser: Browser;
  let page: Page;

  before(async () => {
    t = await startSpeechApp();
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    await page.goto(`${t.url}/`);
    await page.click('#mic-section details summary');
    // Items as app.js's logEvent writes them (text, newest first), with one long unbroken line.
    await page.evaluate((n) => {
      const list = document.getElementById('mic-events')!;
      for (let i = 0; i < n; i++) {
        const li = document.createElement('li');
        li.textContent =
          i === 0
            ? `12:00:00 artifact transcription/${'0123456789abcdef'.repeat(8)}/reviewed_result.json`
            : `12:00:00 speech started #${i}`;
        list.prepend(li);
      }
    }, EVENTS);
  });

  after(async () => {
    await browser?.close();
    await t?.close();
  });

  it('draws every item number inside the list’s box', async () => {
    const list = await page.evaluate(() => {
      const el = document.getElementById('mic-events')!;
      const r = el.getBoundingClientRect();
      return { left: r.left + el.clientLeft, right: r.left + el.clientLeft + el.clientWidth };
    });
    const markers = await markerBoxes(page, 'mic-events');
    expect(markers).to.have.length(EVENTS);
    for (const [i, m] of markers.entries()) {
      expect(m.right - m.left, `marker ${i + 1} has a width`).to.be.greaterThan(0);
      expect(m.left, `marker ${i + 1} left`).to.be.at.least(list.left);
      expect(m.right, `marker ${i + 1} right`).to.be.at.most(list.right);
    }
  });

  it('wraps a long line instead of running off the right edge', async () => {
    const fit = await page.evaluate(() => {
      const el = document.getElementById('mic-events')!;
      const r = el.getBoundingClientRect();
      const items = [...el.children].map((li) => li.getBoundingClientRect());
      return {
        scrollWidth: el.scrollWidth,
        clientWidth: el.clientWidth,
        right: r.right,
        widest: Math.max(...items.map((b) => b.right)),
        longLineHeight: el.lastElementChild!.getBoundingClientRect().height,
        lineHeight: el.children[1].getBoundingClientRect().height,
      };
    });
    expect(fit.scrollWidth, JSON.stringify(fit)).to.be.at.most(fit.clientWidth);
    expect(fit.widest).to.be.at.most(fit.right);
    // The long line is there, wrapped onto several lines.
    expect(fit.longLineHeight).to.be.greaterThan(fit.lineHeight * 1.5);
  });
});
