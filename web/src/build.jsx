import { AnsiUp } from 'ansi_up';
import {
  elementScroll, observeElementOffset, observeElementRect, Virtualizer,
} from '@tanstack/virtual-core';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { api, get, getToken, streamEvents } from './api.js';
import { CopyButton, duration, ErrorBox, Layout, LoginForMore, StatusBadge } from './common.jsx';
import { apiPipeline, enc, navigate, pipelinePath } from './router.js';

const LINE = 18; // px: lines do not wrap, so every line is this tall

function newAnsi() {
  const a = new AnsiUp();
  a.use_classes = true;
  return a;
}

// Step is a leaf of the plan with its log and state from the events.
function newStep(id, kind, name) {
  return { id, kind, name, status: 'pending', lines: [], partial: '', ansi: newAnsi(), error: '', start: 0, end: 0 };
}

// collect walks the public plan into a tree of nodes and a map of leaves.
function collect(plan, steps) {
  if (!plan || typeof plan !== 'object') return null;
  const leaf = (kind, name) => {
    const s = newStep(plan.id, kind, name || kind);
    steps.set(plan.id, s);
    return { type: 'leaf', step: s };
  };
  if (plan.task) return leaf('task', plan.task.name);
  if (plan.get) return leaf('get', plan.get.name || plan.get.resource);
  if (plan.put) return leaf('put', plan.put.name || plan.put.resource);
  if (plan.check) return leaf('check', plan.check.name || plan.check.resource);
  if (plan.set_pipeline) return leaf('set_pipeline', plan.set_pipeline.name);
  if (plan.load_var) return leaf('load_var', plan.load_var.name);
  if (plan.do) return { type: 'seq', children: plan.do.map((p) => collect(p, steps)).filter(Boolean) };
  if (plan.in_parallel) return { type: 'parallel', children: (plan.in_parallel.steps || []).map((p) => collect(p, steps)).filter(Boolean) };
  if (plan.retry) return { type: 'retry', children: plan.retry.map((p) => collect(p, steps)).filter(Boolean) };
  for (const hook of ['on_success', 'on_failure', 'on_abort', 'on_error', 'ensure']) {
    if (plan[hook]) {
      return { type: 'hook', hook, step: collect(plan[hook].step, steps), then: collect(plan[hook][hook], steps) };
    }
  }
  if (plan.try) return { type: 'seq', label: 'try', children: [collect(plan.try.step, steps)].filter(Boolean) };
  if (plan.timeout) return { type: 'seq', children: [collect(plan.timeout.step, steps)].filter(Boolean) };
  return null;
}

// plain: ansi_up has no color or style open from an earlier line.
const plain = (a) => a.fg === null && a.bg === null && !a.bold && !a.faint && !a.italic && !a.underline;

// apply folds one build event into the build's state.
function apply(st, ev) {
  const d = ev.data || {};
  const id = d.origin && d.origin.id;
  let s = id ? st.steps.get(id) : null;
  if (id && !s) {
    s = newStep(id, 'step', (d.origin && d.origin.source) || id);
    st.steps.set(id, s);
    st.orphans.push({ type: 'leaf', step: s });
  }
  switch (ev.event) {
    case 'log': {
      const text = s.partial + (d.payload || '');
      const parts = text.split('\n');
      s.partial = parts.pop();
      for (const p of parts) {
        const line = p.replace(/\r$/, '');
        // Most lines have no escape codes: they are kept as text (Preact
        // escapes them when shown); only the others go through ansi_up,
        // in order, so colors carry across lines.
        if (line.indexOf('\x1b') < 0 && plain(s.ansi)) s.lines.push({ t: d.time, text: line });
        else s.lines.push({ t: d.time, html: s.ansi.ansi_to_html(line) });
      }
      break;
    }
    case 'status':
      st.status = d.status;
      if (d.status !== 'started' && d.status !== 'pending') st.end = d.time;
      break;
    case 'error':
      if (s) { s.status = 'errored'; s.error = d.message; } else st.error = d.message;
      break;
    default:
      if (!s) break;
      if (ev.event.startsWith('initialize')) {
        if (s.status === 'pending') s.status = 'initializing';
      } else if (ev.event.startsWith('start')) {
        s.status = 'running'; s.start = d.time;
      } else if (ev.event.startsWith('finish')) {
        s.end = d.time;
        s.status = d.succeeded === false || (d.exit_status !== undefined && d.exit_status !== 0) ? 'failed' : 'succeeded';
        if (d.version) s.version = d.version;
      } else if (ev.event === 'selected-worker') {
        s.worker = d.selected_worker;
      }
  }
}

