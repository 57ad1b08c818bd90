// The workspace console: sign-in, devices, a device with its Messages tab,
// entities, and an entity input's chart. A router over history.pushState;
// every page is also a server path (ingest-api answers this page for all of
// /console/*), so deep links and reloads work.
import 'uplot/dist/uPlot.min.css';
import './app.css';
import { h, replace } from './dom.js';
import { api, session, whenUnauthorized, ApiError } from './api.js';
import { devicesPage } from './pages/devices.js';
import { fleetPage } from './pages/fleet.js';
import { devicePage } from './pages/device.js';
import { entitiesPage } from './pages/entities.js';
import { entityPage } from './pages/entity.js';
import { keysPage } from './pages/keys.js';
import { auditPage } from './pages/audit.js';

const root = document.getElementById('app');
const BASE = '/console';

const routes = [
  [/^\/?$/, () => { navigate(`${BASE}/devices`, { replace: true }); return null; }],
  [/^\/devices\/?$/, () => devicesPage],
  [/^\/fleet\/?$/, () => fleetPage],
  [/^\/devices\/([^/]+)\/?$/, (m) => (ctx) => devicePage(ctx, decodeURIComponent(m[1]))],
  [/^\/entities\/?$/, () => entitiesPage],
  [/^\/entities\/([^/]+)\/inputs\/([^/]+)\/?$/, (m) => (ctx) => entityPage(ctx, decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^\/keys\/?$/, () => keysPage],
  [/^\/audit\/?$/, () => auditPage],
];

let current = null; // the page's AbortController: timers and fetches stop with it

export function navigate(path, { replace: rep = false } = {}) {
  if (rep) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

// link is an anchor the router follows without reloading the page.
export function link(path, ...children) {
  return h('a', {
    href: path,
    onclick: (e) => {
      if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
      e.preventDefault();
      navigate(path);
    },
  }, ...children);
}

function render(notice) {
  if (current) current.abort();
  current = new AbortController();
  if (!session.token) {
    replace(root, signIn(notice));
    return;
  }
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : location.pathname;
  const main = h('main', { id: 'main' });
  replace(root, header(), main);
  for (const [re, page] of routes) {
    const m = path.match(re);
    if (!m) continue;
    const fn = page(m);
    if (fn) fn({ el: main, signal: current.signal, navigate, link, params: new URLSearchParams(location.search) });
    return;
  }
  replace(main, h('h1', null, 'Not found'), h('p', null, 'No console page at this address. ', link(`${BASE}/devices`, 'Go to the devices.')));
}

function header() {
  const here = location.pathname;
  const nav = (path, label) => {
    const a = link(path, label);
    if (here.startsWith(path)) a.setAttribute('aria-current', 'page');
    return a;
  };
  return h('header', { class: 'top' },
    h('span', { class: 'brand' }, 'Device Event Service'),
    h('nav', null, nav(`${BASE}/devices`, 'Devices'), nav(`${BASE}/fleet`, 'Fleet'), nav(`${BASE}/entities`, 'Entities'),
      session.may('admin') ? [nav(`${BASE}/keys`, 'Keys'), nav(`${BASE}/audit`, 'Audit')] : null),
    h('span', { class: 'muted', id: 'who' }, `${session.who.name || ''} (${session.who.role || '?'})`),
    h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Sign out'));
}

function signOut() {
  session.clear();
  render();
}

function signIn(notice) {
  const input = h('input', { id: 'admin-token', name: 'admin-token', type: 'password', autocomplete: 'current-password', required: true });
  const status = h('p', { class: 'error', role: 'alert' }, notice || '');
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h('form', {
    class: 'signin',
    onsubmit: async (e) => {
      e.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      button.disabled = true;
      replace(status, '');
      try {
        const who = await api('GET', '/whoami', undefined, token);
        session.set(token, who);
        render();
      } catch (err) {
        replace(status, err instanceof ApiError && err.status === 401
          ? 'Wrong key: the service refused it.'
          : `Could not sign in: ${err.message}`);
        input.select();
      } finally {
        button.disabled = false;
      }
    },
  },
  h('h1', null, 'Sign in'),
  h('p', { class: 'muted' }, 'Sign in with a workspace key (dk_…) or the service\'s bootstrap ADMIN_TOKEN. It is kept in this tab\'s session storage until you sign out; the console shows what the key\'s role may do.'),
  h('label', { for: 'admin-token' }, 'Admin token'),
  input,
  button,
  status);
  queueMicrotask(() => input.focus());
  return h('main', { id: 'main', class: 'narrow' }, form);
}

// A token that stops working (changed on the server) signs the tab out.
whenUnauthorized(() => {
  if (!session.token) return;
  session.clear();
  render('The key was refused (revoked, expired or changed): sign in again.');
});

window.addEventListener('popstate', () => render());
render();
