// /console/devices/{serial}: the device's overview (tokens, inputs, edit,
// delete), its Diagnostics tab, its Messages tab, refreshed every few
// seconds, and its Backfill tab.
import { h, replace, time } from '../dom.js';
import { api, enc, session } from '../api.js';
import { deviceForm } from './deviceform.js';
import { diagnosticsPanel } from './diagnostics.js';
import { backfillPanel } from './backfill.js';

const REFRESH_MS = 3000;
const MESSAGES = 50;

export async function devicePage({ el, signal, navigate, link, params }, serial) {
  replace(el, h('p', { class: 'muted' }, 'Loading…'));
  let device;
  try {
    device = await api('GET', `/devices/${enc(serial)}`);
  } catch (err) {
    if (signal.aborted) return;
    replace(el, h('h1', null, 'Device'), h('p', { class: 'error', role: 'alert' }, err.status === 404 ? 'No such device.' : `Could not load the device: ${err.message}`),
      h('p', null, link('/console/devices', 'Back to the devices')));
    return;
  }
  if (signal.aborted) return;
  render(device);

  // mapped: the key "Map this key" just connected.
  function render(d, mapped) {
    const tab = ['messages', 'diagnostics', 'backfill'].includes(params.get('tab')) ? params.get('tab') : 'overview';
    const panel = h('section', { id: `panel-${tab}`, role: 'tabpanel' });
    const tabButton = (name, label) => h('button', {
      type: 'button', role: 'tab', id: `tab-${name}`, 'aria-selected': String(tab === name),
      onclick: () => {
        const q = name === 'overview' ? '' : `?tab=${name}`;
        navigate(`/console/devices/${enc(d.serial)}${q}`, { replace: true });
      },
    }, label);
    replace(el,
      h('p', { class: 'crumbs' }, link('/console/devices', 'Devices'), ' / '),
      h('h1', { class: 'serial' }, d.serial),
      h('div', { role: 'tablist', class: 'tabs' }, tabButton('overview', 'Overview'), tabButton('diagnostics', 'Diagnostics'), tabButton('messages', 'Messages'), tabButton('backfill', 'Backfill')),
      panel);
    if (tab === 'messages') messages(panel, d);
    else if (tab === 'diagnostics') {
      diagnosticsPanel(panel, d, {
        signal, mapped,
        onDevice: (saved, key) => { device = saved; render(saved, key); },
        onBackfill: () => navigate(`/console/devices/${enc(d.serial)}?tab=backfill`, { replace: true }),
      });
    } else if (tab === 'backfill') backfillPanel(panel, d, { signal });
    else overview(panel, d);
  }

  function overview(panel, d) {
    const editSlot = h('div');
    const inputs = d.inputs.length === 0
      ? h('p', { class: 'muted' }, 'No inputs.')
      : h('table', { class: 'list', id: 'device-inputs' },
        h('thead', null, h('tr', null, h('th', null, 'Input'), h('th', null, 'Stored as'))),
        h('tbody', null, d.inputs.map((i) => h('tr', null,
          h('td', null, i.name, d.timestampInput === i.name ? h('span', { class: 'tag' }, 'timestamp') : null),
          h('td', null, i.entity
            ? link(`/console/entities/${enc(i.entity)}/inputs/${enc(i.entityInput)}`, `${i.entity} / ${i.entityInput}`)
            : h('span', { class: 'muted' }, 'not connected'))))));
    replace(panel,
      h('dl', { class: 'facts' },
        h('dt', null, 'Connection type'), h('dd', null, d.connectionType),
        h('dt', null, 'Timestamp input'), h('dd', null, d.timestampInput || h('span', { class: 'muted' }, 'none: readings are stored at their ts, else their receive time'))),
      h('h2', null, 'Access tokens'),
      tokens(d),
      h('h2', null, 'Inputs'),
      inputs,
      session.may('operator') ? h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: () => replace(editSlot, deviceForm({ existing: d, onSaved: (saved) => { device = saved; render(saved); }, onCancel: () => replace(editSlot) })) }, 'Edit'),
        deleteControl(d)) : null,
      editSlot);
  }

  // tokens lists the device's tokens by name (the primary first): each is
  // revealed on demand (the service records who asked), copied, promoted
  // or retired; a second one is added for a rotation with overlap.
  function tokens(d) {
    const notice = h('div', { id: 'new-token', role: 'status' });
    const rows = d.tokens.map((t) => tokenRow(d, t));
    const add = h('button', {
      type: 'button', class: 'secondary', disabled: d.tokens.length >= 2,
      title: d.tokens.length >= 2 ? 'A device holds two tokens: retire one first' : '',
      onclick: async () => {
        add.disabled = true;
        try {
          const t = await api('POST', `/devices/${enc(d.serial)}/tokens`, {});
          device = await api('GET', `/devices/${enc(d.serial)}`);
          render(device);
          const shown = document.getElementById('new-token');
          if (shown) {
            replace(shown, h('p', null, 'New token ', h('strong', null, t.name), ': ', h('code', { class: 'token-value' }, t.token),
              '. Both tokens authenticate until one is retired; Reveal shows it again.'));
          }
        } catch (err) {
          replace(notice, h('span', { class: 'error' }, `Could not add a token: ${err.message}`));
          add.disabled = false;
        }
      },
    }, 'Add token');
    return h('div', null,
      h('table', { class: 'list', id: 'device-tokens' },
        h('thead', null, h('tr', null, h('th', null, 'Token'), h('th', null, 'Created'), h('th', null, 'Value'), h('th'))),
        h('tbody', null, rows)),
      session.may('operator') ? h('div', { class: 'actions' }, add) : null,
      notice);
  }

  function tokenRow(d, t) {
    const masked = '\u2022'.repeat(12);
    const shown = h('code', { class: 'token-value' }, masked);
    const note = h('span', { class: 'muted', role: 'status' });
    let value = null;
    const fetchValue = async () => {
      if (value == null) value = (await api('POST', `/devices/${enc(d.serial)}/tokens/${enc(t.name)}/reveal`)).token;
      return value;
    };
    let visible = false;
    const reveal = h('button', {
      type: 'button', class: 'secondary',
      onclick: async () => {
        try {
          visible = !visible;
          replace(shown, visible ? await fetchValue() : masked);
          replace(reveal, visible ? 'Hide' : 'Reveal');
        } catch (err) { replace(note, `Reveal failed: ${err.message}`); }
      },
    }, 'Reveal');
    const copy = h('button', {
      type: 'button', class: 'secondary',
      onclick: async () => {
        try { await navigator.clipboard.writeText(await fetchValue()); replace(note, 'Copied.'); } catch { replace(note, 'Copy failed: reveal it and copy by hand.'); }
      },
    }, 'Copy');
    const change = async (method, path) => {
      device = await api(method, `/devices/${enc(d.serial)}/tokens/${enc(t.name)}${path}`);
      render(device);
    };
    const promote = t.primary ? null : h('button', {
      type: 'button', class: 'secondary',
      onclick: async () => { try { await change('POST', '/promote'); } catch (err) { replace(note, `Promote failed: ${err.message}`); } },
    }, 'Make primary');
    const retire = d.tokens.length < 2 ? null : h('button', {
      type: 'button', class: 'danger',
      onclick: () => confirmInline(retire, `Devices still sending ${t.name} will be refused. Retire it?`, 'Retire', () => change('DELETE', '')),
    }, 'Retire');
    return h('tr', { 'data-token': t.name },
      h('td', null, t.name, t.primary ? h('span', { class: 'tag' }, 'primary') : null),
      h('td', null, time(t.created)),
      h('td', { class: 'token' }, shown),
      h('td', null, session.may('operator') ? [reveal, copy, promote, retire, ' ', note] : h('span', { class: 'muted' }, 'operators reveal and rotate tokens')));
  }

  function deleteControl(d) {
    const del = h('button', {
      type: 'button', class: 'danger',
      onclick: () => confirmInline(del, `Delete device ${d.serial}? Its stored messages and values stay in ClickHouse.`, 'Delete', async () => {
        await api('DELETE', `/devices/${enc(d.serial)}`);
        navigate('/console/devices');
      }),
    }, 'Delete device');
    return del;
  }

  function messages(panel, d) {
    const list = h('ol', { class: 'messages', id: 'messages', reversed: true });
    const status = h('p', { class: 'muted', role: 'status' });
    const auto = h('input', { type: 'checkbox', id: 'auto-refresh', checked: true });
    const refresh = h('button', { type: 'button', class: 'secondary', onclick: () => load() }, 'Refresh');
    let timer = null;
    async function load() {
      clearTimeout(timer);
      try {
        const { messages: msgs } = await api('GET', `/devices/${enc(d.serial)}/messages?limit=${MESSAGES}`);
        if (signal.aborted) return;
        replace(list, msgs.map(messageItem));
        replace(status, msgs.length === 0 ? 'No messages yet.' : `The newest ${msgs.length} message${msgs.length === 1 ? '' : 's'}, newest first. Updated ${new Date().toLocaleTimeString()}.`);
      } catch (err) {
        if (!signal.aborted) replace(status, `Could not load messages: ${err.message}`);
      }
      if (!signal.aborted && auto.checked) timer = setTimeout(load, REFRESH_MS);
    }
    auto.addEventListener('change', () => (auto.checked ? load() : clearTimeout(timer)));
    signal.addEventListener('abort', () => clearTimeout(timer));
    replace(panel,
      h('div', { class: 'actions' }, refresh, h('label', { for: 'auto-refresh', class: 'inline' }, auto, ` Refresh every ${REFRESH_MS / 1000} s`)),
      status,
      list);
    load();
  }
}

