// /console/keys (admins): the workspace's keys by name and role; create one
// (its secret is shown once) or revoke one.
import { h, replace, time } from '../dom.js';
import { api, enc } from '../api.js';

export function keysPage({ el, signal }) {
  const rows = h('tbody');
  const status = h('p', { class: 'muted', role: 'status' });
  const shown = h('div', { id: 'new-key', role: 'status' });
  const name = h('input', { id: 'key-name', required: true, maxLength: 64, autocomplete: 'off' });
  const role = h('select', { id: 'key-role' }, ['viewer', 'operator', 'admin'].map((r) => h('option', { value: r }, r)));
  const expires = h('input', { id: 'key-expires', type: 'datetime-local' });
  const formStatus = h('p', { class: 'error', role: 'alert' });

  async function load() {
    try {
      const { keys } = await api('GET', '/keys');
      if (signal.aborted) return;
      replace(rows, keys.map((k) => {
        const revoke = h('button', {
          type: 'button', class: 'danger',
          onclick: () => confirmRevoke(revoke, k.name),
        }, 'Revoke');
        return h('tr', { 'data-key': k.name },
          h('td', null, k.name), h('td', null, k.role), h('td', null, k.expires ? time(k.expires) : h('span', { class: 'muted' }, 'never')),
          h('td', null, time(k.created)), h('td', null, k.createdBy), h('td', null, revoke));
      }));
      replace(status, keys.length === 0 ? 'No named keys yet: only the bootstrap ADMIN_TOKEN signs in.' : `${keys.length} key${keys.length === 1 ? '' : 's'}.`);
    } catch (err) {
      if (!signal.aborted) replace(status, `Could not list keys: ${err.message}`);
    }
  }

  function confirmRevoke(button, keyName) {
    const box = h('span', { class: 'confirm' }, `Revoke ${keyName}? It is refused at once. `,
      h('button', {
        type: 'button', class: 'danger',
        onclick: async () => {
          try { await api('DELETE', `/keys/${enc(keyName)}`); replace(shown); load(); } catch (err) { replace(status, `Revoke failed: ${err.message}`); }
        },
      }, 'Revoke key'),
      h('button', { type: 'button', class: 'secondary', onclick: () => box.replaceWith(button) }, 'Cancel'));
    button.replaceWith(box);
  }

  const form = h('form', {
    class: 'card',
    onsubmit: async (e) => {
      e.preventDefault();
      replace(formStatus);
      const body = { name: name.value.trim(), role: role.value };
      if (expires.value) body.expires = new Date(expires.value).toISOString();
      try {
        const { key, secret } = await api('POST', '/keys', body);
        replace(shown, h('p', null, 'Key ', h('strong', null, key.name), ' (', key.role, '): ', h('code', { class: 'key-secret' }, secret),
          '. Copy it now: it is not shown again.'));
        name.value = '';
        load();
      } catch (err) {
        replace(formStatus, `Not created: ${err.message}`);
      }
    },
  },
  h('h2', null, 'New key'),
  h('label', { for: 'key-name' }, 'Name (a person or a script)'), name,
  h('label', { for: 'key-role' }, 'Role'), role,
  h('label', { for: 'key-expires' }, 'Expires (optional)'), expires,
  h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create key')),
  formStatus);

  replace(el,
    h('h1', null, 'Keys'),
    h('p', { class: 'muted' }, 'viewer reads; operator also changes devices, mappings and tokens; admin also manages keys and reads the audit trail.'),
    shown,
    h('table', { class: 'list', id: 'keys' },
      h('thead', null, h('tr', null, h('th', null, 'Name'), h('th', null, 'Role'), h('th', null, 'Expires'), h('th', null, 'Created'), h('th', null, 'By'), h('th'))),
      rows),
    status,
    form);
  load();
}
