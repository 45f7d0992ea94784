// A step's audit record as the build page shows it (src/steprecord.js):
// its timeline, what its container used, and where its outputs download.

// MOMENTS are the moments of a step people read, with where each comes
// from: the server's pod timeline (timeline.json: the ATC's own clock and
// the kubelet's pod status, to the second) or the sidecar's phases
// (result.json, to the millisecond).
export const MOMENTS = [
  { key: 'queued', label: 'queued', title: 'the server began the step: its pod is about to be declared', pod: 'queued' },
  { key: 'pod_created', label: 'pod created', title: 'the step pod was created (Kubernetes, to the second)', pod: 'pod_created' },
  { key: 'scheduled', label: 'scheduled', title: 'the pod was bound to a node (PodScheduled, to the second)', pod: 'scheduled' },
  { key: 'sidecar_started', label: 'sidecar started', title: "the step's sidecar connected to the server", phase: 'sidecar_started' },
  { key: 'waiting_for_turn', label: 'waiting for its turn', title: 'declared ahead: the pod waited for the go-ahead', phase: 'waiting_for_turn' },
  { key: 'image_pulled', label: 'image pulled', title: "the step's image was pulled and its container started (to the second)", pod: 'step_container_started' },
  { key: 'inputs_fetched', label: 'inputs fetched', title: 'every input was in place, digests checked', phase: 'inputs_fetched' },
  { key: 'running', label: 'running', title: "the step's process was started", phase: 'running' },
  { key: 'process_exited', label: 'process exited', title: "the step's process exited", phase: 'process_exited' },
  { key: 'outputs_uploaded', label: 'outputs uploaded', title: 'the outputs and caches were stored', phase: 'outputs_uploaded' },
  { key: 'ended', label: 'ended', title: 'the sidecar reported the end of the step', phase: 'finished' },
];

function ms(t) {
  if (!t) return null;
  const v = Date.parse(t);
  // Go's zero time ("0001-01-01T00:00:00Z") is no moment.
  return Number.isNaN(v) || v <= 0 ? null : v;
}

// timeline merges a step's record (result.json) and its pod timeline
// (timeline.json, or nothing) into the moments that happened, in the order
// they happened; each has `at` (ms since the epoch), `coarse` (known to the
// second only: the kubelet's) and `offset` (ms since the first, never
// negative). Moments are in their logical order unless their times say
// for certain that one came first: a kubelet time T means some moment in
// [T, T+1 s). A phase passed twice (a gated step's inputs) counts the
// last time; the sidecar's end falls back to the record's finished_at.
export function timeline(record, pod) {
  const phases = new Map();
  for (const p of (record && record.phases) || []) {
    const at = ms(p.at);
    if (at !== null) phases.set(p.name, at);
  }
  if (!phases.has('finished') && record && ms(record.finished_at) !== null) phases.set('finished', ms(record.finished_at));
  const out = [];
  for (const m of MOMENTS) {
    const at = m.pod ? ms(pod && pod[m.pod]) : phases.get(m.phase);
    if (at !== null && at !== undefined) out.push({ ...m, at, coarse: !!m.pod && m.pod !== 'queued' });
  }
  const latest = (m) => m.at + (m.coarse ? 999 : 0);
  // Each swap undoes one certain inversion: this ends.
  for (let moved = true; moved;) {
    moved = false;
    for (let i = 0; i + 1 < out.length; i++) {
      if (latest(out[i + 1]) < out[i].at) {
        [out[i], out[i + 1]] = [out[i + 1], out[i]];
        moved = true;
      }
    }
  }
  const first = out.length ? Math.min(...out.map((m) => m.at)) : 0;
  return out.map((m) => ({ ...m, offset: Math.max(0, m.at - first) }));
}

// timeOfDay is a moment's local time of day, to the millisecond (to the
// second for what is known only to the second).
export function timeOfDay(at, coarse) {
  const d = new Date(at);
  const two = (n) => String(n).padStart(2, '0');
  const s = `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
  return coarse ? s : s + '.' + String(d.getMilliseconds()).padStart(3, '0');
}

// seconds writes a span of milliseconds as people read it.
export function seconds(msSpan) {
  const s = msSpan / 1000;
  if (s < 10) return s.toFixed(2) + ' s';
  if (s < 120) return s.toFixed(1) + ' s';
  return Math.floor(s / 60) + 'm ' + Math.round(s % 60) + 's';
}

// bytes is a byte count as people read it.
export function bytes(n) {
  if (n < 1024) return n + ' B';
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  for (; v >= 1024 && i < units.length - 1; i++) v /= 1024;
  return v.toFixed(v < 10 ? 1 : 0) + ' ' + units[i];
}

// usage says what the step's container used, or that it is not known
// (the kernel does not offer it, or the process never ran): never a guess.
export function usage(u) {
  return {
    memory: u && u.memory_peak_bytes > 0 ? bytes(u.memory_peak_bytes) : 'not available',
    cpu: u && u.cpu_seconds > 0 ? seconds(u.cpu_seconds * 1000) : 'not available',
  };
}

// outputURL is where an output of a step of a build downloads (a tar).
export function outputURL(buildID, stepID, name) {
  return `/api/v1/builds/${buildID}/outputs/${encodeURIComponent(stepID)}/${encodeURIComponent(name)}`;
}

// podSpecURL is a step's declared pod spec in the audit trail.
export function podSpecURL(buildID, stepID) {
  return `/api/v1/builds/${buildID}/audit/steps/${encodeURIComponent(stepID)}/pod.yaml`;
}

// filenameOf reads a Content-Disposition's filename, or gives fallback.
export function filenameOf(header, fallback) {
  const m = /filename="([^"]+)"/.exec(header || '');
  return m ? m[1] : fallback;
}
