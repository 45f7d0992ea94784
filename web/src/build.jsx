import { AnsiUp } from 'ansi_up';
import {
  elementScroll, measureElement, observeElementOffset, observeElementRect, Virtualizer,
} from '@tanstack/virtual-core';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { api, get, getCancellable, getToken, streamEvents } from './api.js';
import { addAfter, addBefore, findLine, newWindow } from './logpages.js';
import { settle } from './buildstate.js';
import { bytes, filenameOf, outputURL, podSpecURL, seconds, timeline, timeOfDay, usage } from './steprecord.js';
import { CopyButton, duration, ErrorBox, Layout, LoginForMore, StatusBadge, useUser } from './common.jsx';
import { commentProblem } from './comment.js';
import { can } from './dashmodel.js';
import { apiPipeline, enc, instanceVarsQuery, navigate, pipelinePath, varsLabel, withQuery } from './router.js';

const LINE = 18; // px: a line's height unless lines wrap

// BIG is the stored size (compressed) from which a finished build's log is
// read by range (the step's end first, earlier pages as they are scrolled
// to) rather than streamed whole: a 10 GiB log never enters the page.
const BIG = 1 << 20;

// PAGE is how many lines a page of a log read by range holds at least.
const PAGE = 500;

const WRAP_KEY = 'porter.wrap';

function newAnsi() {
  const a = new AnsiUp();
  a.use_classes = true;
  // A log's OSC-8 links are the build's words, not the app's: each opens
  // as a plain page in a new tab, without this tab as its opener and
  // without a referrer (never routed within the app).
  const link = a.process_hyperlink.bind(a);
  a.process_hyperlink = (pkt) => link(pkt).replace(/^<a /, '<a target="_blank" rel="noopener noreferrer" data-log-link ');
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
    // (origin.source is the stream, stdout or stderr: no name.)
    s = newStep(id, 'step', id);
    st.steps.set(id, s);
    st.orphans.push({ type: 'leaf', step: s });
  }
  switch (ev.event) {
    case 'log': {
      const text = s.partial + (d.payload || '');
      const parts = text.split('\n');
      s.partial = parts.pop();
      // A line is named by where it ends: the k-th newline of record id's
      // piece (the partial before holds none).
      parts.forEach((p, k) => {
        const line = p.replace(/\r$/, '');
        // Most lines have no escape codes: they are kept as text (Preact
        // escapes them when shown); only the others go through ansi_up,
        // in order, so colors carry across lines.
        if (line.indexOf('\x1b') < 0 && plain(s.ansi)) s.lines.push({ t: d.time, text: line, id: ev.id, k });
        else s.lines.push({ t: d.time, html: s.ansi.ansi_to_html(line), id: ev.id, k });
      });
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
        if (d.metadata) s.metadata = d.metadata;
      } else if (ev.event === 'selected-worker') {
        s.worker = d.selected_worker;
      }
  }
}

// when is a time in full, for a title on hover.
export function when(t) {
  return t ? new Date(t * 1000).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'long' }) : '';
}

function clock(t) {
  if (!t) return '';
  const d = new Date(t * 1000);
  return d.toTimeString().slice(0, 8);
}

