import { useEffect, useState } from 'preact/hooks';
import { api, get, getPage, streamEvents } from './api.js';
import { commentSummary } from './comment.js';
import { ago, duration, ErrorBox, Layout, LoginForMore, StatusBadge, usePoll, useUser } from './common.jsx';
import { jobRunning, jobStatus } from './dashboard.jsx';
import { can } from './dashmodel.js';
import { apiPipeline, enc, instanceVarsQuery, navigate, pipelinePath, withQuery } from './router.js';

// hidden turns a 401 or 403 into null (the part is not for this visitor).
function hidden(e) {
  if (e.status === 401 || e.status === 403) return null;
  throw e;
}

// PAGE is how many builds or versions a page lists, as in Concourse; a
// limit= in the page's address says otherwise.
const PAGE = 100;

// Pager links a list's newer and older pages (the API's Link headers).
function Pager({ page, links }) {
  if (!links || (!links.previous && !links.next)) return null;
  return (
    <div class="pager" data-testid="pager">
      {links.previous ? <a class="button small" data-testid="newer" href={withQuery(page, links.previous)}>‹ newer</a> : <span />}
      {links.next && <a class="button small" data-testid="older" href={withQuery(page, links.next)}>older ›</a>}
    </div>
  );
}

// listQuery is the API query of a list page: its place, limit= by default.
const listQuery = (pq) => (/(^|&)limit=/.test(pq || '') ? pq : withQuery('', pq, 'limit=' + PAGE).slice(1));

// BuildCommentCell shows a build's comment in a list: its first line as
// text, the whole in the cell's title.
function BuildCommentCell({ comment }) {
  const sum = commentSummary(comment);
  return (
    <td class="comment-cell" data-testid="build-comment-cell" title={sum.more ? comment : undefined}>
      {sum.text}{sum.more && !sum.text.endsWith('…') && <span class="muted"> …</span>}
    </td>
  );
}

export function Job({ team, pipeline, name, vq, pq }) {
  const base = apiPipeline(team, pipeline) + '/jobs/' + enc(name);
  const page = pipelinePath(team, pipeline) + '/jobs/' + enc(name);
  const api_ = (sub, q) => withQuery(base + sub, vq, q);
  const page_ = (sub) => withQuery(page + sub, vq);
  const res = usePoll(async () => {
    // An exposed pipeline's job builds are listed to anyone (a private
    // job's logs are not, which the build page says); a 401 or 403 here
    // asks to log in for them.
    const [job, builds] = await Promise.all([get(api_('')), getPage(api_('/builds', listQuery(pq))).catch(hidden)]);
    return { job, builds: builds && builds.items, links: builds && builds.links };
  }, 5000, [base, vq, pq]);
  // A pipeline-operator's (the server refuses others anyway).
  const mayOperate = can(useUser(), team, 'operate');
  const [err, setErr] = useState(null);
  const [, force] = useState(0);
  const d = res.data;
  const act = async (fn) => {
    setErr(null);
    try { await fn(); } catch (e) { setErr(e); }
  };
  const trigger = () => act(async () => {
    const b = await api('POST', api_('/builds'));
    navigate(page_('/builds/' + enc(b.name)));
  });
  const rerun = (b) => act(async () => {
    const nb = await api('POST', api_('/builds/' + enc(b.name)));
    navigate(page_('/builds/' + enc(nb.name)));
  });
  const pause = () => act(async () => {
    await api('PUT', api_(d.job.paused ? '/unpause' : '/pause'));
    d.job.paused = !d.job.paused;
    force((x) => x + 1);
    setErr(null);
  });
  return (
    <Layout crumbs={[[team], [pipeline, withQuery(pipelinePath(team, pipeline), vq)], [name, page_('')]]}
      actions={d && d.builds && mayOperate && (
        <span>
          <button data-testid="pause-job" onClick={pause}>{d.job.paused ? 'unpause job' : 'pause job'}</button>
          <button class="primary" data-testid="trigger" disabled={d.job.disable_manual_trigger} onClick={trigger}>trigger build</button>
        </span>
      )}>
      <ErrorBox error={res.error || err} />
      {d && (
        <div>
          <h1 class={'job-title status-' + jobStatus(d.job) + (jobRunning(d.job) ? ' running' : '')} data-testid="job-title">
            {name} {d.job.paused && <span class="marker paused">paused</span>}
          </h1>
          {!d.builds && <LoginForMore />}
          {d.builds && <table class="builds" data-testid="builds">
            <thead><tr><th>build</th><th>status</th><th>started</th><th>duration</th><th>comment</th><th /></tr></thead>
            <tbody>
              {d.builds.map((b) => (
                <tr key={b.id} data-build={b.name}>
                  <td><a href={page_('/builds/' + enc(b.name))}>#{b.name}</a></td>
                  <td><StatusBadge status={b.status} /></td>
                  <td class="muted">{ago(b.start_time)}</td>
                  <td class="muted">{duration(b.start_time, b.end_time)}</td>
                  <BuildCommentCell comment={b.comment} />
                  <td>{mayOperate && <button class="small" onClick={() => rerun(b)}>rerun</button>}</td>
                </tr>
              ))}
            </tbody>
          </table>}
          {d.builds && d.builds.length === 0 && <div class="empty">no builds yet</div>}
          <Pager page={page_('')} links={d.links} />
        </div>
      )}
    </Layout>
  );
}

