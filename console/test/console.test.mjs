// The console in a real browser (Debian's chromium, driven by
// playwright-core), against a running stack: sign-in (wrong token refused),
// creating a device, readings posted through the ingestion endpoint showing
// up in the Messages tab (newest first, without the token, new ones without
// a reload), the entity page's latest value and drawn chart for a range, a
// script-looking value shown as text with no dialog, every deep link after
// a reload, a backfill from raw messages after a key is mapped (a second
// one over the same range stores nothing twice), a device whose serial and
// names carry reserved URL characters, and sign-out. Screenshots
// of each page go to SCREENSHOTS.
//
// Env: CONSOLE_BASE (the workspace listener, http://127.0.0.1:PORT),
// DEVICE_BASE (the device port, where readings are posted), ADMIN_TOKEN,
// SCREENSHOTS (a directory), CHROMIUM (default /usr/bin/chromium).
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { bfSerial, sendUnmapped, backfillSteps } from './backfill.mjs';

const base = process.env.CONSOLE_BASE;
const deviceBase = process.env.DEVICE_BASE;
const adminToken = process.env.ADMIN_TOKEN;
const shots = process.env.SCREENSHOTS || '.';
assert.ok(base && deviceBase && adminToken, 'CONSOLE_BASE, DEVICE_BASE and ADMIN_TOKEN are needed');
mkdirSync(shots, { recursive: true });

const SCRIPT = '<img src=x onerror=alert(1)>';
const serial = `console-dev-${Date.now().toString(36)}`;
// A serial and names with every character that means something in a URL.
const odd = `mac AA:BB/7@x+1,2;k=v&$% Küche-${Date.now().toString(36)}`;
const oddEntity = 'hall #2/3?a=b&c';
const oddInput = 't°C 50%/x';
const step = (what) => console.log(`console test: ${what}`);

// send posts as field clients do: a 429 is retried after its Retry-After
// (a backlog counts one reading per message against the device's rate).
async function send(path, body, token, key) {
  const headers = { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` };
  if (key) headers['Idempotency-Key'] = key;
  let res;
  for (let attempt = 0; attempt < 4; attempt++) {
    res = await fetch(`${deviceBase}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    if (res.status !== 429) break;
    const wait = Number(res.headers.get('retry-after'));
    assert.ok(wait >= 1 && wait <= 60, `429 with Retry-After ${wait}`);
    await res.arrayBuffer();
    await new Promise((r) => setTimeout(r, wait * 1000));
  }
  return { status: res.status, answer: await res.json() };
}

// post sends and expects the values stored.
async function post(path, body, token, key) {
  const { status, answer } = await send(path, body, token, key);
  assert.equal(status, 200, `${path}: ${JSON.stringify(answer)}`);
  assert.equal(answer.success, true, `${path}: ${JSON.stringify(answer)}`);
  return answer;
}

