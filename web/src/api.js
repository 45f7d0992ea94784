// The browser's client of the API fly uses. The token lives in localStorage
// and travels only in the Authorization header, never in a cookie: no
// request carries it unless this code adds it, so other sites cannot make
// the browser act for the user (no CSRF token is needed).
import { fetchEventSource } from '@microsoft/fetch-event-source';

const TOKEN_KEY = 'porter.token';

export function getToken() {
  return localStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) localStorage.setItem(TOKEN_KEY, t);
  else localStorage.removeItem(TOKEN_KEY);
}

export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra) {
  const h = Object.assign({ Accept: 'application/json' }, extra || {});
  const t = getToken();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function errorText(res) {
  const text = await res.text();
  try {
    const v = JSON.parse(text);
    if (v.errors && v.errors[0]) return v.errors[0].detail || v.errors[0].title;
    if (v.error_description) return v.error_description;
  } catch (_) { /* plain text */ }
  return text.trim() || res.statusText;
}

async function call(method, path, body, signal) {
  const opts = { method, headers: headers(), signal };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  if (res.status === 401 && getToken()) {
    // An expired or revoked token: forget it, so the UI shows the visitor's view.
    setToken('');
  }
  if (!res.ok) throw new APIError(res.status, await errorText(res));
  const text = await res.text();
  return { data: text ? JSON.parse(text) : null, res };
}

// api calls the API and returns its JSON (null for an empty answer).
export async function api(method, path, body) {
  return (await call(method, path, body)).data;
}

export const get = (path) => api('GET', path);

// getCancellable is get that signal (an AbortController's) cancels.
export const getCancellable = async (path, signal) => (await call('GET', path, undefined, signal)).data;

// parseLinks reads a Link header (RFC 8288, as the API pages lists) into
// rel -> the linked page's query (from=, to=, limit=).
export function parseLinks(header) {
  const out = {};
  for (const part of (header || '').split(',')) {
    const m = /<([^>]*)>\s*;\s*rel="?([^";]+)"?/.exec(part);
    if (!m) continue;
    try { out[m[2]] = new URL(m[1], location.origin).search.slice(1); } catch (_) { /* not a URL */ }
  }
  return out;
}

// getPage reads a page of a list: its items and the queries of its
// previous (newer) and next (older) pages.
export async function getPage(path) {
  const { data, res } = await call('GET', path);
  return { items: data || [], links: parseLinks(res.headers.get('Link')) };
}

// login runs the password grant fly runs (fly's public client id and secret).
export async function login(username, password) {
  const form = new URLSearchParams({
    grant_type: 'password', username, password,
    scope: 'openid profile email federated:id groups',
  });
  const res = await fetch('/sky/issuer/token', {
    method: 'POST',
    headers: { Authorization: 'Basic ' + btoa('fly:Zmx5'), 'Content-Type': 'application/x-www-form-urlencoded' },
    body: form,
  });
  if (!res.ok) throw new APIError(res.status, await errorText(res));
  const v = await res.json();
  setToken(v.access_token);
  return v.access_token;
}

export async function logout() {
  try { await api('GET', '/sky/logout'); } finally { setToken(''); }
}

// streamEvents follows a build's server-sent events; onEvent gets each
// event's JSON, onEnd the end of the build. It returns a stop function.
export function streamEvents(buildID, onEvent, onEnd, onError) {
  const ctrl = new AbortController();
  fetchEventSource(`/api/v1/builds/${buildID}/events`, {
    headers: headers({ Accept: 'text/event-stream' }),
    signal: ctrl.signal,
    openWhenHidden: true,
    async onopen(res) {
      if (!res.ok) throw new APIError(res.status, await errorText(res));
    },
    onmessage(msg) {
      if (msg.event === 'end') {
        onEnd();
        ctrl.abort();
        return;
      }
      // The event's id is its record's: a line is named by where it ends
      // (as the log's search names hits).
      if (msg.event === 'event' && msg.data) onEvent({ ...JSON.parse(msg.data), id: Number(msg.id) });
    },
    onclose() {
      // The server closed without "end": reconnect from the last id.
      throw new Error('retry');
    },
    onerror(err) {
      if (err instanceof APIError) {
        onError(err);
        throw err; // no retry
      }
      return 2000;
    },
  }).catch(() => {});
  return () => ctrl.abort();
}
