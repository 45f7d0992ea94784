// A login this tab began. The token goes to fly's listener, and a token
// handed back in the address's fragment is taken, only for a login that a
// person began in this very tab: that is kept in sessionStorage, which is
// the tab's own (a page another site opens, or a link opened in a new tab,
// starts without it), and a login is used once.

const KEY = 'porter.login';
// As long as the server keeps a single sign-on's state.
export const LOGIN_TTL_MS = 10 * 60 * 1000;

function randomNonce() {
  const b = new Uint8Array(24);
  crypto.getRandomValues(b);
  return btoa(String.fromCharCode(...b)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function read(store, now) {
  let v;
  try { v = JSON.parse(store.getItem(KEY) || 'null'); } catch (_) { v = null; }
  if (!v || typeof v !== 'object' || typeof v.at !== 'number' || now - v.at > LOGIN_TTL_MS || v.at > now) return null;
  return v;
}

// beginLogin records that this tab begins a login (for fly on flyPort, if
// set) and returns the nonce that single sign-on carries there and back.
export function beginLogin(flyPort, store = sessionStorage, now = Date.now()) {
  const nonce = randomNonce();
  store.setItem(KEY, JSON.stringify({ nonce, flyPort: flyPort || '', at: now }));
  return nonce;
}

// acceptFragmentToken says whether a token handed back with nonce belongs
// to the login this tab began; the nonce is good once.
export function acceptFragmentToken(nonce, store = sessionStorage, now = Date.now()) {
  const v = read(store, now);
  if (!v || !v.nonce || !nonce || v.nonce !== nonce) return false;
  if (v.flyPort) store.setItem(KEY, JSON.stringify({ ...v, nonce: '' })); // fly's hand-off still to come
  else store.removeItem(KEY);
  return true;
}

// claimFlyHandoff says whether this tab began a login for fly on port; it
// may hand the token over once.
export function claimFlyHandoff(port, store = sessionStorage, now = Date.now()) {
  const v = read(store, now);
  if (!v || !port || v.flyPort !== port) return false;
  store.removeItem(KEY);
  return true;
}
