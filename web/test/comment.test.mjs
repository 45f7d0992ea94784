// A build's comment (src/comment.js) and who may write one (src/dashmodel.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COMMENT_MAX, commentProblem, commentSummary } from '../src/comment.js';
import { can } from '../src/dashmodel.js';

test('a comment of up to 10 KiB of UTF-8 passes; one byte more, or a NUL, is named', () => {
  assert.equal(commentProblem(''), '');
  assert.equal(commentProblem('x'.repeat(COMMENT_MAX)), '');
  assert.equal(commentProblem('é'.repeat(COMMENT_MAX / 2)), '');
  assert.match(commentProblem('é'.repeat(COMMENT_MAX / 2) + 'x'), /10241 bytes, over the 10240 bytes/);
  assert.match(commentProblem('a\u0000b'), /NUL character/);
});

test("a list shows a comment's first non-blank line, cut with an ellipsis, markup as it is", () => {
  assert.deepEqual(commentSummary(''), { text: '', more: false });
  assert.deepEqual(commentSummary(undefined), { text: '', more: false });
  assert.deepEqual(commentSummary('\n  \n<b>not bold</b>  '), { text: '<b>not bold</b>', more: false });
  assert.deepEqual(commentSummary('first\r\nsecond'), { text: 'first', more: true });
  assert.deepEqual(commentSummary('abcdef', 4), { text: 'abc…', more: true });
  assert.deepEqual(commentSummary('😀😀😀😀😀', 3), { text: '😀😀…', more: true });
  assert.deepEqual(commentSummary('abcd', 4), { text: 'abcd', more: false });
});

test("writing a comment needs pipeline-operator in the build's team, as Concourse's SetBuildComment", () => {
  assert.equal(can({ teams: { main: ['pipeline-operator'] } }, 'main', 'comment'), true);
  assert.equal(can({ teams: { main: ['member'] } }, 'main', 'comment'), true);
  assert.equal(can({ teams: { main: ['viewer'] } }, 'main', 'comment'), false);
  assert.equal(can({ teams: { other: ['owner'] } }, 'main', 'comment'), false);
  assert.equal(can({ is_admin: true, teams: {} }, 'main', 'comment'), true);
  assert.equal(can(null, 'main', 'comment'), false);
});
