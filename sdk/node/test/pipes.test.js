'use strict';
// Descriptors 3 and 4 as the daemon makes them, pipes (FIFOs here; node's 'pipe' stdio
// is a socket pair), and a daemon slow to read: the replies wait, none is torn.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const SERVE = path.join(__dirname, '..', 'bin', 'dtq-serve.js');
const HANDLERS = path.join(__dirname, '..', 'fixtures', 'handlers.js');

test('pipes: a slow reader of descriptor 4 gets every line whole', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dtq-node-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const tasks = path.join(dir, 'tasks');
  const replies = path.join(dir, 'replies');
  execFileSync('mkfifo', [tasks, replies]);
  const child = spawn('/bin/sh', ['-c', 'exec "$0" "$1" "$2" 3<"$3" 4>"$4"',
    process.execPath, SERVE, HANDLERS, tasks, replies],
  { stdio: ['ignore', 'inherit', 'pipe'], env: { ...process.env, DTQ_INFLIGHT: '2' } });
  t.after(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => child.on('exit', r));

  const out = fs.createWriteStream(tasks);
  const input = fs.createReadStream(replies);
  input.pause();
  const chunks = [];
  input.on('data', (d) => chunks.push(d));
  const done = new Promise((r) => input.on('end', r));
  const bytes = 1 << 20;
  out.write(JSON.stringify({ t: 'task', id: 'f1', type: 'flood', payload: { progress: 20000, bytes } }) + '\n');
  out.write(JSON.stringify({ t: 'task', id: 'f2', type: 'flood', payload: { progress: 100, bytes: 10 } }) + '\n');
  out.end();
  await new Promise((r) => setTimeout(r, 700)); // the process fills the pipe meanwhile
  input.resume();
  await done;
  assert.equal(await exited, 0, stderr);
  const lines = Buffer.concat(chunks).toString().split('\n');
  assert.equal(lines.pop(), ''); // ends with a newline
  const msgs = lines.map((l) => JSON.parse(l));
  assert.equal(msgs[0].t, 'hello');
  const answers = msgs.filter((m) => m.t === 'ok');
  assert.deepEqual(answers.map((m) => m.id).sort(), ['f1', 'f2']);
  assert.equal(answers.find((m) => m.id === 'f1').result.length, bytes);
  // Progress after a task's answer would be an answer for an id not held: none.
  for (const a of answers) {
    const at = msgs.indexOf(a);
    assert.ok(!msgs.slice(at + 1).some((m) => m.t === 'progress' && m.id === a.id));
  }
  const progress = msgs.filter((m) => m.t === 'progress' && m.id === 'f1');
  assert.ok(progress.length >= 1 && progress.length <= 20000);
  if (process.env.DTQ_TEST_DEBUG) console.log('progress lines of f1:', progress.length);
});