function clock(t) {
  if (!t) return '';
  const d = new Date(t * 1000);
  return d.toTimeString().slice(0, 8);
}

// LogView renders only the lines on screen (TanStack Virtual), so a
// 100,000-line log costs what 40 lines do; it follows the end while the
// reader is at the bottom.
function LogView({ step, version }) {
  const el = useRef(null);
  const [, force] = useState(0);
  const follow = useRef(true);
  const count = step.lines.length + (step.partial ? 1 : 0);
  const vref = useRef(null);
  if (!vref.current) {
    vref.current = new Virtualizer({
      count, getScrollElement: () => el.current, estimateSize: () => LINE, overscan: 30,
      scrollToFn: elementScroll, observeElementRect, observeElementOffset,
      onChange: () => force((x) => x + 1),
    });
  }
  const v = vref.current;
  v.setOptions({ ...v.options, count });
  useLayoutEffect(() => v._didMount(), []);
  useLayoutEffect(() => {
    v._willUpdate();
    if (follow.current && el.current && count) el.current.scrollTop = el.current.scrollHeight;
  });
  const onScroll = () => {
    const e = el.current;
    follow.current = e.scrollTop + e.clientHeight >= e.scrollHeight - LINE * 2;
  };
  const items = v.getVirtualItems();
  return (
    <div class="log" ref={el} onScroll={onScroll} data-testid="log" data-lines={count} data-version={version}>
      <div style={{ height: v.getTotalSize() + 'px', position: 'relative' }}>
        {items.map((it) => {
          const line = it.index < step.lines.length ? step.lines[it.index] : { t: 0, html: newAnsi().ansi_to_html(step.partial) };
          return (
            <div key={it.key} class="line" data-index={it.index} style={{ transform: `translateY(${it.start}px)` }}>
              <span class="ts">{clock(line.t)}</span>
              {line.html === undefined
                ? <span class="txt">{line.text}</span>
                : <span class="txt" dangerouslySetInnerHTML={{ __html: line.html }} />}
            </div>
          );
        })}
      </div>
    </div>
  );
}

function StepView({ node, ctx }) {
  if (!node) return null;
  switch (node.type) {
    case 'seq':
      return <div class="seq">{node.children.map((c, i) => <StepView key={i} node={c} ctx={ctx} />)}</div>;
    case 'parallel':
      return <div class="parallel" data-testid="in-parallel">{node.children.map((c, i) => <StepView key={i} node={c} ctx={ctx} />)}</div>;
    case 'retry':
      return (
        <div class="retry">
          {node.children.map((c, i) => (
            <div key={i} class="attempt"><div class="attempt-label">attempt {i + 1}</div><StepView node={c} ctx={ctx} /></div>
          ))}
        </div>
      );
    case 'hook':
      return (
        <div class="hooked">
          <StepView node={node.step} ctx={ctx} />
          <div class="hook"><div class="hook-label">{node.hook.replace('_', ' ')}</div><StepView node={node.then} ctx={ctx} /></div>
        </div>
      );
    default:
      return <Leaf step={node.step} ctx={ctx} />;
  }
}