// admin calls the workspace API with the bootstrap key and expects a 2xx.
async function admin(method, path, body) {
  const res = await fetch(`${base}/api/v1/admin${path}`, {
    method,
    headers: { Authorization: `Bearer ${adminToken}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = res.status === 204 ? null : await res.json();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(answer)}`);
  return answer;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage'],
});
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const dialogs = [];
  const problems = [];
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // Failed loads are checked by status below.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(`console: ${m.text()}`);
  });
  // Expected refusals: the wrong token's 401, the 404 by which the create
  // form checks that the serial is free, a backfill from the future and one
  // while another runs.
  page.on('response', (r) => {
    const u = new URL(r.url());
    const expected = (r.status() === 401 && u.pathname === '/api/v1/admin/whoami')
      || (r.status() === 404 && [serial, odd].some((x) => u.pathname === `/api/v1/admin/devices/${encodeURIComponent(x)}`))
      || ([400, 409].includes(r.status()) && r.request().method() === 'POST' && u.pathname === `/api/v1/admin/devices/${encodeURIComponent(bfSerial)}/backfills`);
    if (r.status() >= 400 && !expected) problems.push(`${r.status()} for ${u.pathname}`);
  });
  const shot = (name, fullPage = true) => page.screenshot({ path: join(shots, `${name}.png`), fullPage });

  step('the page is served with a CSP that forbids inline scripts');
  const res = await fetch(`${base}/console/devices`);
  const csp = res.headers.get('content-security-policy') || '';
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);

  step('the device port serves neither the console nor the workspace API');
  for (const path of ['/console/devices', '/api/v1/admin/whoami']) {
    const r = await fetch(`${deviceBase}${path}`, { headers: { Authorization: `Bearer ${adminToken}` } });
    assert.equal(r.status, 404, `${path} on the device port`);
  }

  step('a wrong token is refused');
  await page.goto(`${base}/console/`);
  await page.getByLabel('Admin token').fill('not-the-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'Wrong key' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  await shot('signin');

  step('sign in');
  await page.getByLabel('Admin token').fill(adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices' }).waitFor();
  assert.equal(new URL(page.url()).pathname, '/console/devices');
  assert.ok(!page.url().includes(adminToken), 'the token is not in the URL');

  step('create a device in the console');
  await page.getByRole('button', { name: 'New device' }).click();
  await page.getByLabel('Serial', { exact: true }).fill(serial);
  const rows = page.locator('table.inputs tbody tr');
  const fillRow = async (i, name, entity, input) => {
    const row = rows.nth(i);
    await row.getByLabel('Input name').fill(name);
    await row.getByLabel('Entity', { exact: true }).fill(entity);
    await row.getByLabel('Entity input').fill(input);
  };
  await fillRow(0, 'temp', 'greenhouse', 'temperature');
  await page.getByRole('button', { name: 'Add input' }).click();
  await fillRow(1, 'label', 'greenhouse', 'label');
  await page.getByRole('button', { name: 'Add input' }).click();
  await fillRow(2, 'on', 'greenhouse', 'heating');
  await page.getByLabel(/Timestamp input/).fill('datetime');
  await page.getByRole('button', { name: 'Create device' }).click();
  await page.getByRole('heading', { name: serial }).waitFor();
  await page.getByText('greenhouse / temperature').waitFor();
  const firstRow = page.locator('#device-tokens tr[data-token="token-1"]');
  await firstRow.getByText('primary').waitFor();
  await firstRow.getByRole('button', { name: 'Reveal' }).click();
  await firstRow.getByRole('button', { name: 'Hide' }).waitFor();
  const token = (await firstRow.locator('.token-value').textContent()).trim();
  assert.match(token, /^[0-9a-f]{32}$/, 'a generated token is shown on reveal');
  await firstRow.getByRole('button', { name: 'Hide' }).click();
  assert.ok(!(await firstRow.locator('.token-value').textContent()).includes(token), 'hidden again');
  await shot('device');

  step('post readings through the ingestion endpoint');
  const now = Date.now();
  const iso = (ms) => new Date(ms).toISOString().toLowerCase(); // the field clients' lower-case form
  // A backlog of five days, a reading every 5 minutes, in two requests of
  // 720; then live readings.
  for (let part = 0; part < 2; part++) {
    const messages = [];
    for (let j = 0; j < 720; j++) {
      const i = part * 720 + j;
      const at = now - 6 * 86400e3 + i * 300e3;
      messages.push({ data: { datetime: iso(at), temp: Math.round((18 + 4 * Math.sin(i / 45) + (i % 5) * 0.4) * 10) / 10, on: Math.floor(i / 60) % 3 === 0 } });
    }
    await post('/api/v1/deviceapi/events', { serial, messages }, token, `backlog-${serial}-${part}`);
  }
  for (let i = 0; i < 3; i++) {
    await post('/api/v1/deviceapi/event', {
      serial, accessToken: token,
      data: { datetime: iso(now - (3 - i) * 60e3), temp: 21 + i, on: i === 1, label: i === 2 ? SCRIPT : `run ${i}`, hum: null },
    }, token, `live-${serial}-${i}`);
  }

  step('the Messages tab shows them, newest first, without the token');
  await page.getByRole('tab', { name: 'Messages' }).click();
  const items = page.locator('#messages li.message');
  await page.waitForFunction(() => document.querySelectorAll('#messages li.message').length >= 50);
  // The raw message log is a downstream stage: the last live reading shows
  // within a refresh or two.
  await page.waitForFunction((s) => document.querySelector('#messages').textContent.includes(s), SCRIPT);
  const received = await items.evaluateAll((els) => els.map((e) => e.querySelector('time').dateTime));
  assert.deepEqual([...received].sort().reverse(), received, 'newest received first');
  const text = await page.locator('#messages').textContent();
  assert.ok(!text.includes(token), 'no token in the Messages tab');
  assert.ok(text.includes(SCRIPT), `the script-looking value is shown as text: ${text.slice(0, 400)}`);
  assert.equal(await page.locator('#messages img').count(), 0, 'and no element is made of it');
  const firstPayload = await items.first().locator('pre.payload').textContent();
  assert.equal(JSON.parse(firstPayload).data.label, SCRIPT, 'the newest message first, its payload as formatted JSON');

  step('a new message appears without a reload');
  await post('/api/v1/deviceapi/event', { serial, data: { datetime: iso(now), temp: 26.5 } }, token, `live-${serial}-last`);
  await page.waitForFunction(() => (document.querySelector('#messages li.message pre') || {}).textContent?.includes('26.5'), null, { timeout: 15000 });
  await shot('messages', false);

  step('rotate the device token: add, both valid, promote, retire the old one');
  await page.getByRole('tab', { name: 'Overview' }).click();
  await page.getByRole('button', { name: 'Add token' }).click();
  const second = (await page.locator('#new-token .token-value').textContent()).trim();
  assert.match(second, /^[0-9a-f]{32}$/, 'the new token is shown once');
  assert.notEqual(second, token);
  assert.ok(await page.getByRole('button', { name: 'Add token' }).isDisabled(), 'a third token cannot be added');
  await post('/api/v1/deviceapi/event', { serial, data: { temp: 27.5 } }, second, `live-${serial}-second`);
  await post('/api/v1/deviceapi/event', { serial, data: { temp: 27.0 } }, token, `live-${serial}-first`);
  const secondRow = page.locator('#device-tokens tr[data-token="token-2"]');
  await secondRow.getByRole('button', { name: 'Make primary' }).click();
  await secondRow.getByText('primary').waitFor();
  await shot('tokens');
  await page.locator('#device-tokens tr[data-token="token-1"]').getByRole('button', { name: 'Retire' }).click();
  await page.locator('#device-tokens tr[data-token="token-1"] .confirm').getByRole('button', { name: 'Retire' }).click();
  await page.locator('#device-tokens tr[data-token="token-1"]').waitFor({ state: 'detached' });
  assert.equal(await page.locator('#device-tokens tbody tr').count(), 1);
  const refused = await fetch(`${deviceBase}/api/v1/deviceapi/event`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ serial, data: { temp: 1 } }),
  });
  assert.equal(refused.status, 401, 'the retired token is refused');
  assert.equal((await refused.json()).message, 'Invalid access token');
  await post('/api/v1/deviceapi/event', { serial, data: { temp: 28.5 } }, second, `live-${serial}-after`);
  await page.getByRole('tab', { name: 'Messages' }).click();
  await page.waitForFunction(() => (document.querySelector('#messages li.message pre') || {}).textContent?.includes('28.5'), null, { timeout: 15000 });
  const tokensShown = await items.evaluateAll((els) => els.slice(0, 3).map((e) => e.querySelector('.token-name')?.textContent));
  assert.deepEqual(tokensShown, ['Token token-2', 'Token token-1', 'Token token-2'], 'each message names the token it used');
  const shownText = await page.locator('#messages').textContent();
  assert.ok(!shownText.includes(token) && !shownText.includes(second), 'no token value in the Messages tab');

  step('backfill, before: a device sends a key no input takes (422), its raw messages are kept');
  const bfSince = await sendUnmapped({ admin, send });

  step('the Diagnostics tab: answers by kind, the rejection, keys no input takes (as text), and mapping one');
  await post('/api/v1/deviceapi/event', { serial, data: { temp: 29, humidity: 55, [SCRIPT]: SCRIPT } }, second, `live-${serial}-keys`);
  await page.goto(`${base}/console/devices/${encodeURIComponent(serial)}?tab=diagnostics`);
  await page.locator('#diag-last-seen').waitFor(); // the first load drawn
  // Reports reach storage within about 12 s.
  for (let i = 0; i < 40 && await page.locator('#diag-keys tr[data-key="humidity"]').count() === 0; i++) {
    await page.waitForTimeout(1000);
    // One load at a time: a load still in flight would redraw the table
    // after the key's form is opened.
    const loaded = page.waitForResponse((r) => r.url().includes('/diagnostics?'));
    await page.getByRole('button', { name: 'Refresh' }).click();
    await loaded;
  }
  const keyRow = page.locator('#diag-keys tr[data-key="humidity"]');
  await keyRow.waitFor();
  assert.equal((await keyRow.locator('td').nth(2).textContent()).trim(), '55');
  await page.locator(`#diag-keys tr[data-key="${SCRIPT.replace(/"/g, '\\"')}"]`).waitFor();
  assert.ok((await page.locator('#diag-keys').textContent()).includes(SCRIPT), 'a script-looking key and value, as text');
  assert.equal(await page.locator('main img').count(), 0, 'and no element is made of them');
  await page.locator('#diag-counts tr[data-kind="invalid_token"]').waitFor();
  assert.equal((await page.locator('#diag-counts tr[data-kind="invalid_token"] td').nth(1).textContent()).trim(), '1', 'the retired token, refused once');
  assert.ok((await page.locator('#diag-rejections').textContent()).includes(`Invalid access token for device with serial ${serial}`));
  await shot('diagnostics');
  await keyRow.getByRole('button', { name: 'Map this key' }).click();
  await keyRow.getByLabel('Entity', { exact: true }).fill('greenhouse');
  await keyRow.getByRole('button', { name: 'Connect' }).click();
  await page.locator('#diag-keys tr[data-key="humidity"]').waitFor({ state: 'detached' });
  const mapped = await (await fetch(`${base}/api/v1/admin/devices/${encodeURIComponent(serial)}`, { headers: { Authorization: `Bearer ${adminToken}` } })).json();
  assert.ok(mapped.inputs.some((i) => i.name === 'humidity' && i.entity === 'greenhouse' && i.entityInput === 'humidity'), JSON.stringify(mapped.inputs));

  step('the fleet view: the most rejected device and a serial not provisioned, as text');
  const ghost = `ghost-${SCRIPT}`;
  const knock = await fetch(`${deviceBase}/api/v1/deviceapi/event`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer nope' }, body: JSON.stringify({ serial: ghost, data: { temp: 1 } }),
  });
  assert.equal(knock.status, 404);
  const unnamed = await fetch(`${deviceBase}/api/v1/deviceapi/event`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '<not json>' });
  assert.equal(unnamed.status, 400);
  await page.goto(`${base}/console/fleet`);
  const fleetShown = async () => (await page.locator('#fleet').textContent()).includes(ghost) && await page.locator('#fleet-unnamed tr[data-kind="invalid_format"]').count() > 0;
  for (let i = 0; i < 40 && !await fleetShown(); i++) {
    await page.waitForTimeout(1000);
    await page.reload();
    await page.locator('#fleet h2, #fleet .error').first().waitFor();
    if (await page.locator('#fleet .error').count() > 0) throw new Error(await page.locator('#fleet').textContent());
  }
  await page.locator('#fleet-unknown').getByText(ghost, { exact: true }).waitFor();
  await page.locator('#fleet-rejected').getByRole('link', { name: serial }).waitFor();
  assert.equal((await page.locator('#fleet-unnamed tr[data-kind="invalid_format"] td').first().textContent()).trim(), 'not JSON (400)', 'a body that names no serial');
  assert.equal(await page.locator('main img').count(), 0);
  await shot('fleet');

  step('backfill: map the key in the console, apply it to the kept messages, a second backfill stores nothing twice');
  await backfillSteps({ page, base, admin, shot }, bfSince);

  step('the entity page shows the latest value and draws the chart');
  await page.goto(`${base}/console/entities/greenhouse/inputs/temperature`);
  await page.locator('#latest-value').filter({ hasText: '29' }).waitFor(); // the reading the Diagnostics step sent
  await page.locator('#chart[data-kind="number"] canvas').first().waitFor();
  const drawn = async () => page.locator('#chart canvas').first().evaluate((c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    // Pixels of the line's colour (#1d4ed8), not the grid's or the axes'.
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] < 90 && d[i + 1] < 130 && d[i + 2] > 170 && d[i + 3] > 200) n++;
    return n;
  });
  assert.ok(await drawn() > 200, 'the 1 h chart draws its line');
  await shot('entity');

  step('switch the range to 7 days');
  await page.getByRole('button', { name: '7 d', exact: true }).click();
  await page.waitForFunction(() => Number(document.querySelector('#chart')?.dataset.buckets) > 50);
  assert.ok(await drawn() > 500, 'the 7 d chart draws its line');
  assert.equal(new URL(page.url()).searchParams.get('range'), '7d');
  await shot('entity-7d');

  step('30 days and a year, in steps the rollups answer (whole minutes, whole hours)');
  for (const [label, range, unit] of [['30 d', '30d', /^[0-9]+(h|d)$/], ['1 y', '1y', /^[0-9]+(h|d)$/]]) {
    await page.getByRole('button', { name: label, exact: true }).click();
    await page.waitForFunction((r) => new URL(location.href).searchParams.get('range') === r && Number(document.querySelector('#chart')?.dataset.buckets) > 0, range);
    const stepText = await page.locator('#chart').getAttribute('data-step');
    assert.match(stepText, unit, `the ${label} chart's step ${stepText}`);
    assert.ok(await drawn() > 100, `the ${label} chart draws its line`);
  }
  await shot('entity-1y');

  step('a boolean input is a step line; a string input a table, as text');
  await page.goto(`${base}/console/entities/greenhouse/inputs/heating?range=7d`);
  await page.locator('#chart[data-kind="boolean"] canvas').first().waitFor();
  await page.goto(`${base}/console/entities/greenhouse/inputs/label?range=1h`);
  await page.locator('#chart[data-kind="table"]').waitFor();
  await page.locator('#latest-value').waitFor();
  assert.equal(await page.locator('#latest-value').textContent(), SCRIPT, 'the latest value, exactly as sent, as text');
  assert.ok((await page.locator('#buckets').textContent()).includes(SCRIPT));
  assert.equal(await page.locator('main img').count(), 0);
  await shot('entity-label');
  await page.goto(`${base}/console/entities`);
  await page.locator('#entities').getByText(SCRIPT, { exact: true }).waitFor();
  assert.equal(await page.locator('main img').count(), 0);
  await shot('entities');

  step('every deep link survives a reload');
  for (const [path, probe] of [
    ['/console/devices', () => page.locator('#devices').getByText(serial).waitFor()],
    [`/console/devices/${encodeURIComponent(serial)}`, () => page.getByRole('heading', { name: serial }).waitFor()],
    [`/console/devices/${encodeURIComponent(serial)}?tab=messages`, () => page.locator('#messages li.message').first().waitFor()],
    [`/console/devices/${encodeURIComponent(serial)}?tab=diagnostics`, () => page.locator('#diag-counts').waitFor()],
    [`/console/devices/${encodeURIComponent(bfSerial)}?tab=backfill`, () => page.locator('#backfills tbody tr').first().waitFor()],
    ['/console/fleet', () => page.locator('#fleet-unknown').waitFor()],
    ['/console/entities', () => page.locator('#entities').getByText('heating').waitFor()],
    ['/console/entities/greenhouse/inputs/temperature?range=7d', () => page.locator('#chart[data-kind="number"] canvas').first().waitFor()],
  ]) {
    await page.goto(`${base}${path}`);
    await probe();
    await page.reload();
    await probe();
  }
  await page.goto(`${base}/console/devices?q=${encodeURIComponent(serial)}`);
  await page.locator('#devices').getByText(serial).waitFor();
  await shot('devices');

  step('a serial and names with reserved URL characters: made in the console, posted to, read back, deep links reload');
  await page.goto(`${base}/console/devices`);
  await page.getByRole('button', { name: 'New device' }).click();
  await page.getByLabel('Serial', { exact: true }).fill(odd);
  await fillRow(0, 'temp', oddEntity, oddInput);
  await page.getByRole('button', { name: 'Create device' }).click();
  await page.getByRole('heading', { name: odd }).waitFor();
  assert.equal(new URL(page.url()).pathname, `/console/devices/${encodeURIComponent(odd)}`);
  assert.equal((await admin('GET', `/devices/${encodeURIComponent(odd)}`)).serial, odd, 'stored under the serial as typed');
  const oddRow = page.locator('#device-tokens tr[data-token="token-1"]');
  await oddRow.getByRole('button', { name: 'Reveal' }).click();
  await oddRow.getByRole('button', { name: 'Hide' }).waitFor();
  const oddToken = (await oddRow.locator('.token-value').textContent()).trim();
  await post('/api/v1/deviceapi/event', { serial: odd, data: { temp: 31.5 } }, oddToken);
  await page.getByRole('tab', { name: 'Messages' }).click();
  await page.waitForFunction(() => (document.querySelector('#messages li.message pre') || {}).textContent?.includes('31.5'));
  await page.reload();
  await page.getByRole('heading', { name: odd }).waitFor();
  await page.getByRole('tab', { name: 'Overview' }).click();
  await page.getByRole('link', { name: `${oddEntity} / ${oddInput}` }).click();
  await page.locator('#latest-value').filter({ hasText: '31.5' }).waitFor();
  assert.equal(new URL(page.url()).pathname, `/console/entities/${encodeURIComponent(oddEntity)}/inputs/${encodeURIComponent(oddInput)}`);
  await page.reload();
  await page.locator('#latest-value').filter({ hasText: '31.5' }).waitFor();
  await shot('odd-names');

  step('an admin makes a viewer key and reads the audit trail');
  await page.goto(`${base}/console/keys`);
  await page.getByLabel('Name (a person or a script)').fill('console-viewer');
  await page.getByLabel('Role').selectOption('viewer');
  await page.getByRole('button', { name: 'Create key' }).click();
  const viewerKey = (await page.locator('#new-key .key-secret').textContent()).trim();
  assert.match(viewerKey, /^dk_[0-9a-f]{12}_/, 'the secret is shown once');
  await page.locator('#keys tr[data-key="console-viewer"]').getByText('viewer', { exact: true }).waitFor();
  await shot('keys');
  await page.goto(`${base}/console/audit?target=${encodeURIComponent(serial)}`);
  await page.locator('#audit tbody tr').first().waitFor();
  const auditActions = await page.locator('#audit td.audit-action').allTextContents();
  assert.deepEqual(auditActions, ['device.updated', 'token.retired', 'token.promoted', 'token.added', 'token.revealed', 'device.created'], `audit: ${auditActions}`); // updated: Map this key
  assert.ok(!(await page.locator('#audit').textContent()).includes(token), 'no token in the audit trail');
  await shot('audit');
  await page.goto(`${base}/console/audit?action=key.`);
  await page.locator('#audit').getByRole('cell', { name: 'console-viewer', exact: true }).waitFor();

  step('a viewer sees the devices but none of what it may not do');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.goto(`${base}/console/devices`);
  await page.getByLabel('Admin token').fill(viewerKey);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices' }).waitFor();
  assert.equal((await page.locator('#who').textContent()).trim(), 'console-viewer (viewer)');
  assert.equal(await page.getByRole('button', { name: 'New device' }).count(), 0, 'no New device for a viewer');
  assert.equal(await page.getByRole('link', { name: 'Keys' }).count(), 0, 'no Keys page for a viewer');
  await page.goto(`${base}/console/devices/${encodeURIComponent(serial)}`);
  await page.locator('#device-tokens tr[data-token="token-2"]').waitFor();
  for (const name of ['Reveal', 'Edit', 'Delete device', 'Add token', 'Retire']) {
    assert.equal(await page.getByRole('button', { name, exact: true }).count(), 0, `no ${name} for a viewer`);
  }
  await shot('viewer-device');
  await page.goto(`${base}/console/devices/${encodeURIComponent(bfSerial)}?tab=backfill`);
  await page.locator('#backfills tbody tr').nth(1).waitFor();
  await page.getByText('Operators start and cancel backfills.').waitFor();
  for (const name of ['Start backfill', 'Cancel']) {
    assert.equal(await page.getByRole('button', { name, exact: true }).count(), 0, `no ${name} for a viewer`);
  }

  step('sign out forgets the token');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Admin token').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);

  assert.deepEqual(dialogs, [], 'no dialog opened');
  assert.deepEqual(problems, [], 'no script error or CSP violation');
  step('all checks passed');
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
