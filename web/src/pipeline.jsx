import dagre from '@dagrejs/dagre';
import { useState } from 'preact/hooks';
import { api, get, getToken } from './api.js';
import { ErrorBox, Layout, usePoll } from './common.jsx';
import { jobRunning, jobStatus } from './dashboard.jsx';
import { apiPipeline, enc, navigate, pipelinePath, varsLabel, withQuery } from './router.js';

async function loadPipeline(team, name, vq) {
  const base = apiPipeline(team, name);
  const [pipeline, jobs, resources] = await Promise.all([get(withQuery(base, vq)), get(withQuery(base + '/jobs', vq)), get(withQuery(base + '/resources', vq))]);
  return { pipeline, jobs, resources };
}

// graph lays out jobs and resources as Concourse draws them: a resource
// feeds the jobs that get it without passed constraints, a job feeds the
// jobs whose inputs pass through it, and a job feeds what it puts.
export function graph(jobs, resources) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: 'LR', nodesep: 18, ranksep: 70, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  const rnames = new Set(resources.map((r) => r.name));
  const used = new Set();
  const edges = [];
  const add = (from, to, trigger) => {
    const key = from + '->' + to;
    const e = edges.find((x) => x.key === key);
    if (e) { e.trigger = e.trigger || trigger; return; }
    edges.push({ key, from, to, trigger });
  };
  for (const j of jobs) {
    for (const inp of j.inputs || []) {
      if (inp.passed && inp.passed.length) {
        for (const up of inp.passed) add('job:' + up, 'job:' + j.name, !!inp.trigger);
      } else if (rnames.has(inp.resource)) {
        add('res:' + inp.resource, 'job:' + j.name, !!inp.trigger);
        used.add(inp.resource);
      }
    }
    for (const out of j.outputs || []) {
      if (rnames.has(out.resource)) {
        add('job:' + j.name, 'res:' + out.resource, false);
        used.add(out.resource);
      }
    }
  }
  for (const j of jobs) g.setNode('job:' + j.name, { width: Math.max(110, j.name.length * 8 + 24), height: 36, kind: 'job', item: j });
  for (const r of resources) {
    if (used.has(r.name)) g.setNode('res:' + r.name, { width: Math.max(90, r.name.length * 7 + 20), height: 26, kind: 'resource', item: r });
  }
  for (const e of edges) if (g.hasNode(e.from) && g.hasNode(e.to)) g.setEdge(e.from, e.to, { trigger: e.trigger }, e.key);
  dagre.layout(g);
  return g;
}

function Graph({ team, name, vq, jobs, resources }) {
  const g = graph(jobs, resources);
  const { width, height } = g.graph();
  const path = (pts) => 'M' + pts.map((p) => `${p.x},${p.y}`).join(' L');
  return (
    <svg class="graph" width={width} height={height} viewBox={`0 0 ${width} ${height}`} data-testid="graph">
      <defs>
        <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto">
          <path d="M0,0 L10,5 L0,10 z" fill="#8a949e" />
        </marker>
      </defs>
      {g.edges().map((e) => {
        const ed = g.edge(e);
        const from = e.v.replace(/^(job|res):/, ''); const to = e.w.replace(/^(job|res):/, '');
        return <path key={e.name} class={'edge' + (ed.trigger ? ' trigger' : ' manual')} d={path(ed.points)}
          marker-end="url(#arrow)" data-edge={`${from}->${to}`} data-trigger={ed.trigger ? 'true' : 'false'} />;
      })}
      {g.nodes().map((id) => {
        const n = g.node(id);
        const x = n.x - n.width / 2; const y = n.y - n.height / 2;
        if (n.kind === 'job') {
          const j = n.item;
          const href = withQuery(pipelinePath(team, name) + '/jobs/' + enc(j.name), vq);
          return (
            <a key={id} href={href} onClick={(e) => { e.preventDefault(); navigate(href); }}>
              <g class={'node job status-' + jobStatus(j) + (jobRunning(j) ? ' running' : '') + (j.paused ? ' job-paused' : '')}
                data-job={j.name} data-status={jobStatus(j)} data-running={jobRunning(j) ? 'true' : 'false'}>
                <rect x={x} y={y} width={n.width} height={n.height} rx="2" />
                <text x={n.x} y={n.y + 5} text-anchor="middle">{j.name}</text>
              </g>
            </a>
          );
        }
        const r = n.item;
        const href = withQuery(pipelinePath(team, name) + '/resources/' + enc(r.name), vq);
        const failing = r.build && (r.build.status === 'errored' || r.build.status === 'failed');
        return (
          <a key={id} href={href} onClick={(e) => { e.preventDefault(); navigate(href); }}>
            <g class={'node resource' + (failing ? ' check-failed' : '') + (r.pinned_version ? ' pinned' : '')} data-resource={r.name}>
              <rect x={x} y={y} width={n.width} height={n.height} rx="2" />
              <text x={n.x} y={n.y + 4} text-anchor="middle">{r.name}</text>
            </g>
          </a>
        );
      })}
    </svg>
  );
}

export function Pipeline({ team, name, vq }) {
  const res = usePoll(() => loadPipeline(team, name, vq), 5000, [team, name, vq]);
  const [busy, setBusy] = useState('');
  const group = new URLSearchParams(location.search).get('group');
  const d = res.data;
  let jobs = d ? d.jobs : [];
  let resources = d ? d.resources : [];
  const groups = (d && d.pipeline.groups) || [];
  const current = groups.length ? (groups.find((g) => g.name === group) || groups[0]) : null;
  if (current) {
    jobs = jobs.filter((j) => (current.jobs || []).includes(j.name));
  }
  const toggle = async () => {
    setBusy('working');
    try {
      await api('PUT', withQuery(apiPipeline(team, name) + (d.pipeline.paused ? '/unpause' : '/pause'), vq));
      d.pipeline.paused = !d.pipeline.paused;
      setBusy('');
    } catch (e) { setBusy(e.message); }
  };
  return (
    <Layout crumbs={[[team], [name + (vq ? ` (${varsLabel(d && d.pipeline.instance_vars)})` : ''), withQuery(pipelinePath(team, name), vq)]]}
      actions={d && getToken() && (
        <button class={'pause-toggle' + (d.pipeline.paused ? ' paused' : '')} data-testid="pause-pipeline" onClick={toggle}>
          {d.pipeline.paused ? 'unpause' : 'pause'}
        </button>
      )}>
      <ErrorBox error={res.error} />
      {busy && busy !== 'working' && <div class="error">{busy}</div>}
      {groups.length > 0 && (
        <nav class="groups">
          {groups.map((g) => (
            <a key={g.name} class={'group' + (current === g ? ' active' : '')} data-group={g.name}
              href={withQuery(pipelinePath(team, name), vq, 'group=' + enc(g.name))}>{g.name}</a>
          ))}
        </nav>
      )}
      {d && d.pipeline.paused && <div class="banner paused" data-testid="paused-banner">this pipeline is paused</div>}
      {d && d.pipeline.archived && <div class="banner archived">this pipeline is archived</div>}
      {d && <div class="graph-wrap"><Graph team={team} name={name} vq={vq} jobs={jobs} resources={resources} /></div>}
    </Layout>
  );
}
