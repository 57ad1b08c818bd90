// /console/fleet: devices that went silent, devices with the most
// rejections, and serials that are not provisioned but keep posting.
// Serials are device-controlled text: rendered as text.
import { h, replace, time } from '../dom.js';
import { api, enc } from '../api.js';
import { KINDS } from './diagnostics.js';

const RANGES = [['1h', 'Last hour'], ['24h', 'Last day'], ['7d', 'Last week']];

export async function fleetPage({ el, signal, link }) {
  const select = h('select', { id: 'fleet-range', 'aria-label': 'Range' }, RANGES.map(([v, label]) => h('option', { value: v }, label)));
  select.value = '24h';
  const body = h('div', { id: 'fleet' }, h('p', { class: 'muted' }, 'Loading…'));
  select.addEventListener('change', load);
  replace(el, h('h1', null, 'Fleet'), h('div', { class: 'actions' }, select), body);

  async function load() {
    try {
      const f = await api('GET', `/fleet?range=${select.value}`);
      if (!signal.aborted) render(f);
    } catch (err) {
      if (!signal.aborted) replace(body, h('p', { class: 'error', role: 'alert' }, `Could not load the fleet view: ${err.message}`));
    }
  }

  const device = (serial) => link(`/console/devices/${enc(serial)}?tab=diagnostics`, serial);
  const table = (id, rows, head, row) => (rows.length === 0 ? h('p', { class: 'muted' }, 'None.')
    : h('table', { class: 'list', id }, h('thead', null, h('tr', null, head.map((t) => h('th', null, t)))), h('tbody', null, rows.map(row))));

  function render(f) {
    replace(body,
      h('h2', null, 'Gone silent'),
      h('p', { class: 'muted' }, 'No request for longer than five of their usual intervals (measured over the last 30 days), and at least 5 minutes.'),
      table('fleet-silent', f.silent, ['Device', 'Last seen', 'Usual interval'], (d) => h('tr', null,
        h('td', null, device(d.serial)), h('td', null, time(d.lastSeen)), h('td', null, `${Math.round(d.intervalS)} s`))),
      h('h2', null, 'Most rejections'),
      table('fleet-rejected', f.mostRejected, ['Device', 'Rejected requests', 'Last seen'], (d) => h('tr', null,
        h('td', null, device(d.serial)), h('td', { class: 'num' }, d.requests), h('td', null, time(d.lastSeen)))),
      h('h2', null, 'Serials not provisioned'),
      table('fleet-unknown', f.unknown, ['Serial', 'Requests', 'First seen', 'Last seen'], (d) => h('tr', null,
        h('td', null, h('code', null, d.serial)), h('td', { class: 'num' }, d.requests), h('td', null, time(d.firstSeen)), h('td', null, time(d.lastSeen)))),
      f.unknownUntracked > 0 ? h('p', { class: 'muted', id: 'fleet-untracked' },
        `${f.unknownUntracked} more requests from serials not tracked by name (each ingest-api copy tracks 256 a minute).`) : null,
      h('h2', null, 'Requests that named no serial'),
      h('p', { class: 'muted' }, 'For example not JSON, no serial, too large with no serial found, too slow, or from an address refused for its failures.'),
      table('fleet-unnamed', f.unnamed, ['Answer', 'Requests'], (c) => h('tr', { 'data-kind': c.kind },
        h('td', null, KINDS[c.kind] || c.kind), h('td', { class: 'num' }, c.requests))));
  }

  await load();
}