function Leaf({ step, ctx }) {
  const [open, setOpen] = useState(null);
  const auto = step.status !== 'succeeded' || ctx.leaves <= 1;
  const expanded = open === null ? auto : open;
  const hasLog = step.lines.length > 0 || step.partial;
  // The target's name is the user's own (fly's ~/.flyrc): TARGET stands for it.
  const cmd = `fly -t ${ctx.target} intercept -b ${ctx.buildID} -s ${step.name}`;
  const status = step.status === 'pending' && step.waiting ? 'waiting' : step.status;
  return (
    <div class={'step status-' + status} data-step={step.name} data-status={status}>
      <div class="step-head" onClick={() => setOpen(!expanded)}>
        <span class="caret">{expanded ? '▾' : '▸'}</span>
        <span class="kind">{step.kind}:</span> <span class="name">{step.name}</span>
        <span class="right">
          {step.worker && <span class="muted">{step.worker} </span>}
          <span class="muted">{duration(step.start, step.end)} </span>
          {status === 'waiting' && <span class="muted" title="its pod is up, declared ahead of its turn, and waits for the go-ahead">pod ready </span>}
          <StatusBadge status={status} />
        </span>
      </div>
      {expanded && (
        <div class="step-body">
          <div class="intercept muted" data-testid="intercept">
            intercept: <code>{cmd}</code>{' '}
            <CopyButton text={cmd} />
          </div>
          {step.error && <div class="error step-error">{step.error}</div>}
          {hasLog ? <LogView step={step} version={ctx.version} /> : <div class="muted no-log">no output</div>}
        </div>
      )}
    </div>
  );
}

// BuildView shows a build by id: its plan as a step tree, filled by the
// build's events as they arrive.
function BuildView({ build: initial, crumbs }) {
  const [build, setBuild] = useState(initial);
  const st = useRef(null);
  const [version, setVersion] = useState(0);
  const [err, setErr] = useState(null);
  if (!st.current || st.current.id !== initial.id) {
    st.current = { id: initial.id, steps: new Map(), orphans: [], tree: null, status: initial.status, error: '', end: 0, done: false, leaves: 0 };
  }
  useEffect(() => {
    const s = st.current;
    let frame = 0;
    const redraw = () => {
      if (!frame) frame = requestAnimationFrame(() => { frame = 0; setVersion((x) => x + 1); });
    };
    let live = true;
    // A job's build has its plan only once the scheduler starts it: until
    // then, ask again every second; steps whose events came first keep
    // their state.
    let planTimer = 0;
    const loadPlan = () => get(`/api/v1/builds/${initial.id}/plan`).catch((e) => {
      // A private job's build in an exposed pipeline: the build is shown,
      // its steps are not (the API says 401 or 403), as in Concourse.
      if (e.status === 401 || e.status === 403) {
        s.denied = true;
        s.done = true;
      }
      return null;
    }).then((p) => {
      if (!live) return;
      if (!(p && p.plan)) {
        if (!s.done) planTimer = setTimeout(loadPlan, 1000);
        return;
      }
      const steps = new Map();
      s.tree = collect(p.plan, steps);
      for (const [id, step] of steps) {
        const old = s.steps.get(id);
        if (old) Object.assign(step, old, { kind: step.kind, name: step.name });
      }
      s.orphans = s.orphans.filter((n) => !steps.has(n.step.id));
      for (const n of s.orphans) steps.set(n.step.id, n.step);
      s.steps = steps;
      s.leaves = steps.size;
      redraw();
    });
    loadPlan();
    // Pods declared ahead of their turn (Porter's): a pending task whose
    // pod is up and waits for the go-ahead shows as waiting. Only the
    // team's members may list its containers; the others see pending.
    let waitTimer = 0;
    const pollWaiting = () => {
      if (!live || s.done || !getToken() || !initial.team_name) return;
      get(`/api/v1/teams/${enc(initial.team_name)}/containers?build_id=${initial.id}&type=task`).then((cs) => {
        if (!live) return;
        const waiting = new Set((cs || []).filter((c) => c.state === 'waiting').map((c) => c.plan_id));
        let changed = false;
        for (const step of s.steps.values()) {
          const w = step.status === 'pending' && waiting.has(step.id);
          if (!!step.waiting !== w) { step.waiting = w; changed = true; }
        }
        if (changed) redraw();
        waitTimer = setTimeout(pollWaiting, 1500);
      }, () => {});
    };
    if (initial.status === 'pending' || initial.status === 'started') pollWaiting();
    const stop = streamEvents(initial.id, (ev) => { apply(s, ev); redraw(); },
      () => { s.done = true; redraw(); get(`/api/v1/builds/${initial.id}`).then(setBuild).catch(() => {}); },
      (e) => {
        if (e.status === 401 || e.status === 403) {
          s.denied = true;
          redraw();
          return;
        }
        setErr(e);
      });
    return () => { live = false; stop(); clearTimeout(planTimer); clearTimeout(waitTimer); cancelAnimationFrame(frame); };
  }, [initial.id]);
  const s = st.current;
  const status = s.status || build.status;
  const running = status === 'started' || status === 'pending';
  const abort = async () => {
    try { await api('PUT', `/api/v1/builds/${build.id}/abort`); } catch (e) { setErr(e); }
  };
  // Porter's own: a failed job build resumes from its failed step (N.1).
  const resumable = build.job_name && (status === 'failed' || status === 'errored') && s.done;
  const resume = async () => {
    try {
      const nb = await api('POST', `/api/v1/builds/${build.id}/resume`);
      navigate(pipelinePath(nb.team_name, nb.pipeline_name) + '/jobs/' + enc(nb.job_name) + '/builds/' + enc(nb.name));
    } catch (e) { setErr(e); }
  };
  const actions = !s.denied && getToken() && (running
    ? <button class="danger" data-testid="abort" onClick={abort}>abort</button>
    : resumable && <button data-testid="resume" title="a new build that reuses the steps that succeeded and runs from the failed one" onClick={resume}>resume</button>);
  const ctx = { buildID: build.id, target: 'TARGET', leaves: s.leaves, version };
  return (
    <Layout crumbs={crumbs} actions={actions}>
      <div class={'build-head status-' + status} data-testid="build-head" data-status={status}>
        <h1>{build.job_name ? `${build.job_name} #${build.name}` : `build #${build.id}`}</h1>
        <StatusBadge status={status} />
        <span class="muted"> {duration(build.start_time, s.end || build.end_time)}</span>
        {build.created_by && <span class="muted"> · by {build.created_by}</span>}
      </div>
      <ErrorBox error={err} />
      {s.error && <div class="error" data-testid="build-error">{s.error}</div>}
      {s.denied && <LoginForMore />}
      <div class="steps" data-testid="steps">
        <StepView node={s.tree} ctx={ctx} />
        {s.orphans.map((n, i) => <StepView key={'o' + i} node={n} ctx={ctx} />)}
      </div>
      {s.done && !s.denied && <div class="muted end" data-testid="build-end">end of build</div>}
    </Layout>
  );
}

