// The browser test's backfill from raw messages (console.test.mjs runs
// it): a second device, with a serial that is markup, sends three readings
// of a key no input takes (answered 422, kept as raw messages); the key is
// mapped with "Map this key", "Backfill them" opens the Backfill tab, a
// range starting tomorrow is refused with the service's text shown, and a
// backfill over the readings stores them (checked in the entity input); a
// second over the same range stores none and skips them all; a third, up to
// now, is cancelled while it runs, and a fourth refused meanwhile (409).
import assert from 'node:assert/strict';

const id = Date.now().toString(36);
// No '/' or '=' in the serial: a path would not carry them as they are.
export const bfSerial = `bf-${id}-<b>bold`;
const bfEntity = `backfill-${id}`;
const unmapped = [20.5, 21.5, 22.5];

// localInput is what a datetime-local input holds for epoch ms in the
// browser's time zone.
const localInput = (page, ms) => page.evaluate((t) => new Date(t - new Date(t).getTimezoneOffset() * 60e3).toISOString().slice(0, 19), ms);

// sendUnmapped provisions the device and sends the readings; it returns
// when it started. Their diagnostics reach storage while the next steps run.
export async function sendUnmapped({ admin, send }) {
  const bfSince = Date.now();
  const bfDevice = await admin('PUT', `/devices/${encodeURIComponent(bfSerial)}`, { inputs: [{ name: 'temp', entity: bfEntity }] });
  const bfToken = bfDevice.accessToken;
  assert.match(bfToken, /^[0-9a-f]{32}$/);
  for (const temperature of unmapped) {
    const { status, answer } = await send('/api/v1/deviceapi/event', { serial: bfSerial, data: { temperature } }, bfToken);
    assert.equal(status, 422, JSON.stringify(answer));
    assert.equal(answer.message, 'No connections configured');
  }
  return bfSince;
}

