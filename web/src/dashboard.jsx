import { useState } from 'preact/hooks';
import { get } from './api.js';
import { ErrorBox, Layout, usePoll } from './common.jsx';
import { instanceVarsQuery, pipelinePath, varsLabel, withQuery } from './router.js';

export const jobStatus = (j) => (j.finished_build ? j.finished_build.status : 'pending');
export const jobRunning = (j) => !!(j.next_build && j.next_build.status === 'started');

// loadDashboard reads what Concourse's dashboard reads: every visible
// pipeline and every visible job, two requests whatever their number.
async function loadDashboard() {
  const [pipelines, jobs] = await Promise.all([get('/api/v1/pipelines'), get('/api/v1/jobs')]);
  const byPipeline = new Map();
  for (const j of jobs) {
    if (!byPipeline.has(j.pipeline_id)) byPipeline.set(j.pipeline_id, []);
    byPipeline.get(j.pipeline_id).push(j);
  }
  return pipelines.map((p) => ({ ...p, jobs: byPipeline.get(p.id) || [] }));
}

// pipelineStatus is what status: filters on, as Concourse's dashboard.
function pipelineStatus(p) {
  if (p.paused) return 'paused';
  if (p.jobs.some(jobRunning)) return 'running';
  const order = ['failed', 'errored', 'aborted', 'succeeded'];
  for (const s of order) if (p.jobs.some((j) => jobStatus(j) === s)) return s;
  return 'pending';
}

// parseFilter reads Concourse's dashboard filter: team:NAME, status:STATUS
// and free text matched against the pipeline's name.
export function parseFilter(q) {
  const f = { teams: [], statuses: [], words: [] };
  for (const term of q.trim().split(/\s+/).filter(Boolean)) {
    const m = /^(team|status):(.*)$/.exec(term);
    if (m && m[1] === 'team') f.teams.push(m[2].toLowerCase());
    else if (m) f.statuses.push(m[2].toLowerCase());
    else f.words.push(term.toLowerCase());
  }
  return f;
}

function keep(f, p) {
  if (f.teams.length && !f.teams.some((t) => p.team_name.toLowerCase().includes(t))) return false;
  if (f.statuses.length && !f.statuses.includes(pipelineStatus(p))) return false;
  return f.words.every((w) => p.name.toLowerCase().includes(w));
}

function Card({ p }) {
  // An instance of an instanced pipeline is its name and its vars.
  const vq = instanceVarsQuery(p.instance_vars);
  const link = (sub) => withQuery(pipelinePath(p.team_name, p.name) + sub, vq);
  return (
    <div class={'card' + (p.paused ? ' paused' : '') + (p.archived ? ' archived' : '')} data-pipeline={p.team_name + '/' + p.name}
      data-instance-vars={varsLabel(p.instance_vars)}>
      <div class="card-head">
        <a href={link('')}>{p.name}</a>
        <span class="markers">
          {p.paused && <span class="marker paused" title="paused">paused</span>}
          {p.archived && <span class="marker archived" title="archived">archived</span>}
          {p.public && <span class="marker exposed" title="exposed: visible to everyone">exposed</span>}
        </span>
      </div>
      {vq && <div class="instance-vars muted" data-testid="instance-vars">{varsLabel(p.instance_vars)}</div>}
      <div class="strip">
        {p.jobs.length === 0 && <div class="strip-empty">no jobs</div>}
        {p.jobs.map((j) => (
          <a key={j.name} href={link('/jobs/' + encodeURIComponent(j.name))}
            title={`${j.name}: ${jobStatus(j)}`}
            class={'seg status-' + jobStatus(j) + (jobRunning(j) ? ' running' : '') + (j.paused ? ' job-paused' : '')} />
        ))}
      </div>
      <div class="card-foot muted">{pipelineStatus(p)}</div>
    </div>
  );
}

export function Dashboard() {
  const [q, setQ] = useState(new URLSearchParams(location.search).get('search') || '');
  const res = usePoll(loadDashboard, 5000, []);
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
  const shown = (res.data || []).filter((p) => keep(f, p));
  const teams = [...new Set(shown.map((p) => p.team_name))];
  return (
    <Layout crumbs={[['dashboard']]}>
      <div class="filter">
        <input type="search" placeholder="filter: team:main status:failed text" value={q}
          data-testid="filter" onInput={(e) => search(e.target.value)} />
      </div>
      <ErrorBox error={res.error} />
      {res.data && res.data.length === 0 && <div class="empty" data-testid="no-pipelines">no pipelines to show{' '}
        (anonymous visitors see exposed pipelines only)</div>}
      {teams.map((t) => (
        <section class="team" key={t} data-team={t}>
          <h2>{t}</h2>
          <div class="cards">
            {shown.filter((p) => p.team_name === t).map((p) => <Card key={p.id} p={p} />)}
          </div>
        </section>
      ))}
    </Layout>
  );
}
