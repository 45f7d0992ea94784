import { useEffect, useState } from 'preact/hooks';
import { get, getToken, login, setToken } from './api.js';
import { Layout } from './common.jsx';
import { acceptFragmentToken, beginLogin, claimFlyHandoff } from './loginflow.js';
import { navigate } from './router.js';

// Login is /login, also the page `fly login` without -u opens as
// /login?fly_port=N: after logging in, /fly_success hands fly the token.
export function Login() {
  const q = new URLSearchParams(location.search);
  const flyPort = q.get('fly_port');
  const [user, setUser] = useState('');
  const [password, setPassword] = useState('');
  const [err, setErr] = useState('');
  const [busy, setBusy] = useState(false);
  const [connectors, setConnectors] = useState([]);
  const [refused, setRefused] = useState(false);
  const done = () => {
    if (flyPort) navigate('/fly_success?fly_port=' + encodeURIComponent(flyPort), true);
    else navigate(safeRedirect(q.get('redirect')), true);
  };
  useEffect(() => {
    // Back from single sign-on: the server put the token in the fragment,
    // which no request carries. Keep it as a local login's, then go on.
    const h = new URLSearchParams(location.hash.slice(1));
    if (h.get('token')) {
      // Out of the address bar (and history) whether taken or not.
      history.replaceState(null, '', location.pathname + location.search);
      // Only the login this tab began: a link from elsewhere to
      // /login#token=… would otherwise log the user in as someone else.
      if (!acceptFragmentToken(h.get('tab_nonce'))) {
        setRefused(true);
        get('/sky/connectors').then((c) => setConnectors(c || []), () => setConnectors([]));
        return;
      }
      setToken(h.get('token'));
      // After this render's effects: the app's router listens from its own
      // effect, which runs after this one on the first render.
      setTimeout(done, 0);
      return;
    }
    get('/sky/connectors').then((c) => setConnectors(c || []), () => setConnectors([]));
  }, []);
  const ssoURL = (c, nonce) => {
    const p = new URLSearchParams();
    if (flyPort) p.set('fly_port', flyPort);
    else if (q.get('redirect')) p.set('redirect', safeRedirect(q.get('redirect')));
    if (nonce) p.set('tab_nonce', nonce);
    const qs = p.toString();
    return c.login_url + (qs ? '?' + qs : '');
  };
  // The nonce is made at the click: the login begins then, in this tab.
  const sso = (c) => (e) => {
    e.preventDefault();
    location.assign(ssoURL(c, beginLogin(flyPort)));
  };
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErr('');
    try {
      beginLogin(flyPort);
      await login(user, password);
      done();
    } catch (e2) {
      setErr(e2.message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <Layout crumbs={[['login']]}>
      <form class="login" onSubmit={submit} data-testid="login-form">
        <h1>log in</h1>
        {flyPort && <p class="muted">fly is waiting on port {flyPort}: it gets your token when you log in.</p>}
        {refused && <div class="error" data-testid="fragment-refused">a token in the address was ignored: this tab began no login. Log in here if you meant to.</div>}
        {getToken() && flyPort && <p><button type="button" data-testid="use-session" onClick={() => { beginLogin(flyPort); done(); }}>continue as the logged-in user</button></p>}
        {connectors.map((c) => (
          <p key={c.id}><a class="button sso" href={ssoURL(c)} onClick={sso(c)} data-testid={'login-' + c.id}>log in with {c.display_name}</a></p>
        ))}
        {connectors.length > 0 && <p class="muted">or with a local user:</p>}
        <label>username<input name="username" autocomplete="username" value={user} onInput={(e) => setUser(e.target.value)} /></label>
        <label>password<input name="password" type="password" autocomplete="current-password" value={password} onInput={(e) => setPassword(e.target.value)} /></label>
        {err && <div class="error" data-testid="login-error">{err}</div>}
        <button class="primary" type="submit" disabled={busy} data-testid="login-submit">log in</button>
      </form>
    </Layout>
  );
}

// safeRedirect keeps a redirect on this site.
function safeRedirect(r) {
  return r && r.startsWith('/') && !r.startsWith('//') ? r : '/';
}

// FlySuccess sends the token to fly's listener on 127.0.0.1:fly_port, as
// Concourse's page does, but only at the end of a login for fly that this
// tab began (the page opened from another site, or from a link in a build
// log, would otherwise hand the token to whatever listens on that port); if
// sending fails, the token is shown to paste into fly.
export function FlySuccess() {
  const port = new URLSearchParams(location.search).get('fly_port');
  const [state, setState] = useState(port ? 'sending' : 'noop');
  const token = getToken();
  useEffect(() => {
    if (!port) return;
    if (!token) { navigate('/login?fly_port=' + encodeURIComponent(port), true); return; }
    if (!/^\d{1,5}$/.test(port)) { setState('failed'); return; }
    if (!claimFlyHandoff(port)) { setState('refused'); return; }
    fetch(`http://127.0.0.1:${port}/?token=${encodeURIComponent('bearer ' + token)}`, { mode: 'cors' })
      .then(() => setState('sent'), () => setState('failed'));
  }, [port]);
  return (
    <Layout crumbs={[['login']]}>
      <div class="fly-success" data-testid="fly-success" data-state={state}>
        {state === 'sending' && <p>sending the token to fly…</p>}
        {(state === 'sent' || state === 'noop') && <h1>you have logged in; return to fly</h1>}
        {state === 'refused' && (
          <div data-testid="fly-refused">
            <h1>no token was sent</h1>
            <p>this tab did not begin a login for fly on port {port}. To log fly in, run <code>fly login</code> and open the address it prints.</p>
          </div>
        )}
        {state === 'failed' && (
          <div>
            <h1>fly did not answer</h1>
            <p>paste this token into fly:</p>
            <textarea readOnly rows="4" cols="80" data-testid="token">{'bearer ' + token}</textarea>
          </div>
        )}
      </div>
    </Layout>
  );
}
