// The workspace API, with the admin token from session storage as a Bearer
// header. The token is never put in a URL.

const KEY = 'devicehub.console.adminToken';
const WHO = 'devicehub.console.who';
const RANK = { viewer: 1, operator: 2, admin: 3 };

// session is the signed-in key and who it is ({name, role} from
// /whoami), in this tab's session storage until sign-out.
export const session = {
  get token() { return sessionStorage.getItem(KEY) || ''; },
  get who() { try { return JSON.parse(sessionStorage.getItem(WHO)) || {}; } catch { return {}; } },
  set(token, who) { sessionStorage.setItem(KEY, token); sessionStorage.setItem(WHO, JSON.stringify(who)); },
  clear() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(WHO); },
  // may reports whether the key's role reaches role: the console hides
  // what it may not do (the service refuses it with 403 anyway).
  may(role) { return (RANK[this.who.role] || 0) >= RANK[role]; },
};

export class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.error || body.message)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

let onUnauthorized = () => {};
export function whenUnauthorized(fn) { onUnauthorized = fn; }

// api calls the workspace API: path is below /api/v1/admin.
export async function api(method, path, body, token = session.token) {
  const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(`/api/v1/admin${path}`, {
      method, headers, cache: 'no-store', credentials: 'omit',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, { error: `the service is unreachable (${e.message})` });
  }
  let data = null;
  if (res.status !== 204) {
    try { data = await res.json(); } catch { data = null; }
  }
  if (res.status === 401) {
    onUnauthorized();
    throw new ApiError(401, data);
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

export const enc = encodeURIComponent;
