// The device's Diagnostics tab: "why isn't my data showing?". Answers by
// kind (rejections that never reached storage included), the latest
// rejections, keys the device sends that match no connected input (with a
// "Map this key" action for operators, then a way to the Backfill tab for
// the messages it sent before), how late its readings arrive.
// Everything the device sent (keys, values, error texts) is rendered as
// text.
import { h, replace, time } from '../dom.js';
import { api, enc, session } from '../api.js';

const RANGES = [['1h', 'Last hour'], ['24h', 'Last day'], ['7d', 'Last week']];

// What each kind of answer means to an operator.
export const KINDS = {
  stored: 'stored',
  partly_stored: 'backlog partly stored',
  no_connections: 'no input connected (422)',
  invalid_token: 'wrong token (401)',
  mqtt_device: 'MQTT-type device posting over HTTP (401)',
  rate_limited: 'rate limited (429)',
  payload_too_large: 'too large (413)',
  too_many_messages: 'too many messages (413)',
  overloaded: 'not accepted: service busy (503)',
  processing_failed: 'not accepted (503)',
  storage_failed: 'storage failed (503)',
  invalid_format: 'not JSON (400)',
  invalid_data: 'data not an object (400)',
  missing_token: 'no token (401)',
  body_timeout: 'body too slow (408)',
  source_refused: 'address refused (429)',
};

