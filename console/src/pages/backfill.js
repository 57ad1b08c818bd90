// The device's Backfill tab: after its mapping is added or changed, apply
// it to the raw messages the service kept, over a time range. Operators
// start and cancel backfills; everyone sees the device's latest ones with
// their progress, refreshed every 2 s while one is queued or running, and
// no longer once the tab is left. Serials, input names and error texts are
// rendered as text.
import { h, replace, time, localInput } from '../dom.js';
import { api, enc, session } from '../api.js';

const POLL_MS = 2000;
const PRESETS = [['Last 24 h', 86400e3], ['Last 7 days', 7 * 86400e3], ['Last 30 days', 30 * 86400e3]];
const LIVE = new Set(['queued', 'running']);

export function backfillPanel(panel, d, { signal }) {
  const path = `/devices/${enc(d.serial)}/backfills`;
  const rows = h('tbody');
  const table = h('table', { class: 'list', id: 'backfills', hidden: true },
    h('thead', null, h('tr', null, ['State', 'Range', 'Progress', 'Messages', 'Readings', 'Skipped', 'Started by', 'Inputs applied', ''].map((t) => h('th', null, t)))),
    rows);
  const status = h('p', { class: 'muted', role: 'status', id: 'backfill-status' }, 'Loading…');
  const problem = h('p', { class: 'error', role: 'alert', id: 'backfill-error' });
  let timer = null;
  let live = false;
  let loads = 0; // a slower earlier answer never overwrites a later one
  signal.addEventListener('abort', () => clearTimeout(timer));

  async function load() {
    clearTimeout(timer);
    const seq = ++loads;
    try {
      const { backfills } = await api('GET', path);
      if (signal.aborted || seq !== loads) return;
      live = backfills.some((b) => LIVE.has(b.state));
      table.hidden = backfills.length === 0;
      replace(rows, backfills.map(row));
      replace(status, backfills.length === 0 ? 'No backfills yet.'
        : `The latest ${backfills.length}, newest first.${live ? ` Refreshing every ${POLL_MS / 1000} s while one is queued or running; updated ${new Date().toLocaleTimeString()}.` : ''}`);
    } catch (err) {
      if (signal.aborted || seq !== loads) return;
      replace(status, `Could not load the backfills: ${err.message}`);
    }
    if (live) timer = setTimeout(load, POLL_MS);
  }

  function row(b) {
    const share = Math.max(0, Math.min(1, Number(b.progress) || 0));
    const ended = !LIVE.has(b.state);
    const cancel = !ended && !b.cancelRequested && session.may('operator') ? h('button', {
      type: 'button', class: 'secondary',
      onclick: async () => {
        cancel.disabled = true;
        replace(problem);
        try { await api('DELETE', `${path}/${enc(b.id)}`); } catch (err) { replace(problem, `Not cancelled: ${err.message}`); }
        load();
      },
    }, 'Cancel') : null;
    return h('tr', { 'data-backfill': b.id, 'data-state': b.state },
      h('td', { class: 'bf-state' },
        h('span', { class: `state ${b.state}` }, b.state),
        !ended && b.cancelRequested ? h('span', { class: 'muted' }, ' (cancelling)') : null,
        ended && b.finished ? h('div', { class: 'muted' }, time(b.finished)) : null,
        b.error ? h('div', { class: 'error bf-error' }, b.error) : null),
      h('td', null, time(b.from), ' – ', time(b.to)),
      h('td', { class: 'bf-progress' }, h('progress', { max: 1, value: share, 'aria-label': 'Progress' }), ` ${Math.floor(share * 100)}%`),
      h('td', { class: 'num bf-messages' }, b.messages ?? 0, b.unreadable > 0 ? h('div', { class: 'muted' }, `${b.unreadable} not JSON objects`) : null),
      h('td', { class: 'num bf-readings' }, b.readings ?? 0),
      h('td', { class: 'num bf-skipped' }, b.skipped ?? 0),
      h('td', null, b.createdBy || '', h('div', { class: 'muted' }, time(b.created))),
      h('td', { class: 'bf-inputs' }, (b.inputs || []).length === 0 ? h('span', { class: 'muted' }, 'none connected')
        : b.inputs.map((i) => h('div', null, h('code', null, i.name), ' → ', `${i.entity} / ${i.entityInput}`))),
      h('td', null, cancel));
  }

  replace(panel,
    session.may('operator') ? startForm(d, path, problem, load) : h('p', { class: 'muted' }, 'Operators start and cancel backfills.'),
    problem,
    h('h2', null, 'Backfills'),
    status,
    table);
  load();
}

// startForm asks for the range (the end empty: now) and starts a backfill
// with the device's connections as they are now.
function startForm(d, path, problem, started) {
  const from = h('input', { type: 'datetime-local', id: 'backfill-from', step: 1, required: true, value: localInput(Date.now() - PRESETS[0][1]) });
  const to = h('input', { type: 'datetime-local', id: 'backfill-to', step: 1 });
  const start = h('button', { type: 'submit' }, 'Start backfill');
  const connected = d.inputs.filter((i) => i.entity);
  return h('form', {
    class: 'card', id: 'backfill-form',
    onsubmit: async (e) => {
      e.preventDefault();
      replace(problem);
      const f = new Date(from.value), t = to.value ? new Date(to.value) : null;
      if (isNaN(f) || (t && isNaN(t))) { replace(problem, 'Choose when the range starts.'); return; }
      if (t && !(f < t)) { replace(problem, 'The start must be before the end.'); return; }
      const body = { from: f.toISOString() };
      if (t) body.to = t.toISOString();
      start.disabled = true;
      try {
        await api('POST', path, body);
      } catch (err) {
        replace(problem, `Not started: ${err.message}`);
      } finally {
        start.disabled = false;
      }
      started();
    },
  },
  h('h2', null, 'Backfill from raw messages'),
  h('p', { class: 'muted' }, 'Applies the inputs connected now to the messages the service kept from this device in the range: values already stored are skipped, not written twice.'),
  h('p', { id: 'backfill-mapping' }, connected.length === 0 ? h('span', { class: 'error' }, 'No input is connected: a backfill would store nothing.')
    : ['Connected: ', connected.map((i, n) => [n ? ', ' : '', h('code', null, i.name), ` → ${i.entity} / ${i.entityInput}`])]),
  h('div', { class: 'ranges', role: 'group', 'aria-label': 'Range' },
    PRESETS.map(([label, ms]) => h('button', {
      type: 'button', class: 'secondary',
      onclick: () => { from.value = localInput(Date.now() - ms); to.value = ''; },
    }, label)),
    h('span', { class: 'custom-range' },
      h('label', { for: 'backfill-from' }, 'From'), from,
      h('label', { for: 'backfill-to' }, 'To (empty: now)'), to)),
  h('div', { class: 'actions' }, start));
}
