// A step's audit record on the build page (src/steprecord.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bytes, filenameOf, outputURL, podSpecURL, seconds, timeline, timeOfDay, usage } from '../src/steprecord.js';

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

test('the moments of the sidecar and of the pod, in their logical order unless their times say otherwise', () => {
  const t = timeline(record, pod);
  // The image was pulled (kubelet: 10:00:02, some time in that second)
  // after the inputs were in (10:00:01.500): its place is after them.
  assert.deepEqual(t.map((m) => m.key), ['queued', 'pod_created', 'scheduled', 'sidecar_started', 'inputs_fetched',
    'image_pulled', 'running', 'process_exited', 'outputs_uploaded', 'ended']);
  // Offsets count from the earliest time and are never negative.
  assert.deepEqual(t.slice(0, 3).map((m) => m.offset), [250, 0, 0]);
  assert.equal(t.find((m) => m.key === 'running').offset, 2300);
  assert.deepEqual(t.filter((m) => m.coarse).map((m) => m.key), ['pod_created', 'scheduled', 'image_pulled']);
  // The sidecar's own end, not finished_at (written after the audit journal).
  assert.equal(t.at(-1).at, Date.parse('2026-11-29T10:00:04.820Z'));
});

test('a kubelet time a whole second before a moment comes before it', () => {
  const t = timeline({ phases: [{ name: 'sidecar_started', at: '2026-11-29T10:00:03.100Z' }] },
    { queued: '2026-11-29T10:00:03.050Z', pod_created: '2026-11-29T10:00:01Z', step_container_started: '2026-11-29T10:00:02Z' });
  assert.deepEqual(t.map((m) => m.key), ['pod_created', 'image_pulled', 'queued', 'sidecar_started']);
});

test('times of day to the millisecond, or to the second', () => {
  const at = new Date(2026, 10, 29, 9, 5, 7, 42).getTime();
  assert.equal(timeOfDay(at, false), '09:05:07.042');
  assert.equal(timeOfDay(at, true), '09:05:07');
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
