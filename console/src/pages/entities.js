// /console/entities: every entity input the devices feed, with its latest
// value and time.
import { h, replace, time, valueText } from '../dom.js';
import { api, enc } from '../api.js';

export async function entitiesPage({ el, signal, link }) {
  const rows = h('tbody');
  const status = h('p', { class: 'muted', role: 'status' }, 'Loading…');
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'More entities');
  replace(el, h('h1', null, 'Entities'),
    h('table', { class: 'list', id: 'entities' },
      h('thead', null, h('tr', null, h('th', null, 'Entity'), h('th', null, 'Input'), h('th', null, 'Latest value'), h('th', null, 'Reading time'), h('th', null, 'Fed by'))),
      rows),
    status, more);
  let cursor = '';
  async function load() {
    const q = new URLSearchParams({ limit: '100' });
    if (cursor) q.set('cursor', cursor);
    try {
      const page = await api('GET', `/entities?${q}`);
      if (signal.aborted) return;
      for (const e of page.entities) {
        for (const i of e.inputs) {
          rows.append(h('tr', null,
            h('td', null, e.entity),
            h('td', null, link(`/console/entities/${enc(e.entity)}/inputs/${enc(i.input)}`, i.input)),
            h('td', { class: 'value' }, i.latest ? valueText(i.latest.value) : h('span', { class: 'muted' }, 'none yet')),
            h('td', null, i.latest ? time(i.latest.ts) : ''),
            h('td', null, i.feeds.map((f) => `${f.serial}: ${f.deviceInput}`).join(', '))));
        }
      }
      cursor = page.nextCursor || '';
      more.hidden = !cursor;
      replace(status, rows.children.length === 0 ? 'No entity inputs yet: connect a device input to an entity.' : '');
      if (page.latestError) status.append(`Latest values unavailable: ${page.latestError}`);
    } catch (err) {
      if (!signal.aborted) replace(status, `Could not list entities: ${err.message}`);
    }
  }
  more.addEventListener('click', load);
  load();
}