export function Resource({ team, pipeline, name, vq, pq }) {
  const base = apiPipeline(team, pipeline) + '/resources/' + enc(name);
  const page = pipelinePath(team, pipeline) + '/resources/' + enc(name);
  const api_ = (sub, q) => withQuery(base + sub, vq, q);
  const res = usePoll(async () => {
    const [resource, versions] = await Promise.all([get(api_('')), getPage(api_('/versions', listQuery(pq))).catch(hidden)]);
    return { resource, versions: versions && versions.items, links: versions && versions.links };
  }, 5000, [base, vq, pq]);
  const mayOperate = can(useUser(), team, 'operate');
  const [err, setErr] = useState(null);
  const [comment, setComment] = useState('');
  const [tick, setTick] = useState(0);
  const d = res.data;
  const act = async (fn) => {
    setErr(null);
    try { await fn(); setTick(tick + 1); } catch (e) { setErr(e); }
  };
  const pinned = d && d.resource.pinned_version;
  const pin = (v) => act(async () => {
    await api('PUT', api_('/versions/' + v.id + '/pin'));
    if (comment) await api('PUT', api_('/pin_comment'), { pin_comment: comment });
    d.resource.pinned_version = v.version;
    d.resource.pin_comment = comment;
  });
  const unpin = () => act(async () => {
    await api('PUT', api_('/unpin'));
    d.resource.pinned_version = null;
  });
  const toggle = (v) => act(async () => {
    await api('PUT', api_('/versions/' + v.id + (v.enabled ? '/disable' : '/enable')));
    v.enabled = !v.enabled;
  });
  const check = () => act(async () => {
    const b = await api('POST', api_('/check'), { from: null });
    if (b && b.id) d.resource.build = b;
  });
  const same = (a, b) => a && b && JSON.stringify(a) === JSON.stringify(b);
  const [open, setOpen] = useState({});
  const toggleBuilds = (v) => setOpen(Object.assign({}, open, { [v.id]: !open[v.id] }));
  const last = d && d.resource.build;
  return (
    <Layout crumbs={[[team], [pipeline, withQuery(pipelinePath(team, pipeline), vq)], [name, withQuery(page, vq)]]}
      actions={d && d.versions && mayOperate && <button class="primary" data-testid="check" onClick={check}>check now</button>}>
      <ErrorBox error={res.error || err} />
      {d && (
        <div>
          <h1>{name} <span class="muted">{d.resource.type}</span></h1>
          {last && (
            <div class={'check status-' + last.status} data-testid="last-check" data-status={last.status}>
              last check: <StatusBadge status={last.status} /> <a href={'/builds/' + last.id}>build {last.id}</a>{' '}
              {(last.status === 'errored' || last.status === 'failed') && <CheckError id={last.id} />}
            </div>
          )}
          {pinned && (
            <div class="banner pinned" data-testid="pinned">
              pinned to <code>{JSON.stringify(pinned)}</code>{d.resource.pin_comment && <span> — {d.resource.pin_comment}</span>}
              {mayOperate && !d.resource.pinned_in_config && <button data-testid="unpin" onClick={unpin}>unpin</button>}
            </div>
          )}
          {!pinned && mayOperate && (
            <div class="pin-comment">
              <input placeholder="comment for the next pin" value={comment} data-testid="pin-comment" onInput={(e) => setComment(e.target.value)} />
            </div>
          )}
          {!d.versions && <LoginForMore />}
          {d.versions && <table class="versions" data-testid="versions">
            <thead><tr><th>version</th><th>metadata</th><th /><th /></tr></thead>
            <tbody>
              {d.versions.map((v) => [
                <tr key={v.id} class={(v.enabled ? '' : 'disabled') + (same(v.version, pinned) ? ' pinned' : '')} data-version={v.id}>
                  <td>
                    <span class="caret" data-testid="version-builds-toggle" onClick={() => toggleBuilds(v)}>{open[v.id] ? '▾' : '▸'}</span>{' '}
                    <code>{Object.entries(v.version).map(([k, x]) => `${k}: ${x}`).join(', ')}</code>
                  </td>
                  <td class="muted">{(v.metadata || []).map((m) => `${m.name}: ${m.value}`).join(', ')}</td>
                  <td>{mayOperate && <button class="small" data-testid="toggle-version" onClick={() => toggle(v)}>{v.enabled ? 'disable' : 'enable'}</button>}</td>
                  <td>{!pinned && mayOperate && <button class="small" data-testid="pin" onClick={() => pin(v)}>pin</button>}</td>
                </tr>,
                open[v.id] && (
                  <tr key={v.id + '-builds'} class="version-builds-row">
                    <td colSpan={4}><VersionBuilds path={(sub) => api_('/versions/' + v.id + sub)} /></td>
                  </tr>
                ),
              ])}
            </tbody>
          </table>}
          {d.versions && d.versions.length === 0 && <div class="empty">no versions yet</div>}
          <Pager page={withQuery(page, vq)} links={d.links} />
        </div>
      )}
    </Layout>
  );
}

