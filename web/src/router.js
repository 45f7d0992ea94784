// A tiny history router: the paths are Concourse's.
import { useEffect, useState } from 'preact/hooks';

export function navigate(to, replace) {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  dispatchEvent(new PopStateEvent('popstate'));
}

export function useLocation() {
  const [loc, setLoc] = useState(location.pathname + location.search);
  useEffect(() => {
    const on = () => setLoc(location.pathname + location.search);
    addEventListener('popstate', on);
    return () => removeEventListener('popstate', on);
  }, []);
  return loc;
}

// Same-origin links navigate without a reload.
export function interceptLinks() {
  document.addEventListener('click', (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const a = e.target.closest && e.target.closest('a[href]');
    if (!a || a.target || a.origin !== location.origin || a.hasAttribute('download')) return;
    // A link printed in a build log is the build's, never the app's.
    if (a.closest('[data-testid=log]')) return;
    // The server's own routes (single sign-on's redirect, the API) are no pages of the app.
    if (a.pathname.startsWith('/sky/') || a.pathname.startsWith('/api/')) return;
    e.preventDefault();
    navigate(a.pathname + a.search);
  });
}

const routes = [
  ['dashboard', /^\/$/],
  ['login', /^\/login$/],
  ['flySuccess', /^\/fly_success$/],
  ['build', /^\/builds\/(\d+)$/],
  ['jobBuild', /^\/teams\/([^/]+)\/pipelines\/([^/]+)\/jobs\/([^/]+)\/builds\/([^/]+)$/],
  ['job', /^\/teams\/([^/]+)\/pipelines\/([^/]+)\/jobs\/([^/]+)$/],
  ['resource', /^\/teams\/([^/]+)\/pipelines\/([^/]+)\/resources\/([^/]+)$/],
  ['pipeline', /^\/teams\/([^/]+)\/pipelines\/([^/]+)$/],
];

export function match(path) {
  for (const [name, re] of routes) {
    const m = re.exec(path);
    if (m) return { name, params: m.slice(1).map(decodeURIComponent) };
  }
  return { name: 'notFound', params: [] };
}

export const enc = encodeURIComponent;
export const pipelinePath = (t, p) => `/teams/${enc(t)}/pipelines/${enc(p)}`;
export const apiPipeline = (t, p) => `/api/v1/teams/${enc(t)}/pipelines/${enc(p)}`;
