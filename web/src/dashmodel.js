// The dashboard's pure logic (unit-tested in web/test/dashmodel.test.mjs).

export const jobStatus = (j) => (j.finished_build ? j.finished_build.status : 'pending');
export const jobRunning = (j) => !!(j.next_build && j.next_build.status === 'started');

// pipelineStatus is what status: filters on, as Concourse's dashboard.
export function pipelineStatus(p) {
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

const teamMatches = (f, team) => !f.teams.length || f.teams.some((t) => team.toLowerCase().includes(t));

export function keep(f, p) {
  if (!teamMatches(f, p.team_name)) return false;
  if (f.statuses.length && !f.statuses.includes(pipelineStatus(p))) return false;
  return f.words.every((w) => p.name.toLowerCase().includes(w));
}

// teamsShown are the teams to draw in order: those with a pipeline shown,
// then, as Concourse shows its members, the caller's teams with none (only
// while the filter names no status or text, which an empty team cannot
// match).
export function teamsShown(f, shown, teams) {
  const out = [...new Set(shown.map((p) => p.team_name))];
  if (f.statuses.length || f.words.length) return out;
  for (const t of teams || []) if (!out.includes(t.name) && teamMatches(f, t.name)) out.push(t.name);
  return out;
}

// stages groups jobs by their depth in the passed: chain (a job with no
// passed: constraint is stage 0, a job is one stage right of the deepest
// job it passes from), as Concourse's pipeline preview draws them; a cycle
// or a constraint on an unknown job does not deepen a stage.
export function stages(jobs) {
  const byName = new Map(jobs.map((j) => [j.name, j]));
  const depth = new Map();
  const visiting = new Set();
  const depthOf = (j) => {
    if (depth.has(j.name)) return depth.get(j.name);
    if (visiting.has(j.name)) return -1;
    visiting.add(j.name);
    let d = 0;
    for (const inp of j.inputs || []) {
      for (const up of inp.passed || []) {
        const u = byName.get(up);
        if (u) d = Math.max(d, depthOf(u) + 1);
      }
    }
    visiting.delete(j.name);
    depth.set(j.name, d);
    return d;
  };
  const out = [];
  for (const j of jobs) {
    const d = depthOf(j);
    while (out.length <= d) out.push([]);
    out[d].push(j);
  }
  return out.filter((s) => s.length);
}

// Roles in order of what they may do (Concourse's).
const roleRank = { viewer: 1, 'pipeline-operator': 2, member: 3, owner: 4 };
const actionRank = { pause: 2, comment: 2, operate: 2, expose: 3 };

// can says whether user (GET /api/v1/user) may pause (and unpause) a
// pipeline of team, expose (and hide) it, comment on its builds, or
// operate them (trigger, rerun, resume, abort: a pipeline-operator's).
export function can(user, team, action) {
  if (!user) return false;
  if (user.is_admin) return true;
  const best = Math.max(0, ...((user.teams || {})[team] || []).map((r) => roleRank[r] || 0));
  return best >= actionRank[action];
}

// toggleFavorite adds or removes a pipeline's id from the favourites.
export function toggleFavorite(favs, id) {
  return favs.includes(id) ? favs.filter((x) => x !== id) : [...favs, id];
}

// parseFavorites reads what localStorage holds: a JSON list of pipeline ids.
export function parseFavorites(text) {
  try {
    const v = JSON.parse(text || '[]');
    return Array.isArray(v) ? v.filter((x) => Number.isInteger(x)) : [];
  } catch (_) {
    return [];
  }
}

// checkFailing maps a pipeline's id to the names of its resources whose
// last check failed or errored.
export function checkFailing(resources) {
  const out = new Map();
  for (const r of resources || []) {
    if (!r.build || (r.build.status !== 'failed' && r.build.status !== 'errored')) continue;
    if (!out.has(r.pipeline_id)) out.set(r.pipeline_id, []);
    out.get(r.pipeline_id).push(r.name);
  }
  return out;
}
