// The pipeline graph's model (src/graphmodel.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fit, graphModel, layout, zoomAt } from '../src/graphmodel.js';

const job = (name, inputs = [], outputs = []) => ({ name, inputs, outputs });
const edges = (m) => m.edges.map((e) => `${e.from} ${e.to} ${e.kind}${e.trigger ? ' trigger' : ''}`).sort();
const resources = [{ name: 'src' }, { name: 'img' }];

test('a passed: input goes from the upstream job through the resource to the job', () => {
  const m = graphModel([
    job('unit', [{ resource: 'src', trigger: true }]),
    job('deploy', [{ resource: 'src', passed: ['unit'], trigger: false }]),
  ], resources, null);
  assert.deepEqual(edges(m), [
    'in:src job:unit input trigger',
    'job:unit via:unit:src passed',
    'via:unit:src job:deploy passed',
  ]);
  const via = m.nodes.find((n) => n.id === 'via:unit:src');
  assert.equal(via.kind, 'resource');
  assert.equal(via.role, 'constrained');
  assert.equal(via.name, 'src');
  assert.equal(via.item, resources[0]);
  assert.equal(via.outside, false);
});

test('a passed: input from a job that puts the resource comes from that put', () => {
  const m = graphModel([
    job('build', [], [{ resource: 'img' }]),
    job('ship', [{ resource: 'img', passed: ['build'], trigger: true }]),
  ], resources, null);
  assert.deepEqual(edges(m), ['job:build out:build:img output', 'out:build:img job:ship passed trigger']);
  assert.equal(m.nodes.find((n) => n.id === 'out:build:img').role, 'output');
});

test('an input from a job outside the shown group keeps its resource, with no edge from the hidden job', () => {
  const jobs = [
    job('unit', [{ resource: 'src', trigger: true }], [{ resource: 'img' }]),
    job('deploy', [{ resource: 'src', passed: ['unit'], trigger: true }, { resource: 'img', passed: ['unit'] }]),
  ];
  const m = graphModel(jobs, resources, ['deploy']);
  assert.deepEqual(m.nodes.map((n) => n.id).sort(), ['job:deploy', 'via:unit:img', 'via:unit:src']);
  assert.deepEqual(edges(m), ['via:unit:img job:deploy passed', 'via:unit:src job:deploy passed trigger']);
  for (const n of m.nodes.filter((x) => x.kind === 'resource')) {
    assert.equal(n.outside, true);
    assert.equal(n.upstream, 'unit');
  }
});

test('two upstream jobs give two constrained nodes; an unconstrained resource is one node for all its jobs', () => {
  const m = graphModel([
    job('a', [{ resource: 'src', trigger: true }]),
    job('b', [{ resource: 'src' }]),
    job('c', [{ resource: 'src', passed: ['a', 'b'], trigger: true }]),
  ], resources, null);
  assert.deepEqual(edges(m), [
    'in:src job:a input trigger', 'in:src job:b input',
    'job:a via:a:src passed', 'job:b via:b:src passed',
    'via:a:src job:c passed trigger', 'via:b:src job:c passed trigger',
  ]);
});

test('layout puts each step of a passed chain right of the one before', () => {
  const lay = layout(graphModel([
    job('unit', [{ resource: 'src', trigger: true }]),
    job('deploy', [{ resource: 'src', passed: ['unit'] }]),
  ], resources, null));
  const x = (id) => lay.nodes.find((n) => n.id === id).x;
  assert.ok(x('in:src') < x('job:unit'));
  assert.ok(x('job:unit') < x('via:unit:src'));
  assert.ok(x('via:unit:src') < x('job:deploy'));
  for (const e of lay.edges) assert.ok(e.points.length >= 2);
  assert.ok(lay.width > 0 && lay.height > 0);
});

test('zooming keeps the point under the pointer in place and stays within bounds', () => {
  const t = zoomAt({ k: 1, x: 10, y: 20 }, 2, 110, 120);
  assert.deepEqual(t, { k: 2, x: -90, y: -80 });
  // graph point (100, 100) was at (110, 120) and is still there.
  assert.equal(100 * t.k + t.x, 110);
  assert.equal(100 * t.k + t.y, 120);
  assert.equal(zoomAt({ k: 3, x: 0, y: 0 }, 10, 0, 0).k, 4);
  assert.equal(zoomAt({ k: 0.2, x: 0, y: 0 }, 0.01, 0, 0).k, 0.1);
});

test('a graph starts whole when it is larger than the view, at its own size when smaller', () => {
  assert.deepEqual(fit(400, 300, 1000, 800), { k: 1, x: 0, y: 0 });
  assert.deepEqual(fit(2000, 400, 1000, 800), { k: 0.5, x: 0, y: 0 });
  assert.deepEqual(fit(1000, 3200, 1000, 800), { k: 0.25, x: 0, y: 0 });
  assert.equal(fit(100000, 100, 1000, 800).k, 0.1);
});
