// The dashboard's logic (src/dashmodel.js) and resource icons' names (src/icons.js).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { can, checkFailing, parseFavorites, parseFilter, stages, teamsShown, toggleFavorite } from '../src/dashmodel.js';

const job = (name, passed = []) => ({ name, inputs: passed.length ? [{ resource: 'r', passed }] : [{ resource: 'r' }] });
const names = (st) => st.map((s) => s.map((j) => j.name));

test("the preview's stages follow the passed: chain, a fan-in one right of its deepest input", () => {
  assert.deepEqual(names(stages([job('deploy', ['int', 'lint']), job('int', ['unit']), job('unit'), job('lint'), job('other')])),
    [['unit', 'lint', 'other'], ['int'], ['deploy']]);
  assert.deepEqual(stages([]), []);
});

test('a cycle or a passed: on an unknown job leaves the stages finite', () => {
  const st = stages([job('a', ['b']), job('b', ['a']), job('c', ['ghost'])]);
  assert.equal(st.flat().length, 3);
  assert.ok(st.length <= 3);
  assert.deepEqual(names(stages([job('c', ['ghost'])])), [['c']]);
});

test('pause needs pipeline-operator, expose needs member; an admin may do both; nobody logged in may do neither', () => {
  const op = { teams: { main: ['pipeline-operator'] } };
  assert.equal(can(op, 'main', 'pause'), true);
  assert.equal(can(op, 'main', 'expose'), false);
  assert.equal(can(op, 'other', 'pause'), false);
  assert.equal(can({ teams: { main: ['viewer'] } }, 'main', 'pause'), false);
  assert.equal(can({ teams: { main: ['member'] } }, 'main', 'expose'), true);
  assert.equal(can({ is_admin: true, teams: {} }, 'x', 'expose'), true);
  assert.equal(can(null, 'main', 'pause'), false);
});

test('operating builds (trigger, rerun, resume, abort) needs pipeline-operator of the build\'s team; a viewer may not', () => {
  assert.equal(can({ teams: { main: ['pipeline-operator'] } }, 'main', 'operate'), true);
  assert.equal(can({ teams: { main: ['viewer', 'member'] } }, 'main', 'operate'), true);
  assert.equal(can({ teams: { main: ['viewer'] } }, 'main', 'operate'), false);
  assert.equal(can({ teams: { other: ['owner'] } }, 'main', 'operate'), false);
  assert.equal(can(null, 'main', 'operate'), false);
});

test('favourites toggle by pipeline id and survive what localStorage may hold', () => {
  assert.deepEqual(toggleFavorite([1, 2], 3), [1, 2, 3]);
  assert.deepEqual(toggleFavorite([1, 2, 3], 2), [1, 3]);
  assert.deepEqual(parseFavorites('[4,"x",5.5,6]'), [4, 6]);
  assert.deepEqual(parseFavorites('{'), []);
  assert.deepEqual(parseFavorites(null), []);
  assert.deepEqual(parseFavorites('{"a":1}'), []);
});

test("the caller's empty teams are shown after those with pipelines, unless the filter names a status or text", () => {
  const shown = [{ team_name: 'main' }];
  const teams = [{ name: 'main' }, { name: 'empty' }, { name: 'other' }];
  assert.deepEqual(teamsShown(parseFilter(''), shown, teams), ['main', 'empty', 'other']);
  assert.deepEqual(teamsShown(parseFilter('team:emp'), [], teams), ['empty']);
  assert.deepEqual(teamsShown(parseFilter('status:failed'), shown, teams), ['main']);
  assert.deepEqual(teamsShown(parseFilter('foo'), [], teams), []);
});

test('a pipeline is marked when a check of its resources failed or errored', () => {
  const m = checkFailing([
    { pipeline_id: 1, name: 'ok', build: { status: 'succeeded' } },
    { pipeline_id: 1, name: 'bad', build: { status: 'failed' } },
    { pipeline_id: 2, name: 'worse', build: { status: 'errored' } },
    { pipeline_id: 3, name: 'never' },
  ]);
  assert.deepEqual([...m.entries()], [[1, ['bad']], [2, ['worse']]]);
});

test("a resource's icon: names @mdi/js's export", async () => {
  const { mdiName } = await import('../src/icons.js');
  assert.equal(mdiName('git'), 'mdiGit');
  assert.equal(mdiName('numeric-1-box'), 'mdiNumeric1Box');
  const mdi = await import('@mdi/js');
  assert.ok(mdi[mdiName('docker')].startsWith('M'));
  assert.equal(mdi[mdiName('no-such-icon-here')], undefined);
});
