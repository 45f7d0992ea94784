// The addresses of instanced pipelines and paged lists (src/router.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { instanceVarsQuery, pageQuery, varsLabel, varsQuery, withQuery } from '../src/router.js';

test("instance vars travel as Concourse's vars.KEY=JSON, nested keys dotted, in key order", () => {
  assert.equal(instanceVarsQuery({ branch: 'main', a: { b: 1 } }), 'vars.a.b=1&vars.branch=%22main%22');
  assert.equal(instanceVarsQuery(null), '');
  assert.equal(varsLabel({ branch: 'main', n: 2 }), 'branch:main, n:2');
});

test("a page's query keeps its vars and its place, nothing else", () => {
  const search = '?vars.branch=%22main%22&group=g&to=12&limit=2&vars=%7B%7D';
  assert.equal(varsQuery(search), 'vars.branch=%22main%22&vars=%7B%7D');
  assert.equal(pageQuery(search), 'to=12&limit=2');
});

test('withQuery appends with ? or &, and drops empty parts', () => {
  assert.equal(withQuery('/a', '', 'x=1'), '/a?x=1');
  assert.equal(withQuery('/a?x=1', 'y=2'), '/a?x=1&y=2');
  assert.equal(withQuery('/a'), '/a');
});
