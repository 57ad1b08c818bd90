// /console/audit (admins): the audit trail, newest first, filtered by key,
// action and target (kept in the address), a page at a time. Records are
// device data and names: shown as text only.
import { h, replace, time } from '../dom.js';
import { api } from '../api.js';

const PAGE = 50;

export function auditPage({ el, signal, params }) {
  const rows = h('tbody');
  const status = h('p', { class: 'muted', role: 'status' });
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Older changes');
  const filter = (id, label, value) => {
    const input = h('input', { id, name: id, value: value || '', autocomplete: 'off' });
    return [h('label', { for: id, class: 'inline' }, label), input];
  };
  const [actorLabel, actor] = filter('audit-actor', 'Key', params.get('actor'));
  const [actionLabel, action] = filter('audit-action', 'Action', params.get('action'));
  const [targetLabel, target] = filter('audit-target', 'Target', params.get('target'));
  let next = '';

  async function load(reset) {
    if (reset) { next = ''; replace(rows); }
    const q = new URLSearchParams({ limit: String(PAGE) });
    for (const [k, input] of [['actor', actor], ['action', action], ['target', target]]) if (input.value.trim()) q.set(k, input.value.trim());
    if (next) q.set('before', next);
    replace(status, 'Loading…');
    try {
      const page = await api('GET', `/audit?${q}`);
      if (signal.aborted) return;
      for (const r of page.records) {
        rows.append(h('tr', { 'data-seq': String(r.seq) },
          h('td', null, time(r.at)), h('td', null, r.actor, h('span', { class: 'muted' }, ` ${r.role}`)), h('td', { class: 'audit-action' }, r.action),
          h('td', null, r.target), h('td', null, r.source),
          h('td', null, r.before || r.after ? h('details', null, h('summary', null, 'before / after'),
            h('pre', { class: 'payload' }, `before: ${JSON.stringify(r.before ?? null, null, 2)}\nafter: ${JSON.stringify(r.after ?? null, null, 2)}`)) : null)));
      }
      next = page.next || '';
      more.hidden = !next;
      const n = rows.children.length;
      replace(status, n === 0 ? 'No changes match.' : `${n} change${n === 1 ? '' : 's'}${next ? ' so far' : ''}, newest first.`);
    } catch (err) {
      if (!signal.aborted) replace(status, `Could not read the audit trail: ${err.message}`);
    }
  }

  const form = h('form', {
    class: 'actions',
    onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const [k, input] of [['actor', actor], ['action', action], ['target', target]]) if (input.value.trim()) q.set(k, input.value.trim());
      history.replaceState(null, '', `/console/audit${q.size ? `?${q}` : ''}`);
      load(true);
    },
  }, actorLabel, actor, actionLabel, action, targetLabel, target, h('button', { type: 'submit' }, 'Filter'));
  more.addEventListener('click', () => load(false));

  replace(el,
    h('h1', null, 'Audit trail'),
    h('p', { class: 'muted' }, 'Every change to the workspace: who (the key), what (before and after, tokens by name only), when, and from where.'),
    form,
    h('table', { class: 'list', id: 'audit' },
      h('thead', null, h('tr', null, h('th', null, 'When'), h('th', null, 'Key'), h('th', null, 'Action'), h('th', null, 'Target'), h('th', null, 'From'), h('th'))),
      rows),
    status,
    more);
  load(true);
}
