import { useMemo, useRef, useState } from 'preact/hooks';
import { api, get } from './api.js';
import { ErrorBox, Layout, usePoll, useUser } from './common.jsx';
import { can, jobRunning, jobStatus } from './dashmodel.js';
import { fit, graphModel, layout, zoomAt } from './graphmodel.js';
import { useIcons } from './icons.js';
import { apiPipeline, enc, navigate, pipelinePath, varsLabel, withQuery } from './router.js';

async function loadPipeline(team, name, vq) {
  const base = apiPipeline(team, name);
  const [pipeline, jobs, resources] = await Promise.all([get(withQuery(base, vq)), get(withQuery(base + '/jobs', vq)), get(withQuery(base + '/resources', vq))]);
  return { pipeline, jobs, resources };
}

// Graph draws the layout in a view that zooms with the mouse wheel (around
// the pointer) and pans by dragging, as Concourse's; reset goes back.
function Graph({ team, name, vq, jobs, resources, shown }) {
  const lay = useMemo(() => layout(graphModel(jobs, resources, shown)), [jobs, resources, shown]);
  const icon = useIcons(resources.some((r) => r.icon));
  const height = Math.max(360, Math.min(lay.height + 40, window.innerHeight - 150));
  // Where the graph starts: whole if it fits at a readable scale or smaller.
  const home = () => fit(lay.width, lay.height, Math.max(300, window.innerWidth - 32), height);
  const [view, setView] = useState(home);
  const drag = useRef(null);
  const svg = useRef(null);
  const onWheel = (e) => {
    e.preventDefault();
    const box = svg.current.getBoundingClientRect();
    setView((v) => zoomAt(v, Math.exp(-e.deltaY * 0.0015), e.clientX - box.left, e.clientY - box.top));
  };
  const onPointerDown = (e) => {
    if (e.button !== 0) return;
    drag.current = { x: e.clientX, y: e.clientY, moved: false };
    const move = (m) => {
      const d = drag.current;
      if (!d) return;
      const dx = m.clientX - d.x; const dy = m.clientY - d.y;
      if (!d.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      d.moved = true;
      d.x = m.clientX; d.y = m.clientY;
      setView((v) => ({ ...v, x: v.x + dx, y: v.y + dy }));
    };
    const up = () => {
      removeEventListener('pointermove', move);
      removeEventListener('pointerup', up);
      // A drag that ends on a node is no click on it.
      if (drag.current && drag.current.moved) {
        const eat = (c) => { c.preventDefault(); c.stopPropagation(); };
        addEventListener('click', eat, { capture: true, once: true });
        setTimeout(() => removeEventListener('click', eat, { capture: true }), 0);
      }
      drag.current = null;
    };
    addEventListener('pointermove', move);
    addEventListener('pointerup', up);
  };
  const path = (pts) => 'M' + pts.map((p) => `${p.x},${p.y}`).join(' L');
  const link = (sub) => withQuery(pipelinePath(team, name) + sub, vq);
  const go = (href) => (e) => { e.preventDefault(); navigate(href); };
  const named = (id) => id.replace(/^(job|in):/, '').replace(/^(out|via):[^:]*:/, '');
  return (
    <div class="graph-view">
      <div class="graph-tools">
        <button class="small" data-testid="zoom-in" title="zoom in" onClick={() => setView((v) => zoomAt(v, 1.25, 0, 0))}>+</button>
        <button class="small" data-testid="zoom-out" title="zoom out" onClick={() => setView((v) => zoomAt(v, 0.8, 0, 0))}>−</button>
        <button class="small" data-testid="zoom-reset" title="back to the whole graph" onClick={() => setView(home())}>reset</button>
        <span class="muted legend">wheel: zoom · drag: pan · dashed: an input that does not trigger its job</span>
      </div>
      <svg ref={svg} class="graph" width="100%" height={height} data-testid="graph" onWheel={onWheel} onPointerDown={onPointerDown}>
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto">
            <path d="M0,0 L10,5 L0,10 z" fill="#8a949e" />
          </marker>
        </defs>
        <g class="viewport" transform={`translate(${view.x},${view.y}) scale(${view.k})`} data-testid="viewport" data-zoom={view.k}>
          {lay.edges.map((e) => (
            <path key={e.key} class={'edge ' + e.kind + (e.to.startsWith('job:') && !e.trigger ? ' dashed' : ' solid')} d={path(e.points)}
              marker-end="url(#arrow)" data-edge={`${named(e.from)}->${named(e.to)}`} data-kind={e.kind}
              data-trigger={e.trigger ? 'true' : 'false'} />
          ))}
          {lay.nodes.map((n) => {
            const x = n.x - n.width / 2; const y = n.y - n.height / 2;
            if (n.kind === 'job') {
              const j = n.item;
              const href = link('/jobs/' + enc(j.name));
              const running = jobRunning(j);
              return (
                <a key={n.id} href={href} onClick={go(href)}>
                  <g class={'node job status-' + jobStatus(j) + (running ? ' running' : '') + (j.paused ? ' job-paused' : '')}
                    data-job={j.name} data-status={jobStatus(j)} data-running={running ? 'true' : 'false'}>
                    <title>{`${j.name}: ${j.paused ? 'paused' : jobStatus(j)}${running ? ', running' : ''}`}</title>
                    <rect x={x} y={y} width={n.width} height={n.height} rx="2" />
                    {running && <rect class="running-ring" x={x - 4} y={y - 4} width={n.width + 8} height={n.height + 8} rx="4" />}
                    <text x={n.x} y={n.y + 5} text-anchor="middle">{j.name}</text>
                  </g>
                </a>
              );
            }
            const r = n.item || { name: n.name };
            const href = link('/resources/' + enc(n.name));
            const failing = !!(r.build && (r.build.status === 'errored' || r.build.status === 'failed'));
            const pinned = !!r.pinned_version;
            const d = icon(r.icon);
            const tip = [n.name + (r.type ? ` (${r.type})` : '')];
            if (n.role === 'constrained') tip.push(`passed: ${n.upstream}` + (n.outside ? ' (a job outside this group)' : ''));
            if (n.role === 'output') tip.push('put by the job on its left');
            if (pinned) tip.push('pinned: ' + Object.entries(r.pinned_version).map(([k, v]) => `${k}: ${v}`).join(', '));
            if (failing) tip.push('its last check failed: open it to see the error');
            return (
              <a key={n.id} href={href} onClick={go(href)}>
                <g class={'node resource ' + n.role + (failing ? ' check-failed' : '') + (pinned ? ' pinned' : '') + (n.outside ? ' outside' : '')}
                  data-resource={n.name} data-role={n.role} data-upstream={n.upstream || undefined} data-outside={n.outside ? 'true' : undefined}
                  data-pinned={pinned ? 'true' : 'false'} data-check-failed={failing ? 'true' : 'false'}>
                  <title>{tip.join('\n')}</title>
                  <rect x={x} y={y} width={n.width} height={n.height} rx="2" />
                  {d && <path class="icon" d={d} data-icon={r.icon} transform={`translate(${x + 5},${y + 4}) scale(0.75)`} />}
                  <text x={n.x + 8} y={n.y + 4} text-anchor="middle">{n.name}</text>
                  {pinned && (
                    <g class="pin-mark" data-testid="pin-mark" transform={`translate(${x + n.width - 9},${y + 5})`}>
                      <circle cx="0" cy="3" r="3" /><line x1="0" y1="6" x2="0" y2="14" />
                    </g>
                  )}
                  {failing && (
                    <g class="check-mark" data-testid="check-error-mark">
                      <circle cx={x + n.width} cy={y} r="8" />
                      <text x={x + n.width} y={y + 4} text-anchor="middle">!</text>
                    </g>
                  )}
                </g>
              </a>
            );
          })}
        </g>
      </svg>
    </div>
  );
}

export function Pipeline({ team, name, vq }) {
  const res = usePoll(() => loadPipeline(team, name, vq), 5000, [team, name, vq]);
  const user = useUser();
  const [busy, setBusy] = useState('');
  const group = new URLSearchParams(location.search).get('group');
  const d = res.data;
  const jobs = d ? d.jobs : [];
  const resources = d ? d.resources : [];
  const groups = (d && d.pipeline.groups) || [];
  const current = groups.length ? (groups.find((g) => g.name === group) || groups[0]) : null;
  // A group shows its jobs; the inputs they take from jobs of other groups
  // are drawn all the same (graphModel).
  const shown = useMemo(() => (current ? current.jobs || [] : null), [current && current.name, d]);
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
      actions={d && can(user, team, 'operate') && (
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
      {d && <div class="graph-wrap"><Graph team={team} name={name} vq={vq} jobs={jobs} resources={resources} shown={shown} /></div>}
    </Layout>
  );
}