function crumbsFor(b) {
  if (!b.pipeline_name) return [['build ' + b.id]];
  const pp = pipelinePath(b.team_name, b.pipeline_name);
  const c = [[b.team_name], [b.pipeline_name, pp]];
  if (b.job_name) c.push([b.job_name, pp + '/jobs/' + enc(b.job_name)]);
  else if (b.resource_name) c.push([b.resource_name, pp + '/resources/' + enc(b.resource_name)]);
  c.push(['#' + b.name]);
  return c;
}

function useBuild(load, deps) {
  const [state, setState] = useState({ build: null, error: null });
  useEffect(() => {
    let live = true;
    setState({ build: null, error: null });
    load().then((build) => live && setState({ build, error: null }), (error) => live && setState({ build: null, error }));
    return () => { live = false; };
  }, deps);
  return state;
}

export function Build({ id }) {
  const { build, error } = useBuild(() => get(`/api/v1/builds/${id}`), [id]);
  if (!build) return <Layout crumbs={[['build ' + id]]}><ErrorBox error={error} /></Layout>;
  return <BuildView key={build.id} build={build} crumbs={crumbsFor(build)} />;
}

export function JobBuild({ team, pipeline, job, name }) {
  const path = apiPipeline(team, pipeline) + '/jobs/' + enc(job) + '/builds/' + enc(name);
  const { build, error } = useBuild(() => get(path), [path]);
  if (!build) return <Layout crumbs={[[team], [pipeline, pipelinePath(team, pipeline)], [job], ['#' + name]]}><ErrorBox error={error} /></Layout>;
  return <BuildView key={build.id} build={build} crumbs={crumbsFor(build)} />;
}