export function diagnosticsPanel(panel, d, { signal, mapped, onDevice, onBackfill }) {
  const body = h('div', { id: 'diagnostics' }, h('p', { class: 'muted' }, 'Loading…'));
  // Values of a key connected just now are stored from now on; those it
  // sent before are in the raw messages, for a backfill.
  const note = mapped == null ? null : h('p', { class: 'card', id: 'mapped-note', role: 'status' },
    h('code', null, mapped), ' is connected: its values are stored from now on. Those sent before are in the kept messages. ',
    h('button', { type: 'button', onclick: onBackfill }, 'Backfill them'));
  const select = h('select', { id: 'diag-range', 'aria-label': 'Range' }, RANGES.map(([v, label]) => h('option', { value: v }, label)));
  select.value = '24h';
  select.addEventListener('change', load);
  replace(panel, note, h('div', { class: 'actions' }, select, h('button', { type: 'button', class: 'secondary', onclick: load }, 'Refresh')), body);
  load();

  async function load() {
    try {
      const g = await api('GET', `/devices/${enc(d.serial)}/diagnostics?range=${select.value}`);
      if (!signal.aborted) render(g);
    } catch (err) {
      if (!signal.aborted) replace(body, h('p', { class: 'error', role: 'alert' }, `Could not load the diagnostics: ${err.message}`));
    }
  }

  function render(g) {
    const rt = g.readingTime;
    replace(body,
      h('dl', { class: 'facts' },
        h('dt', null, 'Last seen'), h('dd', { id: 'diag-last-seen' }, time(g.lastSeen), g.lastKind ? ` (${KINDS[g.lastKind] || g.lastKind})` : null)),
      h('h2', null, 'Requests by answer'),
      g.counts.length === 0 ? h('p', { class: 'muted' }, 'Nothing in this range. Counts are up to 10 s behind.')
        : h('table', { class: 'list', id: 'diag-counts' },
          h('thead', null, h('tr', null, h('th', null, 'Answer'), h('th', null, 'Requests'), h('th', null, 'Readings'))),
          h('tbody', null, g.counts.map((c) => h('tr', { 'data-kind': c.kind },
            h('td', null, KINDS[c.kind] || c.kind), h('td', { class: 'num' }, c.requests), h('td', { class: 'num' }, c.readings))))),
      h('h2', null, 'Latest rejections'),
      g.rejections.length === 0 ? h('p', { class: 'muted' }, 'None.')
        : h('table', { class: 'list', id: 'diag-rejections' },
          h('thead', null, h('tr', null, h('th', null, 'Time'), h('th', null, 'Message'), h('th', null, 'Error'), h('th', null, 'From'))),
          h('tbody', null, g.rejections.map((r) => h('tr', null,
            h('td', null, time(r.at)), h('td', null, r.message), h('td', { class: 'wrap' }, r.error || ''), h('td', null, r.source || ''))))),
      h('h2', null, 'Keys that match no connected input'),
      // Those connected since (here, a moment ago) are left out.
      unmatched(g.unmatchedKeys.filter((k) => !d.inputs.some((i) => i.name === k.key && i.entity))),
      h('h2', null, 'Reading time'),
      h('dl', { class: 'facts', id: 'diag-reading-time' },
        h('dt', null, 'Messages stored'), h('dd', null, `${rt.messages} (${rt.timed} at a time the device sent)`),
        rt.timed > 0 ? [
          h('dt', null, 'Late by (receive − reading)'),
          h('dd', null, `median ${dur(rt.lateP50Ms)}, p99 ${dur(rt.lateP99Ms)}, most ${dur(rt.lateMaxMs)}`)] : null,
        h('dt', null, 'Stored at receive time'),
        h('dd', null, rt.atReceive.length === 0 ? 'none' : h('ul', null, rt.atReceive.map((n) => h('li', null, `${n.count} × ${n.note}`))))));
  }

  function unmatched(keys) {
    if (keys.length === 0) return h('p', { class: 'muted' }, 'None: every key the device sends is connected, or it sent none.');
    return h('table', { class: 'list', id: 'diag-keys' },
      h('thead', null, h('tr', null, h('th', null, 'Key'), h('th', null, 'Times'), h('th', null, 'Last value'), h('th', null, 'Last sent'), h('th'))),
      h('tbody', null, keys.map((k) => {
        const slot = h('td');
        const button = () => h('button', { type: 'button', class: 'secondary', onclick: () => replace(slot, mapForm(k.key, () => replace(slot, button()))) }, 'Map this key');
        if (session.may('operator')) slot.append(button());
        return h('tr', { 'data-key': k.key },
          h('td', null, h('code', null, k.key)), h('td', { class: 'num' }, k.count), h('td', null, h('code', null, k.lastValue)), h('td', null, time(k.lastAt)), slot);
      })));
  }

  // mapForm connects key to an entity input: the device's record with the
  // key added as an input (or its entity set, if it is an input already).
  function mapForm(key, cancel) {
    const entity = h('input', { 'aria-label': 'Entity', class: 'map-entity', required: true, maxLength: 128, placeholder: 'entity' });
    const entityInput = h('input', { 'aria-label': 'Entity input', class: 'map-entity-input', maxLength: 128, value: key });
    const status = h('span', { class: 'error', role: 'alert' });
    return h('form', {
      class: 'inline',
      onsubmit: async (e) => {
        e.preventDefault();
        const inputs = d.inputs.filter((i) => i.name !== key);
        inputs.push({ name: key, entity: entity.value.trim(), entityInput: entityInput.value.trim() || key });
        const record = { connectionType: d.connectionType, inputs };
        if (d.timestampInput) record.timestampInput = d.timestampInput;
        try {
          onDevice(await api('PUT', `/devices/${enc(d.serial)}`, record), key);
        } catch (err) { replace(status, `Not saved: ${err.message}`); }
      },
    }, entity, entityInput, h('button', { type: 'submit' }, 'Connect'), h('button', { type: 'button', class: 'secondary', onclick: cancel }, 'Cancel'), status);
  }
}

function dur(ms) {
  const a = Math.abs(ms);
  const s = a < 1000 ? `${a} ms` : a < 120000 ? `${(a / 1000).toFixed(1)} s` : a < 7200000 ? `${Math.round(a / 60000)} min` : `${(a / 3600000).toFixed(1)} h`;
  return ms < 0 ? `${s} early` : s;
}