// LogView renders only the lines on screen (TanStack Virtual), so a
// 100,000-line log costs what 40 lines do; it follows the end while the
// reader is at the bottom. Lines wrap if wrap says so: they are measured
// then, else all LINE tall. onTop and onBottom are called when the reader
// nears an end (a log read by range loads the page there); shift moves
// the view by lines that came (or went) in front; target is a line to
// show and mark (a search's hit).
function LogView({ lines, partial, wrap, version, onTop, onBottom, shift, target, info }) {
  const el = useRef(null);
  const [, force] = useState(0);
  const follow = useRef(!target);
  const count = lines.length + (partial ? 1 : 0);
  const vref = useRef(null);
  if (!vref.current) {
    vref.current = new Virtualizer({
      count, getScrollElement: () => el.current, estimateSize: () => LINE, overscan: 30,
      scrollToFn: elementScroll, observeElementRect, observeElementOffset, measureElement,
      onChange: () => force((x) => x + 1),
    });
  }
  const v = vref.current;
  v.setOptions({ ...v.options, count });
  useLayoutEffect(() => v._didMount(), []);
  // Sizes measured for wrapped lines do not hold for the other mode, nor
  // for lines that moved (a page came in front).
  useLayoutEffect(() => { v.measure(); }, [wrap]);
  useLayoutEffect(() => {
    if (!shift || !el.current) return;
    if (wrap) v.measure();
    el.current.scrollTop += shift.n * LINE;
  }, [shift && shift.seq]);
  useLayoutEffect(() => {
    if (!target || target.index < 0) return;
    follow.current = false;
    v.scrollToIndex(target.index, { align: 'center' });
  }, [target && target.seq]);
  useLayoutEffect(() => {
    v._willUpdate();
    if (follow.current && el.current && count) el.current.scrollTop = el.current.scrollHeight;
  });
  const onScroll = () => {
    const e = el.current;
    follow.current = e.scrollTop + e.clientHeight >= e.scrollHeight - LINE * 2;
    if (onTop && e.scrollTop < LINE * 20) onTop();
    if (onBottom && e.scrollTop + e.clientHeight > e.scrollHeight - LINE * 20) onBottom();
  };
  const items = v.getVirtualItems();
  const hit = target && target.index;
  return (
    <div class={'log' + (wrap ? ' wrap' : '')} ref={el} onScroll={onScroll} data-testid="log" data-lines={count} data-version={version}
      data-from={info && info.from} data-start={info && String(info.start)} data-end={info && String(info.end)}>
      <div style={{ height: v.getTotalSize() + 'px', position: 'relative' }}>
        {items.map((it) => {
          const line = it.index < lines.length ? lines[it.index] : { t: 0, html: newAnsi().ansi_to_html(partial) };
          // A line read by range is colored on its own (colors do not carry
          // across pages).
          const html = line.html !== undefined ? line.html : (line.text.indexOf('\x1b') >= 0 ? newAnsi().ansi_to_html(line.text) : undefined);
          return (
            <div key={it.key} class={'line' + (it.index === hit ? ' hit' : '')} data-index={it.index} ref={wrap ? v.measureElement : undefined}
              style={{ transform: `translateY(${it.start}px)` }}>
              <span class="ts" title={when(line.t)}>{clock(line.t)}</span>
              {html === undefined
                ? <span class="txt">{line.text}</span>
                : <span class="txt" dangerouslySetInnerHTML={{ __html: html }} />}
            </div>
          );
        })}
      </div>
    </div>
  );
}

// StreamedLog is a step's log as the events stream brought it (all of it).
function StreamedLog({ step, ctx }) {
  const [target, setTarget] = useState(null);
  const jump = ctx.jump && ctx.jump.step === step.id ? ctx.jump : null;
  useEffect(() => {
    if (!jump) return;
    // A hit in the line the log stops in is the partial one, last.
    const i = findLine(step.lines, jump.id, jump.k);
    setTarget({ index: i < 0 && step.partial ? step.lines.length : i, seq: jump.seq });
  }, [jump && jump.seq]);
  return <LogView lines={step.lines} partial={step.partial} wrap={ctx.wrap} version={ctx.version} target={target} />;
}

// RangedLog is a step's log read by range (GET /api/v1/builds/N/log): a
// window of pages, its end first, earlier or later pages loaded as the
// reader scrolls near an end; a search's hit loads the page it is in. The
// windows are the build's, by step id: a plan read again makes new step
// objects under the same components.
function RangedLog({ step, ctx }) {
  const id = step.id;
  const win = () => ctx.windows.get(id);
  const setWin = (w) => ctx.windows.set(id, w);
  const [, force] = useState(0);
  const [shift, setShift] = useState(null);
  const [target, setTarget] = useState(null);
  const [err, setErr] = useState(null);
  const busy = useRef(false);
  const alive = useRef(true);
  useEffect(() => () => { alive.current = false; }, []);
  const load = (query, fn, force_) => {
    if (busy.current && !force_) return;
    busy.current = true;
    get(`/api/v1/builds/${ctx.buildID}/log?step=${enc(id)}&limit=${PAGE}&${query}`)
      .then((pg) => { if (alive.current) { fn(pg); force((x) => x + 1); } }, (e) => alive.current && setErr(e))
      .finally(() => { busy.current = false; });
  };
  const jump = ctx.jump && ctx.jump.step === id ? ctx.jump : null;
  useEffect(() => {
    if (!win() && !jump) load('', (pg) => { setWin(newWindow(pg)); });
  }, [id]);
  useEffect(() => {
    if (!jump) return;
    const have = win() ? findLine(win().lines, jump.id, jump.k) : -1;
    if (have >= 0) { setTarget({ index: have, seq: jump.seq }); return; }
    load(`before=${jump.id + 1}`, (pg) => {
      setWin(newWindow(pg));
      setTarget({ index: findLine(win().lines, jump.id, jump.k), seq: jump.seq });
    }, true);
  }, [jump && jump.seq]);
  const w = win();
  if (err) return <ErrorBox error={err} />;
  if (!w) return <div class="muted">reading the log…</div>;
  if (!w.lines.length && w.start && w.end) return <div class="muted no-log">no output</div>;
  const onTop = w.start ? null : () => load(`before=${w.from}`, (pg) => {
    setWin(addBefore(win(), pg));
    setShift({ n: win().added, seq: (shift ? shift.seq : 0) + 1 });
    if (target) setTarget({ index: target.index + win().added, seq: target.seq });
  });
  const onBottom = w.end ? null : () => load(`after=${w.to}`, (pg) => {
    setWin(addAfter(win(), pg));
    if (win().dropped) setShift({ n: -win().dropped, seq: (shift ? shift.seq : 0) + 1 });
  });
  return <LogView lines={w.lines} wrap={ctx.wrap} version={ctx.version} onTop={onTop} onBottom={onBottom} shift={shift} target={target}
    info={{ from: w.from, start: w.start, end: w.end }} />;
}

