// A step's audit record on the build page (src/steprecord.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bytes, filenameOf, outputURL, podSpecURL, seconds, timeline, usage } from '../src/steprecord.js';

const record = {
  started_at: '2026-11-29T10:00:01.100Z',
  finished_at: '2026-11-29T10:00:05.900Z',
  phases: [
    { name: 'sidecar_started', at: '2026-11-29T10:00:01.200Z' },
    { name: 'fetching_inputs', at: '2026-11-29T10:00:01.210Z' },
    { name: 'inputs_fetched', at: '2026-11-29T10:00:01.500Z' },
    { name: 'running', at: '2026-11-29T10:00:02.300Z' },
    { name: 'process_exited', at: '2026-11-29T10:00:04.300Z' },
    { name: 'uploading_outputs', at: '2026-11-29T10:00:04.310Z' },
    { name: 'outputs_uploaded', at: '2026-11-29T10:00:04.800Z' },
    { name: 'finished', at: '2026-11-29T10:00:04.820Z' },
  ],
};
const pod = {
  queued: '2026-11-29T10:00:00.250Z',
  pod_created: '2026-11-29T10:00:00Z',
  scheduled: '2026-11-29T10:00:00Z',
  initialized: '2026-11-29T10:00:01Z',
  step_container_started: '2026-11-29T10:00:02Z',
};

test('the moments of the sidecar and of the pod, earliest first, ties in their logical order', () => {
  const t = timeline(record, pod);
  assert.deepEqual(t.map((m) => m.key), ['pod_created', 'scheduled', 'queued', 'sidecar_started', 'inputs_fetched',
    'image_pulled', 'running', 'process_exited', 'outputs_uploaded', 'ended']);
  assert.equal(t[0].offset, 0);
  assert.equal(t.find((m) => m.key === 'running').offset, 2300);
  // The sidecar's own end, not finished_at (written after the audit journal).
  assert.equal(t.at(-1).at, Date.parse('2026-11-29T10:00:04.820Z'));
});

test('a gated step counts the last time it fetched inputs and shows its wait', () => {
  const gated = { phases: [
    { name: 'sidecar_started', at: '2026-11-29T10:00:01Z' },
    { name: 'inputs_fetched', at: '2026-11-29T10:00:01.5Z' },
    { name: 'waiting_for_turn', at: '2026-11-29T10:00:01.6Z' },
    { name: 'inputs_fetched', at: '2026-11-29T10:00:09Z' },
  ] };
  const t = timeline(gated, null);
  assert.deepEqual(t.map((m) => m.key), ['sidecar_started', 'waiting_for_turn', 'inputs_fetched']);
  assert.equal(t[2].offset, 8000);
});

test("what did not happen is left out: Go's zero time, no timeline, an old record without phases", () => {
  const t = timeline({ finished_at: '2026-11-29T10:00:05Z' }, { queued: '2026-11-29T10:00:00Z', scheduled: '0001-01-01T00:00:00Z' });
  assert.deepEqual(t.map((m) => [m.key, m.offset]), [['queued', 0], ['ended', 5000]]);
  assert.deepEqual(timeline(null, null), []);
});

test('usage says "not available" rather than a wrong number', () => {
  assert.deepEqual(usage({ memory_peak_bytes: 70 * 1024 * 1024, cpu_seconds: 1.25 }), { memory: '70 MiB', cpu: '1.25 s' });
  assert.deepEqual(usage({ cpu_seconds: 0.5 }), { memory: 'not available', cpu: '0.50 s' });
  assert.deepEqual(usage(undefined), { memory: 'not available', cpu: 'not available' });
});

test('sizes and spans as people read them', () => {
  assert.equal(bytes(512), '512 B');
  assert.equal(bytes(1536), '1.5 KiB');
  assert.equal(bytes(64 * 1024 * 1024), '64 MiB');
  assert.equal(seconds(1234), '1.23 s');
  assert.equal(seconds(45_000), '45.0 s');
  assert.equal(seconds(125_000), '2m 5s');
});

test('addresses of outputs and pod specs escape what the user named', () => {
  assert.equal(outputURL(7, 'b7-s1', 'my out'), '/api/v1/builds/7/outputs/b7-s1/my%20out');
  assert.equal(outputURL(7, 's', 'a/b'), '/api/v1/builds/7/outputs/s/a%2Fb');
  assert.equal(podSpecURL(7, 'b7-s1'), '/api/v1/builds/7/audit/steps/b7-s1/pod.yaml');
  assert.equal(filenameOf('attachment; filename="build-7-out.tar"', 'x.tar'), 'build-7-out.tar');
  assert.equal(filenameOf(null, 'x.tar'), 'x.tar');
});
