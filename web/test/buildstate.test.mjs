// A build's steps at its end (src/buildstate.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { settle } from '../src/buildstate.js';

const steps = (...statuses) => new Map(statuses.map((status, i) => [String(i), { status }]));
const statuses = (m) => [...m.values()].map((s) => s.status);

test('an aborted build leaves no step running or initializing, and what never began did not run', () => {
  const m = steps('succeeded', 'running', 'initializing', 'pending');
  settle(m, 'aborted');
  assert.deepEqual(statuses(m), ['succeeded', 'aborted', 'aborted', 'not run']);
});

test("a failed check that sent no finish takes the build's status", () => {
  const m = steps('initializing');
  settle(m, 'failed');
  assert.deepEqual(statuses(m), ['failed']);
});

test('steps that ended keep their end', () => {
  const m = steps('failed', 'errored', 'succeeded');
  settle(m, 'succeeded');
  assert.deepEqual(statuses(m), ['failed', 'errored', 'succeeded']);
});

test("without the build's status nothing changes", () => {
  const m = steps('running', 'pending');
  settle(m, undefined);
  assert.deepEqual(statuses(m), ['running', 'pending']);
});