function messageItem(m) {
  const stored = m.outcome === 'Message processed and data stored successfully';
  return h('li', { class: 'message', 'data-event-id': m.eventId },
    h('div', { class: 'meta' },
      h('span', null, 'Received ', time(m.receivedAt)),
      m.readingTime && m.readingTime !== m.receivedAt ? h('span', null, 'Reading time ', time(m.readingTime)) : null,
      m.token ? h('span', { class: 'token-name' }, 'Token ', m.token) : null,
      h('span', { class: stored ? 'outcome ok' : 'outcome' }, m.outcome)),
    m.timeNote ? h('p', { class: 'note' }, m.timeNote) : null,
    h('pre', { class: 'payload' }, JSON.stringify(m.payload, null, 2)));
}

// confirmInline replaces button with a question and two buttons until the
// user answers: no browser dialog.
function confirmInline(button, question, yes, action) {
  const status = h('span', { class: 'error', role: 'alert' });
  const box = h('span', { class: 'confirm' },
    h('span', null, question, ' '),
    h('button', {
      type: 'button', class: 'danger',
      onclick: async () => {
        try { await action(); } catch (err) { replace(status, ` Failed: ${err.message}`); }
      },
    }, yes),
    h('button', { type: 'button', class: 'secondary', onclick: () => box.replaceWith(button) }, 'Cancel'),
    status);
  button.replaceWith(box);
}
