import { useState } from 'preact/hooks';
import { api, get } from './api.js';
import { ErrorBox, Layout, usePoll, useUser } from './common.jsx';
import {
  can, checkFailing, jobRunning, jobStatus, keep, parseFavorites, parseFilter, pipelineStatus, stages, teamsShown, toggleFavorite,
} from './dashmodel.js';
import { apiPipeline, enc, instanceVarsQuery, navigate, pipelinePath, varsLabel, withQuery } from './router.js';

export { jobRunning, jobStatus, parseFilter };

// loadDashboard reads what Concourse's dashboard reads: every visible
// pipeline and every visible job, two requests whatever their number,
// and the teams (to show the caller's empty ones).
async function loadDashboard() {
  const [pipelines, jobs, teams] = await Promise.all([get('/api/v1/pipelines'), get('/api/v1/jobs'), get('/api/v1/teams')]);
  const byPipeline = new Map();
  for (const j of jobs) {
    if (!byPipeline.has(j.pipeline_id)) byPipeline.set(j.pipeline_id, []);
    byPipeline.get(j.pipeline_id).push(j);
  }
  return { teams, pipelines: pipelines.map((p) => ({ ...p, jobs: byPipeline.get(p.id) || [] })) };
}

// The resources' checks come on their own: the cards are drawn without
// waiting for them.
const loadChecks = async () => checkFailing(await get('/api/v1/resources'));

const FAVORITES_KEY = 'porter.favorites';

function useFavorites() {
  const [favs, setFavs] = useState(() => parseFavorites(localStorage.getItem(FAVORITES_KEY)));
  const toggle = (id) => {
    const next = toggleFavorite(parseFavorites(localStorage.getItem(FAVORITES_KEY)), id);
    localStorage.setItem(FAVORITES_KEY, JSON.stringify(next));
    setFavs(next);
  };
  return [favs, toggle];
}

// Preview draws the jobs as Concourse's card does: a column per stage of
// the passed: chain, a box per job coloured by its status.
function Preview({ p, link }) {
  if (p.jobs.length === 0) return <div class="preview preview-empty muted">no jobs</div>;
  return (
    <div class="preview" data-testid="preview">
      {stages(p.jobs).map((stage, i) => (
        <div class="stage" key={i} data-stage={i}>
          {stage.map((j) => (
            <a key={j.name} href={link('/jobs/' + enc(j.name))} title={`${j.name}: ${j.paused ? 'paused' : jobStatus(j)}`} data-job={j.name}
              class={'seg status-' + jobStatus(j) + (jobRunning(j) ? ' running' : '') + (j.paused ? ' job-paused' : '')} />
          ))}
        </div>
      ))}
    </div>
  );
}

function Card({ p, hd, user, fav, onFav, failing }) {
  const [busy, setBusy] = useState('');
  // An instance of an instanced pipeline is its name and its vars.
  const vq = instanceVarsQuery(p.instance_vars);
  const link = (sub) => withQuery(pipelinePath(p.team_name, p.name) + sub, vq);
  // A pause or expose shows at once; the next poll reads it back.
  const act = (what, change) => async () => {
    setBusy('working');
    try {
      await api('PUT', withQuery(apiPipeline(p.team_name, p.name) + '/' + what, vq));
      change();
      setBusy('');
    } catch (e) { setBusy(e.message); }
  };
  const status = pipelineStatus(p);
  return (
    <div class={'card status-' + status + (hd ? ' hd' : '') + (p.paused ? ' paused' : '') + (p.archived ? ' archived' : '')}
      data-pipeline={p.team_name + '/' + p.name} data-instance-vars={varsLabel(p.instance_vars)} data-status={status}>
      <div class="card-head">
        <a href={link('')} title={p.name}>{p.name}</a>
        <span class="markers">
          {failing && <span class="marker check-error" data-testid="check-error-marker"
            title={'a check failed: ' + failing.join(', ')}>⚠</span>}
          {p.paused && <span class="marker paused" title="paused">paused</span>}
          {p.archived && <span class="marker archived" title="archived">archived</span>}
          {p.public && <span class="marker exposed" title="exposed: visible to everyone">exposed</span>}
        </span>
      </div>
      {vq && <div class="instance-vars muted" data-testid="instance-vars">{varsLabel(p.instance_vars)}</div>}
      {!hd && <Preview p={p} link={link} />}
      {!hd && (
        <div class="card-foot">
          <span class="muted">{status}</span>
          <span class="card-actions">
            <button class={'icon-button star' + (fav ? ' on' : '')} data-testid="favorite" aria-pressed={fav ? 'true' : 'false'}
              title={fav ? 'remove from favourites' : 'add to favourites'} onClick={() => onFav(p.id)}>{fav ? '★' : '☆'}</button>
            {can(user, p.team_name, 'expose') && (
              <button class="icon-button" data-testid="card-expose" disabled={busy === 'working'} onClick={act(p.public ? 'hide' : 'expose', () => { p.public = !p.public; })}
                title={p.public ? 'hide: only the team sees it' : 'expose: everyone sees it'}>{p.public ? 'hide' : 'expose'}</button>
            )}
            {can(user, p.team_name, 'pause') && (
              <button class="icon-button" data-testid="card-pause" disabled={busy === 'working'} onClick={act(p.paused ? 'unpause' : 'pause', () => { p.paused = !p.paused; })}
                title={p.paused ? 'unpause the pipeline' : 'pause the pipeline'}>{p.paused ? '▶' : '❚❚'}</button>
            )}
          </span>
        </div>
      )}
      {busy && busy !== 'working' && <div class="error">{busy}</div>}
    </div>
  );
}

