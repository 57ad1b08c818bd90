// The workspace API, with the admin token from session storage as a Bearer
// header. The token is never put in a URL.

const KEY = 'devicehub.console.adminToken';

export const session = {
  get token() { return sessionStorage.getItem(KEY) || ''; },
  set(token) { sessionStorage.setItem(KEY, token); },
  clear() { sessionStorage.removeItem(KEY); },
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
