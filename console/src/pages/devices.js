// /console/devices: the device list, searched by serial prefix, a page at a
// time; and the form that creates a device.
import { h, replace, time } from '../dom.js';
import { api, enc, session } from '../api.js';
import { deviceForm } from './deviceform.js';

const PAGE = 50;

export function devicesPage({ el, signal, navigate, link, params }) {
  const prefix = params.get('q') || '';
  const search = h('input', { type: 'search', id: 'device-search', placeholder: 'Serial starts with…', value: prefix, 'aria-label': 'Search by serial' });
  const rows = h('tbody');
  const status = h('p', { class: 'muted', role: 'status' });
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'More devices');
  const formSlot = h('div');
  let cursor = '';

  async function load(reset) {
    if (reset) { cursor = ''; replace(rows); }
    replace(status, 'Loading…');
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (search.value) q.set('prefix', search.value);
    if (cursor) q.set('cursor', cursor);
    try {
      const page = await api('GET', `/devices?${q}`);
      if (signal.aborted) return;
      for (const d of page.devices) {
        const connected = d.inputs.filter((i) => i.entity).length;
        rows.append(h('tr', null,
          h('td', null, link(`/console/devices/${enc(d.serial)}`, d.serial)),
          h('td', null, d.connectionType),
          h('td', null, `${d.inputs.length} (${connected} connected)`),
          h('td', null, d.timestampInput || '—'),
          h('td', null, time(d.lastMessageAt))));
      }
      cursor = page.nextCursor || '';
      more.hidden = !cursor;
      const n = rows.children.length;
      replace(status, n === 0 ? (search.value ? 'No device has a serial starting with that.' : 'No devices yet: create one.') : `${n} device${n === 1 ? '' : 's'}${cursor ? ' so far' : ''}.`);
      if (page.lastMessageError) status.append(` Last message times unavailable: ${page.lastMessageError}`);
    } catch (err) {
      if (!signal.aborted) replace(status, `Could not list devices: ${err.message}`);
    }
  }

  let timer;
  search.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const q = search.value ? `?q=${enc(search.value)}` : '';
      history.replaceState(null, '', `/console/devices${q}`);
      load(true);
    }, 250);
  });
  more.addEventListener('click', () => load(false));

  const create = h('button', {
    type: 'button',
    onclick: () => {
      replace(formSlot, deviceForm({
        onSaved: (d) => navigate(`/console/devices/${enc(d.serial)}`),
        onCancel: () => replace(formSlot),
      }));
    },
  }, 'New device');

  replace(el,
    h('div', { class: 'titlebar' }, h('h1', null, 'Devices'), session.may('operator') ? create : null),
    formSlot,
    search,
    h('table', { class: 'list', id: 'devices' },
      h('thead', null, h('tr', null, h('th', null, 'Serial'), h('th', null, 'Connection'), h('th', null, 'Inputs'), h('th', null, 'Timestamp input'), h('th', null, 'Last message'))),
      rows),
    status,
    more);
  load(true);
}