// VersionBuilds lists the builds a version went into and came out of.
function VersionBuilds({ path }) {
  const res = usePoll(async () => {
    const [inputTo, outputOf] = await Promise.all([get(path('/input_to')), get(path('/output_of'))]);
    return { inputTo, outputOf };
  }, 5000, [path('')]);
  const d = res.data;
  const list = (title, testid, builds) => (
    <div class="version-builds" data-testid={testid}>
      <span class="muted">{title}:</span>{' '}
      {builds.length === 0 && <span class="muted">none</span>}
      {builds.map((b) => (
        <a key={b.id} class={'build-link status-' + b.status} data-build-id={b.id}
          href={withQuery(pipelinePath(b.team_name, b.pipeline_name) + '/jobs/' + enc(b.job_name) + '/builds/' + enc(b.name), instanceVarsQuery(b.pipeline_instance_vars))}>
          {b.job_name} #{b.name}
        </a>
      ))}
    </div>
  );
  return (
    <div>
      <ErrorBox error={res.error} />
      {d && list('input to', 'input-to', d.inputTo)}
      {d && list('output of', 'output-of', d.outputOf)}
    </div>
  );
}

// CheckError shows what a failed check said: its build's output and
// errors, read from the build's events (a check's are short).
function CheckError({ id }) {
  const [text, setText] = useState('');
  useEffect(() => {
    let out = '';
    const stop = streamEvents(id, (ev) => {
      const d = ev.data || {};
      if (ev.event === 'log') out += d.payload || '';
      else if (ev.event === 'error') out += (out && !out.endsWith('\n') ? '\n' : '') + d.message + '\n';
      else return;
      setText(out);
    }, () => {}, () => {});
    return stop;
  }, [id]);
  return (
    <div class="check-error" data-testid="check-error">
      <div>the check failed{text ? ':' : ''}</div>
      {text && <pre>{text.replace(/\x1b\[[0-9;]*m/g, '')}</pre>}
    </div>
  );
}
