// The login hand-off's rules (src/loginflow.js), with a storage of the
// test's own standing for the tab's sessionStorage.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { acceptFragmentToken, beginLogin, claimFlyHandoff, LOGIN_TTL_MS } from '../src/loginflow.js';

function storage() {
  const m = new Map();
  return { getItem: (k) => (m.has(k) ? m.get(k) : null), setItem: (k, v) => m.set(k, String(v)), removeItem: (k) => m.delete(k) };
}

test('a tab that began no login hands no token to fly and takes none from the fragment', () => {
  const s = storage();
  assert.equal(claimFlyHandoff('4321', s, 1000), false);
  assert.equal(acceptFragmentToken('any-nonce', s, 1000), false);
});

test("fly's login: the token goes to the port the login began for, once", () => {
  const s = storage();
  beginLogin('4321', s, 1000);
  assert.equal(claimFlyHandoff('1234', s, 2000), false, 'another port');
  assert.equal(claimFlyHandoff('4321', s, 2000), true);
  assert.equal(claimFlyHandoff('4321', s, 3000), false, 'a second time');
});

test('single sign-on: only the nonce this tab made, once; then fly gets the token', () => {
  const s = storage();
  const nonce = beginLogin('4321', s, 1000);
  assert.match(nonce, /^[A-Za-z0-9_-]{16,64}$/, 'the server accepts its form');
  assert.equal(acceptFragmentToken('made-up-nonce-000', s, 2000), false);
  assert.equal(acceptFragmentToken(nonce, s, 2000), true);
  assert.equal(acceptFragmentToken(nonce, s, 2000), false, 'replayed');
  assert.equal(claimFlyHandoff('4321', s, 3000), true);
});

test('a login older than the server keeps its state is over', () => {
  const s = storage();
  const nonce = beginLogin('', s, 1000);
  assert.equal(acceptFragmentToken(nonce, s, 1000 + LOGIN_TTL_MS + 1), false);
});