// LogSearch searches the build's whole log on the server (the page holds
// only a part of a huge log, so the browser's find cannot); a hit opens its
// step and shows its line.
function LogSearch({ buildID, steps, onJump, inputRef }) {
  const [q, setQ] = useState('');
  const [res, setRes] = useState(null);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const ctrl = useRef(null);
  useEffect(() => () => ctrl.current && ctrl.current.abort(), []);
  const search = (cursor) => {
    if (ctrl.current) ctrl.current.abort();
    if (!q) { setRes(null); return; }
    const c = new AbortController();
    ctrl.current = c;
    setBusy(true);
    setErr(null);
    const path = `/api/v1/builds/${buildID}/log/search?q=${encodeURIComponent(q)}&limit=100` + (cursor ? '&cursor=' + encodeURIComponent(cursor) : '');
    getCancellable(path, c.signal).then((r) => {
      if (ctrl.current !== c) return;
      setRes((old) => (cursor && old ? { ...r, hits: [...old.hits, ...r.hits] } : r));
    }, (e) => { if (ctrl.current === c && e.name !== 'AbortError') setErr(e); })
      .finally(() => { if (ctrl.current === c) setBusy(false); });
  };
  const cancel = () => { if (ctrl.current) ctrl.current.abort(); ctrl.current = null; setBusy(false); };
  return (
    <div class="log-search" data-testid="log-search">
      <form onSubmit={(e) => { e.preventDefault(); search(''); }}>
        <input ref={inputRef} type="search" data-testid="log-search-input" placeholder="search the whole log (Ctrl-F)" value={q}
          onInput={(e) => setQ(e.currentTarget.value)}
          onKeyDown={(e) => { if (e.key === 'Escape') { cancel(); e.currentTarget.blur(); } }} />
        <button type="submit" class="small">search</button>
        {busy && <span class="muted"> searching… <button type="button" class="small" onClick={cancel}>stop</button></span>}
      </form>
      <ErrorBox error={err} />
      {res && (
        <div class="hits" data-testid="search-hits" data-count={res.hits.length}>
          {res.hits.length === 0 && !res.more && <div class="muted">no line holds “{q}”</div>}
          {res.hits.map((h, i) => {
            const st = steps.get(h.step);
            return (
              <div key={i} class="hit-row" data-testid="search-hit" data-id={h.id} data-k={h.k} onClick={() => onJump(h)}>
                <span class="muted">{st ? st.name : h.step}:</span> <span class="txt">{h.text}</span>
              </div>
            );
          })}
          {res.more && <button class="small" data-testid="search-more" disabled={busy} onClick={() => search(res.next)}>search further</button>}
        </div>
      )}
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

// AuditRecord is what the step's sidecars wrote to the audit trail (Porter's
// own): where it ran, its image, how it ended, its timeline, what its
// container used, and each artifact it took in or gave out with its size
// and digest, as stored in the blobstore (outputs download as tars). The
// build's audit is read once, when a step's record is first opened.
function AuditRecord({ step, ctx }) {
  const [records, setRecords] = useState(null);
  const [err, setErr] = useState(null);
  useEffect(() => {
    let live = true;
    ctx.audit().then((a) => {
      if (!live) return;
      const mine = Object.values((a && a.steps) || {}).filter((r) => r && r.step_name === step.name);
      mine.sort((x, y) => (x.started_at || '').localeCompare(y.started_at || ''));
      setRecords(mine.map((r) => ({ record: r, pod: ((a && a.timelines) || {})[r.step_id] || null })));
    }, (e) => live && setErr(e));
    return () => { live = false; };
  }, [step.name]);
  if (err) return <ErrorBox error={err} />;
  if (!records) return <div class="muted">reading the audit trail…</div>;
  if (!records.length) return <div class="muted" data-testid="audit">no audit record (the step ran no pod)</div>;
  return (
    <div class="audit" data-testid="audit">
      {records.map(({ record: r, pod }) => <StepRecord key={r.step_id} r={r} pod={pod} buildID={ctx.buildID} />)}
    </div>
  );
}

function StepRecord({ r, pod, buildID }) {
  const [spec, setSpec] = useState(null);
  const u = usage(r.usage);
  const rows = (kind, list) => (list || []).map((a) => (
    <tr key={kind + a.name + a.key} data-artifact={a.name} data-kind={kind}>
      <td class="muted">{kind}</td><td>{a.name}</td><td title="as stored in the blobstore (compressed)">{bytes(a.size || 0)}</td>
      <td><code title={a.key}>{(a.digest || '').slice(0, 23)}</code></td>
      <td>{kind === 'output' && <Download buildID={buildID} stepID={r.step_id} name={a.name} />}</td>
    </tr>
  ));
  const showSpec = () => {
    if (spec) return setSpec(null);
    setSpec({ loading: true });
    fetchText(podSpecURL(buildID, r.step_id)).then((text) => setSpec({ text }), (error) => setSpec({ error }));
  };
  return (
    <div class="audit-record" data-step-id={r.step_id}>
      <div class="muted">
        pod <code>{r.pod || r.step_id}</code>{pod && pod.node && <span> on <code>{pod.node}</code></span>} · image <code>{r.image}</code> · {r.result}
        {r.exit_status !== undefined && ` (exit ${r.exit_status})`}
      </div>
      <div class="usage" data-testid="usage" data-memory-peak={(r.usage && r.usage.memory_peak_bytes) || 0} data-cpu-seconds={(r.usage && r.usage.cpu_seconds) || 0}
        title="the step container's cgroup (its process tree and porter's entrypoint), read when the process exited; memory includes page cache">
        peak memory <b>{u.memory}</b> · CPU time <b>{u.cpu}</b>
      </div>
      <Timeline moments={timeline(r, pod)} />
      <table class="audit-artifacts"><tbody>
        {rows('input', r.inputs)}{rows('output', r.outputs)}{rows('cache', r.caches)}
      </tbody></table>
      <button class="small" data-testid="pod-spec-toggle" onClick={showSpec}>{spec ? 'hide pod spec' : 'pod spec'}</button>
      {spec && (spec.error ? <ErrorBox error={spec.error} /> : spec.loading ? <div class="muted">reading pod.yaml…</div>
        : <pre class="pod-spec" data-testid="pod-spec">{spec.text}</pre>)}
      <details><summary class="muted">result.json</summary><pre>{JSON.stringify(r, null, 2)}</pre></details>
    </div>
  );
}

// Timeline shows a step's moments with a bar from the first to each.
function Timeline({ moments }) {
  if (!moments.length) return <div class="muted" data-testid="timeline">no timeline recorded</div>;
  const span = Math.max(1, moments[moments.length - 1].offset);
  return (
    <table class="timeline" data-testid="timeline"><tbody>
      {moments.map((m) => (
        <tr key={m.key} data-moment={m.key} data-at={m.at} title={m.title}>
          <td class="muted">{m.label}</td>
          <td><code>{timeOfDay(m.at, m.coarse)}</code></td>
          <td class="num">+{seconds(m.offset)}</td>
          <td class="bar-cell"><span class="bar" style={{ width: (100 * m.offset / span).toFixed(1) + '%' }} /></td>
        </tr>
      ))}
    </tbody></table>
  );
}

// fetchText reads a text answer of the API with the user's token.
async function fetchText(path) {
  const res = await fetch(path, { headers: authHeaders() });
  const text = await res.text();
  if (!res.ok) throw new Error(errorDetail(text) || res.statusText);
  return text;
}

function authHeaders() {
  const t = getToken();
  return t ? { Authorization: 'Bearer ' + t } : {};
}

function errorDetail(text) {
  try {
    const v = JSON.parse(text);
    if (v.errors && v.errors[0]) return v.errors[0].detail || v.errors[0].title || v.errors[0];
  } catch (_) { /* plain text */ }
  return text.trim();
}

// Download saves an output as a tar. The token travels only in a header,
// so the link is followed by fetch and handed to the browser as a file;
// the address is the link's own, for a public build or a script.
function Download({ buildID, stepID, name }) {
  const [state, setState] = useState('');
  const url = outputURL(buildID, stepID, name);
  const save = async (e) => {
    e.preventDefault();
    setState('downloading…');
    try {
      const res = await fetch(url, { headers: authHeaders() });
      if (!res.ok) throw new Error(errorDetail(await res.text()) || res.statusText);
      const blob = await res.blob();
      const a = document.createElement('a');
      a.href = URL.createObjectURL(blob);
      a.download = filenameOf(res.headers.get('Content-Disposition'), name + '.tar');
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      setState('');
    } catch (err) {
      setState(String(err.message || err));
    }
  };
  return (
    <span>
      <a href={url} data-testid="output-download" data-output={name} onClick={save}>download .tar</a>
      {state && <span class="muted"> {state}</span>}
    </span>
  );
}

function Leaf({ step, ctx }) {
  const [open, setOpen] = useState(null);
  const [record, setRecord] = useState(false);
  // A search's hit in this step opens it.
  const jumped = ctx.jump && ctx.jump.step === step.id ? ctx.jump.seq : 0;
  useEffect(() => { if (jumped) setOpen(true); }, [jumped]);
  const ran = step.status !== 'pending' && step.status !== 'not run';
  const auto = ran && (step.status !== 'succeeded' || ctx.leaves <= 1);
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
          <span class="muted" data-testid="step-times" title={step.start ? `started ${when(step.start)}` + (step.end ? `, ended ${when(step.end)}` : '') : ''}>{duration(step.start, step.end)} </span>
          {status === 'waiting' && <span class="muted" title="its pod is up, declared ahead of its turn, and waits for the go-ahead">pod ready </span>}
          <StatusBadge status={status} />
        </span>
      </div>
      {expanded && (
        <div class="step-body">
          {ran && (
            <div class="intercept muted" data-testid="intercept">
              intercept: <code>{cmd}</code>{' '}
              <CopyButton text={cmd} />
            </div>
          )}
          {step.version && (
            <table class="get-version" data-testid="get-version">
              <tbody>
                {Object.entries(step.version).map(([k, v]) => <tr key={'v' + k}><td class="muted">{k}</td><td><code>{v}</code></td></tr>)}
                {(step.metadata || []).map((m, i) => <tr key={'m' + i} data-testid="get-metadata"><td class="muted">{m.name}</td><td>{m.value}</td></tr>)}
              </tbody>
            </table>
          )}
          {step.error && <div class="error step-error">{step.error}</div>}
          {ran && ctx.audit && (
            <button class="small" data-testid="audit-toggle" onClick={() => setRecord(!record)}>{record ? 'hide' : 'audit record'}</button>
          )}
          {record && <AuditRecord step={step} ctx={ctx} />}
          {ctx.ranged && (ran ? <RangedLog step={step} ctx={ctx} /> : <div class="muted no-log">did not run</div>)}
          {!ctx.ranged && (hasLog ? <StreamedLog step={step} ctx={ctx} /> : <div class="muted no-log">{ran ? 'no output' : 'did not run'}</div>)}
        </div>
      )}
    </div>
  );
}

// neighbours finds the builds of the same job just older and newer than
// b, with the job builds' paging (to= and from= by build id, as fly's).
async function neighbours(b) {
  if (!b.job_name) return {};
  const base = apiPipeline(b.team_name, b.pipeline_name) + '/jobs/' + enc(b.job_name) + '/builds';
  const vq = instanceVarsQuery(b.pipeline_instance_vars);
  const [older, newer] = await Promise.all([
    get(withQuery(base, vq, `to=${b.id - 1}&limit=1`)).catch(() => []),
    get(withQuery(base, vq, `from=${b.id + 1}&limit=1`)).catch(() => []),
  ]);
  return { prev: (older || [])[0], next: (newer || [])[0] };
}

export const SHORTCUTS = [
  ['h', 'the previous build'],
  ['l', 'the next build'],
  ['j', 'scroll down'],
  ['k', 'scroll up'],
  ['g', 'to the top'],
  ['G', 'to the bottom'],
  ['T', 'trigger a new build of the job'],
  ['R', 'rerun this build'],
  ['A', 'abort this build'],
  ['/', 'search the whole log'],
  ['Ctrl-F', 'search the whole log (on the server: the page holds only a part of a long log, so the browser\'s find cannot)'],
  ['?', 'show or hide this help'],
];

// BuildView shows a build by id: its plan as a step tree, filled by the
// build's events as they arrive.
function BuildView({ build: initial, crumbs }) {
  const [build, setBuild] = useState(initial);
  const st = useRef(null);
  const [version, setVersion] = useState(0);
  const [err, setErr] = useState(null);
  const [near, setNear] = useState({});
  const [help, setHelp] = useState(false);
  const [jump, setJump] = useState(null);
  const [wrap, setWrapState] = useState(() => localStorage.getItem(WRAP_KEY) === '1');
  const setWrap = (on) => { localStorage.setItem(WRAP_KEY, on ? '1' : '0'); setWrapState(on); };
  const searchBox = useRef(null);
  if (!st.current || st.current.id !== initial.id) {
    st.current = { id: initial.id, steps: new Map(), orphans: [], tree: null, status: initial.status, error: '', end: 0, done: false, leaves: 0, windows: new Map() };
  }
  useEffect(() => {
    const s = st.current;
    let frame = 0;
    const redraw = () => {
      if (!frame) frame = requestAnimationFrame(() => { frame = 0; setVersion((x) => x + 1); });
    };
    let live = true;
    // A job's build has its plan only once the scheduler starts it (until
    // then the API answers 404): ask again every second; steps whose events
    // came first keep their state.
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
      if (s.done) settle(s.steps, s.status);
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
    const finish = () => {
      s.done = true;
      settle(s.steps, s.status);
      // A build that ended before its plan was read: read it once more.
      if (!s.tree && !s.denied) { clearTimeout(planTimer); loadPlan(); }
      redraw();
    };
    // A finished build with a big log: its events but output (the outline),
    // and each step's output by range, never the whole log. Any other build
    // streams its events, live while it runs.
    let stop = () => {};
    const finished = initial.status !== 'pending' && initial.status !== 'started';
    (finished ? get(`/api/v1/builds/${initial.id}/log/outline`).catch(() => null) : Promise.resolve(null)).then((o) => {
      if (!live) return;
      if (o && o.stored_bytes > BIG) {
        s.ranged = true;
        for (const ev of o.events) apply(s, ev);
        finish();
        return;
      }
      stop = stream();
    });
    const stream = () => streamEvents(initial.id, (ev) => { apply(s, ev); redraw(); },
      () => {
        finish();
        get(`/api/v1/builds/${initial.id}`).then(setBuild).catch(() => {});
      },
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
  useEffect(() => {
    let live = true;
    neighbours(initial).then((n) => live && setNear(n), () => {});
    return () => { live = false; };
  }, [initial.id]);
  const s = st.current;
  const status = s.status || build.status;
  const running = status === 'started' || status === 'pending';
  const canAct = !s.denied && !!getToken();
  const user = useUser();
  // Trigger, rerun, resume and abort are a pipeline-operator's: shown once
  // the page knows the user may (the server refuses others anyway).
  const canOperate = canAct && can(user, build.team_name, 'operate');
  const vq = instanceVarsQuery(build.pipeline_instance_vars);
  const jobBase = build.job_name ? apiPipeline(build.team_name, build.pipeline_name) + '/jobs/' + enc(build.job_name) : '';
  const jobPage = build.job_name ? pipelinePath(build.team_name, build.pipeline_name) + '/jobs/' + enc(build.job_name) : '';
  const act = async (fn) => {
    setErr(null);
    try { await fn(); } catch (e) { setErr(e); }
  };
  const abort = () => act(() => api('PUT', `/api/v1/builds/${build.id}/abort`));
  const rerun = () => act(async () => {
    const nb = await api('POST', withQuery(jobBase + '/builds/' + enc(build.name), vq));
    navigate(withQuery(jobPage + '/builds/' + enc(nb.name), vq));
  });
  const trigger = () => act(async () => {
    const nb = await api('POST', withQuery(jobBase + '/builds', vq));
    navigate(withQuery(jobPage + '/builds/' + enc(nb.name), vq));
  });
  const buildPage = (b) => withQuery(jobPage + '/builds/' + enc(b.name), vq);
  // Concourse's keys on a build page (its help is ?).
  const keys = useRef(null);
  keys.current = (e) => {
    const find = () => {
      if (!searchBox.current) return;
      searchBox.current.focus();
      searchBox.current.select();
      e.preventDefault();
    };
    // The browser's find sees only the lines on screen: Ctrl-F (⌘-F)
    // searches the whole log on the server instead.
    if ((e.ctrlKey || e.metaKey) && !e.altKey && !e.shiftKey && (e.key === 'f' || e.key === 'F')) { find(); return; }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.isContentEditable)) return;
    switch (e.key) {
      case '/': find(); return;
      case '?': setHelp((h) => !h); break;
      case 'Escape': setHelp(false); break;
      case 'h': if (near.prev) navigate(buildPage(near.prev)); break;
      case 'l': if (near.next) navigate(buildPage(near.next)); break;
      case 'j': scrollBy(0, 60); break;
      case 'k': scrollBy(0, -60); break;
      case 'g': scrollTo(0, 0); break;
      case 'G': scrollTo(0, document.body.scrollHeight); break;
      case 'T': if (canOperate && jobBase && !build.disable_manual_trigger) trigger(); break;
      case 'R': if (canOperate && jobBase) rerun(); break;
      case 'A': if (canOperate && running) abort(); break;
      default: return;
    }
    e.preventDefault();
  };
  useEffect(() => {
    const on = (e) => keys.current(e);
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  }, []);
  // Porter's own: a failed job build resumes from its failed step (N.1).
  const resumable = jobBase && (status === 'failed' || status === 'errored') && s.done;
  const resume = () => act(async () => {
    const nb = await api('POST', `/api/v1/builds/${build.id}/resume`);
    navigate(withQuery(jobPage + '/builds/' + enc(nb.name), vq));
  });
  // The audit trail is written as steps end: it is offered once the build
  // has, to those who may read it, and read once.
  if (s.done && canAct && !s.auditRead) {
    let p = null;
    s.auditRead = () => (p = p || get(`/api/v1/builds/${build.id}/audit`));
  }
  const ctx = { buildID: build.id, target: 'TARGET', leaves: s.leaves, version, audit: s.auditRead, ranged: !!s.ranged, windows: s.windows, wrap, jump };
  const onJump = (h) => setJump({ step: h.step, id: h.id, k: h.k, seq: (jump ? jump.seq : 0) + 1 });
  const end = s.end || build.end_time;
  return (
    <Layout crumbs={crumbs}>
      <div class={'build-head status-' + status} data-testid="build-head" data-status={status}>
        <h1>{build.job_name ? `${build.job_name} #${build.name}` : `build #${build.id}`}</h1>
        <StatusBadge status={status} />
        <span class="muted" data-testid="build-times"
          title={(build.start_time ? `started ${when(build.start_time)}` : 'not started') + (end ? `\nended ${when(end)}` : '')}>
          {' '}{duration(build.start_time, end)}
        </span>
        {build.created_by && <span class="muted"> · by {build.created_by}</span>}
        {/* The build's own actions sit at the head's right end, where the
            user menu's width (it changes when the user is read) cannot
            move them under a pointer. */}
        <span class="build-actions">
          {near.prev && <a class="button small" data-testid="prev-build" title="previous build (h)" href={buildPage(near.prev)}>‹ #{near.prev.name}</a>}
          {near.next && <a class="button small" data-testid="next-build" title="next build (l)" href={buildPage(near.next)}>#{near.next.name} ›</a>}
          {canOperate && jobBase && <button class="small" data-testid="rerun-build" title="rerun with the same inputs (R)" onClick={rerun}>rerun</button>}
          {canOperate && jobBase && <button class="small" data-testid="trigger-build" title="trigger a new build (T)" disabled={build.disable_manual_trigger} onClick={trigger}>trigger</button>}
          {canOperate && resumable && <button class="small" data-testid="resume" title="a new build that reuses the steps that succeeded and runs from the failed one" onClick={resume}>resume</button>}
          {canOperate && running && <button class="danger" data-testid="abort" title="abort (A)" onClick={abort}>abort</button>}
          <button class={'small' + (wrap ? ' on' : '')} data-testid="wrap-toggle" aria-pressed={String(wrap)} title="wrap long lines"
            onClick={() => setWrap(!wrap)}>wrap</button>
          <button class="small" data-testid="help-toggle" title="keyboard shortcuts (?)" onClick={() => setHelp(!help)}>?</button>
        </span>
      </div>
      <BuildComment build={build} mayEdit={canAct && can(user, build.team_name, 'comment')} />
      {help && (
        <div class="shortcuts" data-testid="shortcuts">
          <b>keyboard shortcuts</b>
          <table><tbody>{SHORTCUTS.map(([k, what]) => <tr key={k}><td><kbd>{k}</kbd></td><td>{what}</td></tr>)}</tbody></table>
        </div>
      )}
      <ErrorBox error={err} />
      {s.error && <div class="error" data-testid="build-error">{s.error}</div>}
      {s.denied && <LoginForMore />}
      {!s.denied && <LogSearch buildID={build.id} steps={s.steps} onJump={onJump} inputRef={searchBox} />}
      <div class="steps" data-testid="steps" data-ranged={String(!!s.ranged)}>
        <StepView node={s.tree} ctx={ctx} />
        {s.orphans.map((n, i) => <StepView key={'o' + i} node={n} ctx={ctx} />)}
      </div>
      {s.done && !s.denied && <div class="muted end" data-testid="build-end">end of build</div>}
    </Layout>
  );
}

// BuildComment is the build's comment under its head, as text (never
// markup), with an editor for those who may write it (Concourse's
// SetBuildComment: pipeline-operator or above in the build's team).
function BuildComment({ build, mayEdit }) {
  const [saved, setSaved] = useState(build.comment || '');
  const [draft, setDraft] = useState(null); // null: not editing
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  // The build is read again as it ends: a comment written elsewhere shows.
  useEffect(() => { if (draft === null) setSaved(build.comment || ''); }, [build.comment]);
  if (draft !== null) {
    const problem = commentProblem(draft);
    const save = async () => {
      setBusy(true);
      setErr(null);
      try {
        await api('PUT', `/api/v1/builds/${build.id}/comment`, { comment: draft });
        setSaved(draft);
        setDraft(null);
      } catch (e) {
        setErr(e);
      }
      setBusy(false);
    };
    const cancel = () => { setDraft(null); setErr(null); };
    return (
      <div class="build-comment editing" data-testid="build-comment-editor">
        <textarea data-testid="comment-input" rows={4} value={draft} placeholder="a comment on this build (plain text)"
          onInput={(e) => setDraft(e.currentTarget.value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && !problem && !busy) { e.preventDefault(); save(); }
            if (e.key === 'Escape') { e.preventDefault(); cancel(); }
          }} />
        <div class="comment-bar">
          <button class="primary small" data-testid="save-comment" title="save (Ctrl-Enter)" disabled={busy || !!problem} onClick={save}>save</button>
          <button class="small" data-testid="cancel-comment" title="cancel (Esc)" onClick={cancel}>cancel</button>
          {problem && <span class="comment-problem" data-testid="comment-problem">{problem}</span>}
        </div>
        <ErrorBox error={err} />
      </div>
    );
  }
  if (!saved && !mayEdit) return null;
  return (
    <div class="build-comment" data-testid="build-comment-box">
      {saved && <div class="comment-text" data-testid="build-comment">{saved}</div>}
      {mayEdit && (
        <button class="small" data-testid="edit-comment" onClick={() => setDraft(saved)}>{saved ? 'edit comment' : 'add comment'}</button>
      )}
    </div>
  );
}

function crumbsFor(b) {
  if (!b.pipeline_name) return [['build ' + b.id]];
  const pp = pipelinePath(b.team_name, b.pipeline_name);
  const vq = instanceVarsQuery(b.pipeline_instance_vars);
  const c = [[b.team_name], [b.pipeline_name + (vq ? ` (${varsLabel(b.pipeline_instance_vars)})` : ''), withQuery(pp, vq)]];
  if (b.job_name) c.push([b.job_name, withQuery(pp + '/jobs/' + enc(b.job_name), vq)]);
  else if (b.resource_name) c.push([b.resource_name, withQuery(pp + '/resources/' + enc(b.resource_name), vq)]);
  c.push(['#' + b.name]);
  return c;
}

// useBuild loads the build named by key. Until that build is loaded it
// answers none: the page never shows the build it showed before under the
// new address (it did for a frame after resume or prev/next).
function useBuild(load, key) {
  const [state, setState] = useState({ key: null, build: null, error: null });
  useEffect(() => {
    let live = true;
    load().then((build) => live && setState({ key, build, error: null }), (error) => live && setState({ key, build: null, error }));
    return () => { live = false; };
  }, [key]);
  return state.key === key ? state : { build: null, error: null };
}

export function Build({ id }) {
  const { build, error } = useBuild(() => get(`/api/v1/builds/${id}`), String(id));
  if (!build) return <Layout crumbs={[['build ' + id]]}><ErrorBox error={error} /></Layout>;
  return <BuildView key={build.id} build={build} crumbs={crumbsFor(build)} />;
}

export function JobBuild({ team, pipeline, job, name, vq }) {
  const path = withQuery(apiPipeline(team, pipeline) + '/jobs/' + enc(job) + '/builds/' + enc(name), vq);
  const { build, error } = useBuild(() => get(path), path);
  if (!build) return <Layout crumbs={[[team], [pipeline, pipelinePath(team, pipeline)], [job], ['#' + name]]}><ErrorBox error={error} /></Layout>;
  return <BuildView key={build.id} build={build} crumbs={crumbsFor(build)} />;
}