function Sidebar({ teams, pipelines }) {
  return (
    <aside class="sidebar" data-testid="sidebar">
      {teams.map((t) => (
        <div class="side-team" key={t} data-team={t}>
          <div class="side-team-name">{t}</div>
          {pipelines.filter((p) => p.team_name === t).map((p) => {
            const vq = instanceVarsQuery(p.instance_vars);
            return (
              <a key={p.id} class={'side-pipeline status-' + pipelineStatus(p)} data-pipeline={t + '/' + p.name}
                href={withQuery(pipelinePath(t, p.name), vq)}>{p.name}{vq && <span class="muted"> {varsLabel(p.instance_vars)}</span>}</a>
            );
          })}
        </div>
      ))}
    </aside>
  );
}

export function Dashboard({ hd }) {
  const [q, setQ] = useState(new URLSearchParams(location.search).get('search') || '');
  const [sidebar, setSidebar] = useState(false);
  const [favs, toggleFav] = useFavorites();
  const res = usePoll(loadDashboard, 5000, []);
  // The checks are read once the cards are drawn, not alongside: the server
  // answers both from the same database.
  const ready = !!res.data;
  const checks = usePoll(() => (ready ? loadChecks() : null), ready ? 10000 : 0, [ready]);
  const user = useUser();
  // The filter is kept in the address (?search=, as Concourse's), replacing
  // the entry rather than adding one per key.
  const search = (v) => {
    setQ(v);
    const u = new URL(location.href);
    if (v) u.searchParams.set('search', v);
    else u.searchParams.delete('search');
    history.replaceState(null, '', u.pathname + u.search);
  };
  const f = parseFilter(q);
  const all = res.data ? res.data.pipelines : [];
  const shown = all.filter((p) => keep(f, p));
  const teams = teamsShown(f, shown, user && res.data ? res.data.teams : []);
  const favShown = shown.filter((p) => favs.includes(p.id));
  const failing = checks.data || new Map();
  const card = (p) => (
    <Card key={p.id} p={p} hd={hd} user={user} fav={favs.includes(p.id)} onFav={toggleFav}
      failing={failing.get(p.id)} />
  );
  const other = withQuery(hd ? '/' : '/hd', q ? 'search=' + enc(q) : '');
  return (
    <Layout crumbs={[[hd ? 'dashboard (HD)' : 'dashboard']]}>
      <div class="filter">
        <button class="small" data-testid="sidebar-toggle" aria-pressed={sidebar ? 'true' : 'false'} title="teams and pipelines"
          onClick={() => setSidebar(!sidebar)}>☰</button>
        <input type="search" placeholder="filter: team:main status:failed text" value={q}
          data-testid="filter" onInput={(e) => search(e.target.value)} />
        <a class="button small" data-testid="hd-toggle" href={other} onClick={(e) => { e.preventDefault(); navigate(other); }}>
          {hd ? 'cards' : 'HD view'}</a>
      </div>
      <div class={'dash' + (sidebar ? ' with-sidebar' : '')}>
        {sidebar && res.data && <Sidebar teams={teamsShown(parseFilter(''), all, user ? res.data.teams : [])} pipelines={all} />}
        <div class="dash-main">
          <ErrorBox error={res.error} />
          {res.data && all.length === 0 && teams.length === 0 && <div class="empty" data-testid="no-pipelines">no pipelines to show{' '}
            (anonymous visitors see exposed pipelines only)</div>}
          {favShown.length > 0 && (
            <section class="team favorites" data-testid="favorites">
              <h2>favourites</h2>
              <div class={'cards' + (hd ? ' hd' : '')}>{favShown.map(card)}</div>
            </section>
          )}
          {teams.map((t) => {
            const ps = shown.filter((p) => p.team_name === t);
            return (
              <section class="team" key={t} data-team={t}>
                <h2>{t}</h2>
                <div class={'cards' + (hd ? ' hd' : '')}>
                  {ps.map(card)}
                  {ps.length === 0 && <div class="card empty-team" data-testid="empty-team">no pipeline set{' '}
                    <span class="muted">(fly -t … set-pipeline --team {t})</span></div>}
                </div>
              </section>
            );
          })}
        </div>
      </div>
    </Layout>
  );
}
