import { useEffect, useRef, useState } from 'preact/hooks';
import { get, getToken, logout } from './api.js';
import { navigate } from './router.js';

// usePoll loads fn() now and every interval ms (0: once) while the page is
// shown, as Concourse's UI refreshes by polling. When deps change, what
// was loaded for the old ones is not answered for the new ones, not even
// for the one frame before the effect runs.
export function usePoll(fn, interval, deps) {
  const key = JSON.stringify(deps);
  const [state, setState] = useState({ key, data: null, error: null, loading: true });
  const fnRef = useRef(fn);
  fnRef.current = fn;
  useEffect(() => {
    let live = true;
    let timer = 0;
    const tick = async () => {
      try {
        const data = await fnRef.current();
        if (live) setState({ key, data, error: null, loading: false });
      } catch (error) {
        if (live) setState((s) => ({ key, data: s.key === key ? s.data : null, error, loading: false }));
      }
      if (live && interval) timer = setTimeout(tick, interval);
    };
    tick();
    return () => { live = false; clearTimeout(timer); };
  }, deps);
  return state.key === key ? state : { data: null, error: null, loading: true };
}

export function ErrorBox({ error }) {
  if (!error) return null;
  if (error.status === 401) {
    return (
      <div class="error" data-error="401">
        Log in to see this. <a href={'/login?redirect=' + encodeURIComponent(location.pathname)}>log in</a>
      </div>
    );
  }
  return <div class="error" data-error={error.status || 'network'}>{error.message}</div>;
}

export function StatusBadge({ status }) {
  return <span class={'badge status-' + (status || 'pending')} data-status={status}>{status || 'pending'}</span>;
}

export function ago(unix) {
  if (!unix) return '';
  const s = Math.max(0, Math.round(Date.now() / 1000 - unix));
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.floor(s / 60) + 'm ago';
  if (s < 86400) return Math.floor(s / 3600) + 'h ago';
  return Math.floor(s / 86400) + 'd ago';
}

export function duration(start, end) {
  if (!start) return '';
  const s = Math.max(0, (end || Math.floor(Date.now() / 1000)) - start);
  const m = Math.floor(s / 60);
  return m ? `${m}m ${s % 60}s` : `${s}s`;
}

// The user behind a token is read once: each page's header would
// otherwise show "login" until it is read again, and shift as it changes.
let userOf = { token: '', promise: null };
export function loadUser() {
  const t = getToken();
  if (!t) return Promise.resolve(null);
  if (userOf.token !== t) {
    const promise = get('/api/v1/user');
    userOf = { token: t, promise };
    promise.catch(() => { if (userOf.promise === promise) userOf = { token: '', promise: null }; });
  }
  return userOf.promise;
}

// useUser is the logged-in user (null until read, or when nobody is).
export function useUser() {
  return usePoll(loadUser, 0, [getToken()]).data;
}

function UserMenu() {
  const [open, setOpen] = useState(false);
  const u = useUser();
  if (!u) {
    return <a class="login-link" href={'/login?redirect=' + encodeURIComponent(location.pathname)} data-testid="login-link">login</a>;
  }
  return (
    <div class="user-menu">
      <button class="user-name" data-testid="user-menu" onClick={() => setOpen(!open)}>{u.user_name || u.name}</button>
      {open && (
        <div class="user-popup" data-testid="user-popup">
          <div class="muted">{u.is_admin ? 'admin' : 'user'} · {u.connector}</div>
          <table>
            <tbody>
              {Object.entries(u.teams || {}).map(([team, roles]) => (
                <tr key={team}><td>{team}</td><td class="muted">{roles.join(', ')}</td></tr>
              ))}
            </tbody>
          </table>
          <button data-testid="logout" onClick={async () => { await logout(); setOpen(false); navigate('/'); location.reload(); }}>logout</button>
        </div>
      )}
    </div>
  );
}

export function Layout({ crumbs, actions, children }) {
  return (
    <div class="app">
      <header class="top">
        <a class="logo" href="/">porter</a>
        <nav class="crumbs">
          {(crumbs || []).map(([label, href], i) => (
            <span key={i}>{i > 0 && <span class="sep">/</span>}{href ? <a href={href}>{label}</a> : <b>{label}</b>}</span>
          ))}
        </nav>
        <div class="actions">{actions}</div>
        <UserMenu />
      </header>
      <main>{children}</main>
    </div>
  );
}

export function statusOfJob(j) {
  if (j.next_build && (j.next_build.status === 'started' || j.next_build.status === 'pending')) return j.next_build.status === 'started' ? 'started' : 'pending';
  return j.finished_build ? j.finished_build.status : 'pending';
}

// LoginForMore stands for what this visitor may not see.
export function LoginForMore() {
  return (
    <div class="empty" data-testid="login-for-more">
      <a href={'/login?redirect=' + encodeURIComponent(location.pathname)}>log in</a> to see more
    </div>
  );
}

// CopyButton copies text to the clipboard and says so for a moment.
export function CopyButton({ text }) {
  const [copied, setCopied] = useState(false);
  const copy = async (e) => {
    e.stopPropagation();
    try {
      await navigator.clipboard.writeText(text);
      setCopied(true);
      setTimeout(() => setCopied(false), 1500);
    } catch (_) { /* no clipboard (an insecure origin): the text is there to select */ }
  };
  return <button class="small" data-testid="copy" data-copied={copied ? 'yes' : 'no'} title="copy to the clipboard" onClick={copy}>{copied ? 'copied' : 'copy'}</button>;
}