// backfillSteps maps the key and runs the two backfills over a range from
// before bfSince to now.
export async function backfillSteps({ page, base, admin, shot }, bfSince) {
  const bfPath = `/console/devices/${encodeURIComponent(bfSerial)}`;
  for (let i = 0; i < 40; i++) { // the raw message log is a downstream stage
    const { messages } = await admin('GET', `/devices/${encodeURIComponent(bfSerial)}/messages?limit=10`);
    if (messages.length >= unmapped.length) {
      assert.ok(messages.every((m) => m.outcome === 'No connections configured'), JSON.stringify(messages));
      break;
    }
    assert.ok(i < 39, `raw messages kept: ${messages.length}`);
    await page.waitForTimeout(500);
  }
  await page.goto(`${base}${bfPath}?tab=diagnostics`);
  await page.getByRole('heading', { name: bfSerial, exact: true }).waitFor();
  await page.locator('#diag-last-seen').waitFor(); // the first load drawn
  const bfKey = page.locator('#diag-keys tr[data-key="temperature"]');
  for (let i = 0; i < 40 && await bfKey.count() === 0; i++) {
    await page.waitForTimeout(1000);
    // One load at a time: a load still in flight would redraw the table
    // after the key's form is opened.
    const loaded = page.waitForResponse((r) => r.url().includes('/diagnostics?'));
    await page.getByRole('button', { name: 'Refresh' }).click();
    await loaded;
  }
  await bfKey.getByRole('button', { name: 'Map this key' }).click();
  await bfKey.getByLabel('Entity', { exact: true }).fill(bfEntity);
  await bfKey.getByRole('button', { name: 'Connect' }).click();
  await page.locator('#mapped-note').getByRole('button', { name: 'Backfill them' }).click();
  await page.locator('#backfill-form').waitFor();
  assert.equal(new URL(page.url()).searchParams.get('tab'), 'backfill');
  assert.ok((await page.locator('#backfill-mapping').textContent()).includes(`temperature → ${bfEntity} / temperature`));
  assert.equal(await page.locator('main b').count(), 0, 'the serial is text, no element is made of it');
  assert.equal((await page.locator('h1.serial').textContent()), bfSerial);
  // A preset fills the start and empties the end (now).
  await page.getByRole('button', { name: 'Last 7 days' }).click();
  const presetFrom = await page.locator('#backfill-from').evaluate((e) => new Date(e.value).getTime());
  assert.ok(Math.abs(presetFrom - (Date.now() - 7 * 86400e3)) < 60e3, `Last 7 days starts ${new Date(presetFrom).toISOString()}`);
  assert.equal(await page.locator('#backfill-to').inputValue(), '');
  // The service's refusal is shown as text: a range starting tomorrow.
  await page.locator('#backfill-from').fill(await localInput(page, Date.now() + 86400e3 + 30e3));
  const refusal = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/backfills'));
  await page.getByRole('button', { name: 'Start backfill' }).click();
  assert.equal((await refusal).status(), 400);
  await page.locator('#backfill-error').filter({ hasText: /^Not started: \S/ }).waitFor();
  // The range: from before the readings (seconds set: a datetime-local
  // input drops :00) to a moment after them.
  const bfFrom = Math.floor((bfSince - 120e3) / 60e3) * 60e3 + 30e3;
  let bfTo = Math.floor(Date.now() / 1000) * 1000 - 1000;
  if (new Date(bfTo).getSeconds() === 0) bfTo -= 1000;
  await page.locator('#backfill-from').fill(await localInput(page, bfFrom));
  await page.locator('#backfill-to').fill(await localInput(page, bfTo));
  const backfillRows = page.locator('#backfills tbody tr');
  const cell = (row, name) => row.locator(`td.bf-${name}`).textContent().then((t) => t.trim());
  const finished = async (n) => {
    await page.waitForFunction((k) => {
      const trs = document.querySelectorAll('#backfills tbody tr');
      return trs.length === k && !['queued', 'running'].includes(trs[0].dataset.state);
    }, n, { timeout: 60000 });
    const row = backfillRows.first();
    assert.equal(await row.getAttribute('data-state'), 'done', `backfill: ${await row.textContent()}`);
    assert.equal(await row.locator('.bf-error').count(), 0);
    assert.equal(await cell(row, 'progress'), '100%');
    return { messages: await cell(row, 'messages'), readings: await cell(row, 'readings'), skipped: await cell(row, 'skipped') };
  };
  await page.getByRole('button', { name: 'Start backfill' }).click();
  assert.deepEqual(await finished(1), { messages: '3', readings: '3', skipped: '0' }, 'the three unmapped readings stored');
  assert.equal(await page.locator('#backfill-error').textContent(), '', 'the refusal is cleared');
  assert.ok((await backfillRows.first().locator('td.bf-inputs').textContent()).includes(`temperature → ${bfEntity} / temperature`));
  const q = new URLSearchParams({ from: new Date(bfFrom).toISOString(), to: new Date(bfTo).toISOString(), limit: '100' });
  const storedValues = async () => (await admin('GET', `/entities/${bfEntity}/inputs/temperature/series?${q}`)).points.map((p) => p.value).sort((x, y) => x - y);
  assert.deepEqual(await storedValues(), unmapped, 'the entity input holds the backfilled values');
  await page.getByRole('button', { name: 'Start backfill' }).click();
  assert.deepEqual(await finished(2), { messages: '3', readings: '0', skipped: '3' }, 'the same range again stores nothing twice');
  assert.deepEqual(await storedValues(), unmapped, 'still three values');
  assert.equal(await page.getByRole('button', { name: 'Cancel', exact: true }).count(), 0, 'nothing left to cancel');

  // A backfill up to now runs for 10 s at least (the service reads a
  // message once it is 10 s old): meanwhile a second is refused (409, its
  // text shown), and Cancel stops the first.
  await page.getByRole('button', { name: 'Last 24 h' }).click();
  await page.getByRole('button', { name: 'Start backfill' }).click();
  await backfillRows.nth(2).waitFor();
  const conflict = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/backfills'));
  await page.getByRole('button', { name: 'Start backfill' }).click();
  assert.equal((await conflict).status(), 409);
  await page.locator('#backfill-error').filter({ hasText: /^Not started: .*cancel it or wait for it/ }).waitFor();
  await backfillRows.first().getByRole('button', { name: 'Cancel', exact: true }).click();
  await page.locator('#backfills tbody tr[data-state="cancelled"]').waitFor({ timeout: 15000 });
  assert.equal(await backfillRows.first().getAttribute('data-state'), 'cancelled');
  assert.equal(await cell(backfillRows.first(), 'readings'), '0', 'everything in range was stored already');
  assert.equal(await page.getByRole('button', { name: 'Cancel', exact: true }).count(), 0);
  assert.deepEqual(await storedValues(), unmapped, 'still three values');
  assert.equal(await page.locator('main b').count(), 0);
  await shot('backfill');
}
