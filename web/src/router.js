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
  ['dashboard', /^\/(?:dashboard)?$/],
  ['hd', /^\/hd$/],
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

// An instanced pipeline is named by its instance vars too: they travel as
// Concourse's query, vars.KEY=JSON per leaf (the API takes the same), on
// the pipeline's pages and on every API path under the pipeline.
export function varsQuery(search) {
  const out = new URLSearchParams();
  for (const [k, v] of new URLSearchParams(search)) if (k === 'vars' || k.startsWith('vars.')) out.append(k, v);
  return out.toString();
}

// instanceVarsQuery is varsQuery for a pipeline's instance_vars.
export function instanceVarsQuery(iv) {
  const out = new URLSearchParams();
  const walk = (prefix, v) => {
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
      for (const k of Object.keys(v).sort()) walk(prefix + '.' + k, v[k]);
    } else out.append(prefix, JSON.stringify(v));
  };
  if (iv && typeof iv === 'object') for (const k of Object.keys(iv).sort()) walk('vars.' + k, iv[k]);
  return out.toString();
}

// pageQuery keeps a list page's place: from=, to= and limit= (the API's
// paging, which its Link headers name).
export function pageQuery(search) {
  const out = new URLSearchParams();
  for (const [k, v] of new URLSearchParams(search)) if (k === 'from' || k === 'to' || k === 'limit') out.append(k, v);
  return out.toString();
}

// withQuery appends query strings (empty ones dropped) to path.
export function withQuery(path, ...qs) {
  const q = qs.filter(Boolean).join('&');
  return q ? path + (path.includes('?') ? '&' : '?') + q : path;
}

// varsLabel shows instance vars as fly does: k:v, k:v.
export function varsLabel(iv) {
  return Object.keys(iv || {}).sort().map((k) => `${k}:${typeof iv[k] === 'string' ? iv[k] : JSON.stringify(iv[k])}`).join(', ');
}
export const pipelinePath = (t, p) => `/teams/${enc(t)}/pipelines/${enc(p)}`;
export const apiPipeline = (t, p) => `/api/v1/teams/${enc(t)}/pipelines/${enc(p)}`;
