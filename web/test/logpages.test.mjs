// A step's output read by range (src/logpages.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { addAfter, addBefore, findLine, flatten, newWindow } from '../src/logpages.js';

// page makes a page of records from..to, each a piece of text.
const page = (from, pieces, { start = false, end = false } = {}) => ({
  from, to: from + pieces.length - 1, start, end,
  logs: pieces.map((payload, i) => ({ id: from + i, time: 100 + from + i, payload })),
});
const texts = (w) => w.lines.map((l) => l.text);

test('lines are put together across pieces and pages, each named by where it ends', () => {
  const w = newWindow(page(5, ['c\nd', 'e\nf\n', 'g'], { end: true }));
  assert.deepEqual(texts(w), ['c', 'de', 'f', 'g']);
  assert.deepEqual(w.lines.map((l) => [l.id, l.k]), [[5, 0], [6, 0], [6, 1], [7, 0]]);
  assert.equal(w.lines[3].open, true);
  const more = addBefore(w, page(2, ['a\n', 'b\nb', 'b'], { start: true }));
  assert.deepEqual(texts(more), ['a', 'b', 'bbc', 'de', 'f', 'g']);
  assert.equal(more.added, 2, 'two lines came in front; the old first line grew');
  assert.equal(more.start, true);
  assert.equal(more.end, true);
  assert.equal(more.from, 2);
  assert.equal(findLine(more.lines, 6, 1), 4);
  assert.equal(findLine(more.lines, 6, 2), -1);
});

test('a carriage return before a newline is not shown; an empty last line is not a line', () => {
  assert.deepEqual(texts(newWindow(page(1, ['x\r\ny\r\n']))), ['x', 'y']);
  assert.deepEqual(flatten([page(1, ['x\n', ''])]).length, 1);
});

test('a line began before the window is completed by the page before', () => {
  const w = newWindow(page(10, ['ne 3\nline 4\n'], { end: true }));
  assert.deepEqual(texts(w), ['ne 3', 'line 4']);
  const w2 = addBefore(w, page(8, ['line 2\n', 'li']));
  assert.deepEqual(texts(w2), ['line 2', 'line 3', 'line 4']);
});

test('a window holds at most max lines: the far end goes, and says so', () => {
  let w = newWindow(page(100, ['x\n'.repeat(10)], { end: true }));
  for (let p = 99; p >= 95; p--) w = addBefore(w, page(p, ['y\n'.repeat(10)]), 25);
  assert.ok(w.lines.length <= 30, `${w.lines.length} lines held`);
  assert.equal(w.end, false, 'the end was dropped');
  assert.equal(w.from, 95);
  let v = newWindow(page(1, ['a\n'.repeat(10)], { start: true }));
  for (let p = 2; p <= 6; p++) v = addAfter(v, page(p, [`${p}\n`.repeat(10)], { end: p === 6 }), 25);
  assert.equal(v.start, false, 'the start was dropped');
  assert.equal(v.end, true);
  assert.ok(v.lines.length <= 30);
  assert.equal(v.lines[v.lines.length - 1].text, '6');
  assert.equal(v.dropped, 10, 'the last page added dropped one page of 10 lines in front');
});
