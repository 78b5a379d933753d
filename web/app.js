// dtq-web's page: a hash router over the JSON API (docs/reference.md, "dtq-web"). Plain
// JavaScript, no build step, nothing fetched from anywhere but dtq-web itself. Every text
// that comes from Redis (payloads, errors, names) goes into the page as text, never as HTML.
'use strict';

const CLASSES = ['permanent', 'retryable', 'timeout', 'signal', 'bad_result', 'unknown_task_type',
  'invalid_payload', 'invalid_entry', 'worker_lost', 'interrupted', 'poisoned'];
const COLORS = { succeeded: '#1f9d55', failed: '#d64545', retried: '#8a5cd6', depth: '#2f6fdd',
  pending: '#c98a0c' };
const POLL_MS = 3000;

const state = { info: null, timers: [], source: null, route: '', token: '', readsNeedToken: false };

// ------------------------------------------------------------------ helpers

// h('tag.class', {attr: value, onclick: fn}, child...): children are nodes or text.
function h(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split('.');
  const el = document.createElement(tag || 'div');
  if (classes.length) el.className = classes.join(' ');
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function fmtNum(n) {
  if (n === null || n === undefined) return '–';
  if (typeof n !== 'number') return String(n);
  if (Math.abs(n) >= 100 || Number.isInteger(n)) return Math.round(n).toLocaleString('en-US');
  return n.toFixed(1);
}

function fmtAge(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return '–';
  const s = Math.max(0, ms / 1000);
  if (s < 1) return Math.round(ms) + ' ms';
  if (s < 90) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  if (s < 5400) return Math.round(s / 60) + ' min';
  if (s < 172800) return Math.round(s / 3600) + ' h';
  return Math.round(s / 86400) + ' d';
}

function fmtTime(ms) {
  const n = Number(ms);
  if (!n) return '–';
  return new Date(n).toISOString().replace('T', ' ').replace('Z', ' UTC');
}

// A time in this browser's zone, "2026-03-29 03:00:00", for what people plan by the clock.
function fmtLocal(ms) {
  const n = Number(ms);
  if (!n) return '–';
  const d = new Date(n), p = (x) => String(x).padStart(2, '0');
  return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' +
    p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
}

function ago(ms) {
  const n = Number(ms);
  if (!n) return h('span', {}, '–');
  return h('span', { title: fmtTime(n) }, fmtAge(Date.now() - n) + ' ago');
}

function badge(text, cls) {
  return h('span.badge' + (cls ? '.' + cls : ''), {}, text);
}

function toast(msg, isError) {
  const t = h('div.toast' + (isError ? '.error' : ''), { role: 'status' }, msg);
  document.getElementById('toasts').append(t);
  setTimeout(() => t.remove(), isError ? 8000 : 4000);
}

function enc(s) {
  return encodeURIComponent(s);
}

// The token of this tab goes with every call: dtq-web started with a read token file
// refuses reads without one (401), and a write token is good for reads too.
function authHeaders(extra) {
  return Object.assign({}, extra, state.token ? { Authorization: 'Bearer ' + state.token } : {});
}

// A read answered 401: dtq-web wants a token for reads; ask for one.
function needToken() {
  state.readsNeedToken = true;
  if (document.getElementById('token-panel').hidden) openTokenPanel();
  showTokenState();
}

async function api(path) {
  const res = await fetch(path, { headers: authHeaders({ Accept: 'application/json' }), cache: 'no-store' });
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (!res.ok) {
    if (res.status === 401) needToken();
    const err = new Error((body && body.message) || res.statusText);
    err.status = res.status;
    err.body = body;
    throw err;
  }
  return body;
}

// A write: POST with the bearer token of this tab. Resolves to the answer, or shows why not.
async function write(path, body, label) {
  if (state.info && !state.info.writable) {
    toast('read-only: dtq-web was started without a token file', true);
    return null;
  }
  if (!state.token) {
    openTokenPanel();
    toast('enter the bearer token first', true);
    return null;
  }
  const res = await fetch(path, {
    method: 'POST',
    headers: authHeaders({ 'Content-Type': 'application/json' }),
    body: JSON.stringify(body || {}),
    cache: 'no-store',
  });
  let answer = null;
  try { answer = await res.json(); } catch (e) { answer = null; }
  if (!res.ok) {
    toast(label + ': ' + ((answer && answer.message) || res.statusText), true);
    if (res.status === 401) openTokenPanel();
    return null;
  }
  let what = answer.result !== undefined ? answer.result : '';
  if (answer.requeued !== undefined) what = answer.requeued + ' requeued';
  if (answer.counts) what = Object.entries(answer.counts).map(([w, n]) => n + ' ' + w).join(', ');
  if (answer.name !== undefined && typeof answer.result === 'number') what = answer.result ? 'done' : 'it was so already';
  if (answer.task_id !== undefined && answer.name !== undefined) what = 'task ' + answer.task_id;
  toast(label + ': ' + what);
  return answer;
}

function writeButton(label, path, body, opts) {
  opts = opts || {};
  const b = h('button.small' + (opts.danger ? '.danger' : ''), {
    type: 'button', dataset: { action: opts.action || label.toLowerCase() },
    disabled: state.info && !state.info.writable,
    title: state.info && !state.info.writable ? 'read-only: no token file' : null,
  }, label);
  b.addEventListener('click', async () => {
    if (opts.confirm && !window.confirm(opts.confirm)) return;
    b.disabled = true;
    try {
      const r = await write(path, body, opts.what || label);
      if (r && opts.after) opts.after(r);
    } finally {
      b.disabled = state.info && !state.info.writable;
      refresh();
    }
  });
  return b;
}

// The cluster layout: task ids and schedule names are unique per queue only, so a task's
// page and every call by id name the queue (?queue=Q); nothing is added on a single Redis.
function inQueue(queue) {
  return state.info && state.info.layout === 'cluster' && queue ? '?queue=' + enc(queue) : '';
}

function taskHref(id, queue) {
  return '#/task/' + enc(id) + inQueue(queue);
}

function every(ms, fn) {
  state.timers.push(setInterval(fn, ms));
}

function stopTimers() {
  state.timers.forEach(clearInterval);
  state.timers = [];
  if (state.source) { state.source.close(); state.source = null; }
}

function setView(...nodes) {
  const v = document.getElementById('view');
  v.replaceChildren(...nodes);
  v.dataset.state = 'ready';
}

function showError(e) {
  const v = document.getElementById('view');
  if (e && e.status === 401) {
    v.replaceChildren(h('h1', {}, 'Token needed'), h('p.err', {}, state.token
      ? 'dtq-web refused the token of this tab; enter a read or write token with the Token button.'
      : 'dtq-web needs a bearer token for reads: enter a read or write token with the Token button.'));
    v.dataset.state = 'unauthorized';
    return;
  }
  if (e && e.status === 404) {
    v.replaceChildren(h('h1', {}, 'Not found'), h('p.err', {}, e.message));
    v.dataset.state = 'notfound';
    return;
  }
  v.replaceChildren(h('h1', {}, 'Error'), h('p.err', {}, e ? e.message : 'failed'));
  v.dataset.state = 'error';
}

// ------------------------------------------------------------------ charts

// Draws lines on a canvas: series [{name, color, points: [[ms, value], ...]}].
function drawChart(canvas, series, unit) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 400, hgt = canvas.clientHeight || 170;
  canvas.width = w * dpr;
  canvas.height = hgt * dpr;
  const c = canvas.getContext('2d');
  c.scale(dpr, dpr);
  c.clearRect(0, 0, w, hgt);
  const pts = series.flatMap((s) => s.points);
  const left = 46, right = 8, top = 8, bottom = 20;
  c.font = '11px system-ui, sans-serif';
  c.fillStyle = '#6b7385';
  if (pts.length < 2) {
    c.fillText('collecting samples…', left, hgt / 2);
    return;
  }
  const t0 = Math.min(...pts.map((p) => p[0])), t1 = Math.max(...pts.map((p) => p[0]));
  let vmax = Math.max(1, ...pts.map((p) => p[1]));
  const mag = Math.pow(10, Math.floor(Math.log10(vmax)));
  vmax = Math.ceil((vmax * 1.1) / mag) * mag;
  const x = (t) => left + ((t - t0) / Math.max(1, t1 - t0)) * (w - left - right);
  const y = (v) => top + (1 - v / vmax) * (hgt - top - bottom);
  c.strokeStyle = '#e6e9ef';
  c.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (vmax * i) / 4, yy = Math.round(y(v)) + 0.5;
    c.beginPath();
    c.moveTo(left, yy);
    c.lineTo(w - right, yy);
    c.stroke();
    c.fillText(fmtNum(v), 2, yy + 4);
  }
  c.fillText(fmtAge(Date.now() - t0) + ' ago', left, hgt - 5);
  const nowLabel = 'now' + (unit ? '  (' + unit + ')' : '');
  c.fillText(nowLabel, w - right - c.measureText(nowLabel).width, hgt - 5);
  for (const s of series) {
    if (s.points.length < 1) continue;
    c.strokeStyle = s.color;
    c.lineWidth = 2;
    c.beginPath();
    s.points.forEach((p, i) => (i ? c.lineTo(x(p[0]), y(p[1])) : c.moveTo(x(p[0]), y(p[1]))));
    c.stroke();
  }
}

function chartBox(title, id, names) {
  return h('div.chart', {},
    h('h3', {}, title),
    h('canvas', { id, 'aria-label': title }),
    h('div.legend', {}, names.map((n) => h('span', {}, h('i.sw-' + n), n))));
}

function colorLegends(root) {
  for (const [n, col] of Object.entries(COLORS))
    root.querySelectorAll('i.sw-' + n).forEach((i) => { i.style.background = col; });
}

// Plots /api/history: outcomes per minute and depth over time.
async function plotHistory(queue, tpId, dpId) {
  const q = queue ? '?queue=' + enc(queue) : '';
  const hist = await api('/api/history' + q);
  const s = hist.samples;
  const rate = (k) => s.slice(1).map((p, i) => {
    const dt = (p.ts - s[i].ts) / 60000;
    return [p.ts, dt > 0 ? p[k] / dt : 0];
  });
  const tp = document.getElementById(tpId), dp = document.getElementById(dpId);
  if (tp) drawChart(tp, ['succeeded', 'failed', 'retried'].map((k) =>
    ({ name: k, color: COLORS[k], points: rate(k) })), 'per min');
  if (dp) drawChart(dp, ['depth', 'pending'].map((k) =>
    ({ name: k, color: COLORS[k], points: s.filter((p) => p[k] !== null).map((p) => [p.ts, p[k]]) })),
  'tasks');
}

// ------------------------------------------------------------------ overview

function bandBars(depths) {
  const max = Math.max(1, ...depths);
  const box = h('div.bands', { title: 'depth per band, p9 … p0' });
  for (let b = 9; b >= 0; b--) {
    const span = h('span' + (depths[b] ? '.nonzero' : ''), { title: 'p' + b + ': ' + depths[b] });
    span.style.height = Math.max(1, Math.round((depths[b] / max) * 22)) + 'px';
    box.append(span);
  }
  return box;
}

function rateCell(r, k) {
  return h('td.num', {}, r ? fmtNum(r[k]) : '–');
}

function queueRow(q) {
  const r = q.rates ? q.rates['1m'] : null;
  return h('tr', { dataset: { queue: q.name } },
    h('td', {}, h('a', { href: '#/queue/' + enc(q.name) }, q.name)),
    h('td', {}, q.paused ? badge('paused', 'paused') : badge('active', 'active'),
      q.mode === 'lean' ? [' ', badge('lean', 'lean')] : null),
    h('td.num', {}, fmtNum(q.depth)),
    h('td.num', {}, fmtNum(q.pending)),
    h('td', {}, bandBars(q.depth_by_band)),
    rateCell(r, 'succeeded'), rateCell(r, 'failed'), rateCell(r, 'retried'),
    h('td.num', { dataset: { col: 'succeeded-total' } }, fmtNum(q.totals.succeeded)),
    h('td', {}, q.paused
      ? writeButton('Resume', '/api/queues/' + enc(q.name) + '/resume', {}, { what: 'resume ' + q.name })
      : writeButton('Pause', '/api/queues/' + enc(q.name) + '/pause', {}, { what: 'pause ' + q.name })));
}

function workerRow(w) {
  const status = w.status || '?';
  return h('tr', { dataset: { worker: w.id } },
    h('td.mono', {}, w.id),
    h('td', {}, w.hostname || ''),
    h('td.num', {}, w.pid),
    h('td', {}, badge(status, status)),
    h('td.num', {}, fmtAge(w.heartbeat_age_ms)),
    h('td.num', {}, fmtNum(w.active_tasks) + ' / ' + fmtNum(w.concurrency)),
    h('td.num', {}, fmtNum(w.tasks_processed)),
    h('td.num', {}, fmtNum(w.tasks_failed)),
    h('td.num', {}, fmtNum(w.tasks_retried)),
    h('td', { dataset: { col: 'pools' } }, poolsCell(w.pools)),
    h('td', {}, w.version || ''));
}

// A worker's handler pools: "py 2/2", in red while a pool has fewer ready processes than
// it wants (crashing, or starting).
function poolsCell(pools) {
  if (!pools) return '';
  return Object.keys(pools).sort().map((name) => {
    const p = pools[name];
    return badge(name + ' ' + p.ready + '/' + p.wanted, p.ready < p.wanted ? 'failed' : 'succeeded');
  });
}

function card(k, v, cls, href, extra) {
  const val = h('div.v' + (cls ? '.' + cls : ''), {}, v);
  return h('div.card', {}, h('div.k', {}, k), href ? h('a', { href }, val) : val, extra);
}

async function renderOverview(first) {
  const o = await api('/api/overview');
  document.getElementById('dlq-count').textContent = o.dlq.length ? o.dlq.length : '';
  const depth = o.queues.reduce((a, q) => a + q.depth, 0);
  const pending = o.queues.reduce((a, q) => a + q.pending, 0);
  const r = o.rates['1m'];
  const cards = h('div.cards', {},
    card('queues', fmtNum(o.queues.length)),
    card('waiting', fmtNum(depth)),
    card('running', fmtNum(pending)),
    card('succeeded / min', r ? fmtNum(r.succeeded) : '–'),
    card('failed / min', r ? fmtNum(r.failed) : '–'),
    card('dead letters', fmtNum(o.dlq.length), null, '#/dlq'),
    card('scheduled', fmtNum(o.scheduler.scheduled), null, '#/scheduled',
      h('div.sub', {}, h('a', { href: '#/scheduled', id: 'ov-delayed' }, 'delayed'), ' · ',
        h('a', { href: '#/retries', id: 'ov-retries' }, 'retries'))),
    card('workers', fmtNum(o.workers.length)),
    card('scheduler leader', o.scheduler.leader || 'none', 'small'));
  const charts = h('div.charts', {},
    chartBox('Throughput, all queues (per minute)', 'chart-tp', ['succeeded', 'failed', 'retried']),
    chartBox('Waiting and running, all queues', 'chart-depth', ['depth', 'pending']));
  const qt = h('table', { id: 'queues' },
    h('thead', {}, h('tr', {}, ['queue', 'state', 'waiting', 'running', 'bands p9…p0',
      'ok/min', 'failed/min', 'retried/min', 'ok since start', ''].map((t, i) =>
      h(i >= 2 && i <= 8 && i !== 4 ? 'th.num' : 'th', {}, t)))),
    h('tbody', {}, o.queues.length ? o.queues.map(queueRow)
      : h('tr', {}, h('td', { colspan: 10 }, h('span.muted', {}, 'no queue yet')))));
  const wt = h('table', { id: 'workers' },
    h('thead', {}, h('tr', {}, ['worker', 'host', 'pid', 'status', 'heartbeat', 'running',
      'processed', 'failed', 'retried', 'pools', 'version'].map((t) => h('th', {}, t)))),
    h('tbody', {}, o.workers.length ? o.workers.map(workerRow)
      : h('tr', {}, h('td', { colspan: 11 }, h('span.muted', {}, 'no live worker')))));
  const notes = [];
  if (o.queues_truncated) notes.push(h('p.notice', {}, 'Only the first ' + o.queues.length + ' queues are shown.'));
  if (o.unreachable && o.unreachable.length) { // Redis Cluster: a shard is down
    notes.push(h('p.notice', { id: 'ov-unreachable' }, h('span.warn', {}, 'Unreachable: ' + o.unreachable.join(', ')),
      ' (their shard\'s primary is down: the numbers above leave them out until it is back)'));
  }
  setView(h('h1', {}, 'Overview'), cards, charts, notes,
    h('h2', {}, 'Queues'), qt, h('h2', {}, 'Workers'), wt,
    h('p.muted', {}, 'Rates come from the workers\' heartbeat counters, sampled every ' +
      o.sample_interval_s + ' s; the overview refreshes every ' + POLL_MS / 1000 + ' s.'));
  colorLegends(document.getElementById('view'));
  await plotHistory(null, 'chart-tp', 'chart-depth');
}

// ------------------------------------------------------------------ a queue

async function renderQueue(name) {
  const q = await api('/api/queues/' + enc(name) + '?count=50');
  const r = q.rates['1m'];
  const head = h('div.toolbar', {},
    h('h1', {}, 'Queue ', h('span.mono', {}, q.name)),
    q.paused ? badge('paused', 'paused') : badge('active', 'active'),
    q.mode === 'lean' ? badge('lean', 'lean') : null,
    q.paused ? writeButton('Resume', '/api/queues/' + enc(q.name) + '/resume', {}, { what: 'resume ' + q.name })
      : writeButton('Pause', '/api/queues/' + enc(q.name) + '/pause', {}, { what: 'pause ' + q.name }));
  const cards = h('div.cards', {},
    card('waiting', fmtNum(q.depth)), card('running', fmtNum(q.pending)),
    card('succeeded / min', r ? fmtNum(r.succeeded) : '–'),
    card('failed / min', r ? fmtNum(r.failed) : '–'),
    card('retried / min', r ? fmtNum(r.retried) : '–'),
    card('succeeded since start', fmtNum(q.totals.succeeded)));
  const bands = h('table', { id: 'bands' },
    h('thead', {}, h('tr', {}, ['band', 'waiting', 'running', 'stream length'].map((t, i) => h(i ? 'th.num' : 'th', {}, t)))),
    h('tbody', {}, q.bands.filter((b) => b.length > 0).map((b) => h('tr', {},
      h('td', {}, 'p' + b.band), h('td.num', {}, fmtNum(b.depth)), h('td.num', {}, fmtNum(b.pending)),
      h('td.num', {}, fmtNum(b.length))))));
  if (!q.bands.some((b) => b.length > 0))
    bands.tBodies[0].append(h('tr', {}, h('td', { colspan: 4 }, h('span.muted', {}, 'all streams are empty'))));
  const taskLink = (t) => h('a.mono', { href: taskHref(t.task_id, q.name) }, t.task_id);
  const waiting = h('table', { id: 'waiting' },
    h('thead', {}, h('tr', {}, ['task', 'band', 'type', 'attempt', 'status', 'enqueued'].map((t) => h('th', {}, t)))),
    h('tbody', {}, q.waiting.map((t) => h('tr', { dataset: { task: t.task_id } },
      h('td', {}, taskLink(t)), h('td', {}, 'p' + t.band), h('td', {}, t.task_type || ''),
      h('td', {}, t.attempt || ''), h('td', {}, t.status ? badge(t.status, t.status) : (t.raw ? badge('raw entry') : '')),
      h('td', {}, ago(t.enqueued_ms))))));
  const running = h('table', { id: 'running' },
    h('thead', {}, h('tr', {}, ['task', 'band', 'type', 'worker', 'idle', 'deliveries', ''].map((t) => h('th', {}, t)))),
    h('tbody', {}, q.running.map((t) => h('tr', { dataset: { task: t.task_id || '' } },
      h('td', {}, t.task_id ? taskLink(t) : h('span.mono', {}, t.entry_id)), h('td', {}, 'p' + t.band),
      h('td', {}, t.task_type || ''), h('td.mono', {}, t.worker_id), h('td', {}, fmtAge(t.idle_ms)),
      h('td.num', {}, t.deliveries),
      h('td', {}, t.task_id ? writeButton('Cancel', '/api/tasks/' + enc(t.task_id) + '/cancel' + inQueue(q.name), {}, { what: 'cancel ' + t.task_id }) : '')))));
  setView(head, cards,
    h('div.charts', {},
      chartBox('Throughput (per minute)', 'chart-tp', ['succeeded', 'failed', 'retried']),
      chartBox('Waiting and running', 'chart-depth', ['depth', 'pending'])),
    h('h2', {}, 'Bands'), bands,
    h('h2', {}, 'Waiting (next to run first, at most ' + q.count + ')'), waiting,
    h('h2', {}, 'Running (delivered, not acknowledged)'), running);
  colorLegends(document.getElementById('view'));
  await plotHistory(q.name, 'chart-tp', 'chart-depth');
}

// ------------------------------------------------------------------ a task

const TIME_FIELDS = ['created_at', 'updated_at', 'started_at', 'finished_at', 'failed_at_ms'];

function kvTable(obj, id) {
  return h('table.kv', { id }, h('tbody', {}, Object.keys(obj).sort().map((k) => {
    const v = obj[k];
    const shown = TIME_FIELDS.includes(k) && v ? v + '  (' + fmtTime(v) + ')' : String(v);
    return h('tr', { dataset: { field: k } }, h('td', {}, k), h('td.mono', {}, shown));
  })));
}

function pretty(v) {
  if (typeof v === 'string') {
    try { return JSON.stringify(JSON.parse(v), null, 2); } catch (e) { return v; }
  }
  return JSON.stringify(v, null, 2);
}

async function renderTask(id, queue) {
  const t = await api('/api/tasks/' + enc(id) + inQueue(queue));
  const st = t.status;
  const base = '/api/tasks/' + enc(t.id);
  const inq = inQueue(queue || t.fields.queue);
  const actions = h('div.toolbar', {},
    h('h1', {}, 'Task ', h('span.mono', {}, t.id)), badge(st, st),
    ['dead_lettered', 'failed'].includes(st) && writeButton('Requeue', base + '/requeue' + inq, {}, { what: 'requeue ' + t.id }),
    st === 'dead_lettered' && writeButton('Discard', base + '/discard' + inq, {}, { what: 'discard ' + t.id, danger: true, confirm: 'Discard the dead letter of ' + t.id + '?' }),
    t.due_ms && !t.due_claimed && writeButton('Run now', '/api/scheduled/run-now' + inq, { ids: [t.id] }, { action: 'run-now', what: 'run now ' + t.id }),
    t.due_ms && !t.due_claimed && writeButton('Delete', '/api/scheduled/delete' + inq, { ids: [t.id] }, { action: 'delete', what: 'delete ' + t.id, danger: true, confirm: 'Delete the scheduled task ' + t.id + '? It ends cancelled.' }),
    ['queued', 'pending', 'retrying', 'running'].includes(st) && writeButton('Cancel', base + '/cancel' + inq, {}, { what: 'cancel ' + t.id, danger: true }));
  const parts = [actions,
    h('p.muted', {}, 'queue ', h('a', { href: '#/queue/' + enc(t.fields.queue || '') }, t.fields.queue || '?'),
      ' · type ', t.fields.task_type || '?', ' · attempt ', t.fields.attempt || '?', ' of ', t.fields.max_attempts || '?',
      t.ttl_ms >= 0 ? ' · expires in ' + fmtAge(t.ttl_ms) : '',
      t.due_ms ? h('span', { id: 'due' }, ' · due ', dueIn(t.due_ms, Date.now()),
        t.due_claimed ? ' (being enqueued)' : '') : '')];
  if (t.fields.batch || t.fields.batch_callback) {
    const b = t.fields.batch || t.fields.batch_callback;
    parts.push(h('p', { id: 'task-batch' }, t.fields.batch ? 'member of batch ' : 'callback of batch ',
      h('a', { href: batchHref(b, t.fields.queue) }, b)));
  }
  if (t.fields.progress) {
    let p = {};
    try { p = JSON.parse(t.fields.progress); } catch (e) { /* shown in the fields */ }
    parts.push(h('p', { id: 'task-progress' }, 'progress ',
      typeof p.fraction === 'number' ? progressBar(p.fraction) : '', ' ',
      typeof p.fraction === 'number' ? Math.round(p.fraction * 100) + '%' : '', p.message ? ' · ' + p.message : ''));
  }
  if (t.fields.last_error)
    parts.push(h('p.err', { id: 'last-error' }, (t.fields.last_error_class || '') + ': ' + t.fields.last_error));
  parts.push(h('h2', {}, 'Result'), t.result === null ? h('p.muted', {}, 'none (null, or not kept)') : h('pre', { id: 'result' }, pretty(t.result)));
  parts.push(h('h2', {}, 'Payload'), h('pre', { id: 'payload' }, pretty(t.fields.payload || '')));
  parts.push(h('h2', {}, 'Fields'), kvTable(t.fields, 'fields'));
  if (t.dead_letter) parts.push(h('h2', {}, 'Dead-letter entry'), kvTable(t.dead_letter, 'dead-letter'));
  const attempts = t.attempts || [];
  parts.push(h('h2', {}, 'Attempts'), attempts.length
    ? h('table', { id: 'attempts' }, h('thead', {}, h('tr', {}, ['attempt', 'ended at', 'class', 'error', 'worker'].map((x, i) => h(i ? 'th' : 'th.num', {}, x)))),
      h('tbody', {}, attempts.map((a) => h('tr', { dataset: { attempt: a.attempt } }, h('td.num', {}, a.attempt),
        h('td', {}, ago(a.ended_at)), h('td', {}, badge(a.class || '?')), h('td.err', {}, a.error || ''),
        h('td.mono', {}, a.worker || '')))))
    : h('p.muted', { id: 'attempts-none' }, 'No attempt has failed.'));
  parts.push(h('h2', {}, 'Events'));
  if (!t.events_stream) {
    parts.push(h('p.muted', {}, 'No event history is kept ([limits] events_stream_maxlen = 0); ',
      h('a', { href: '#/events' }, 'live events'), ' show them as they happen.'));
  } else {
    parts.push(h('table', { id: 'events' }, h('thead', {}, h('tr', {}, ['time', 'type', 'attempt', 'worker', 'metadata'].map((x) => h('th', {}, x)))),
      h('tbody', {}, t.events.map((e) => h('tr', {}, h('td.mono', {}, e.ts), h('td.ev-type', {}, e.type),
        h('td.num', {}, e.attempt), h('td.mono', {}, e.worker_id || ''), h('td.mono', {}, e.metadata ? JSON.stringify(e.metadata) : ''))))));
    if (!t.events_complete) parts.push(h('p.muted', {}, 'Only the newest ' + t.events_scanned + ' events of the stream were searched.'));
  }
  setView(...parts);
}

// ------------------------------------------------------------------ batches

function batchHref(id, queue) {
  return '#/batch/' + enc(id) + inQueue(queue);
}

// A bar filled to fraction (0..1) of its width (a <progress>: no inline style, which the
// page's Content-Security-Policy refuses).
function progressBar(fraction) {
  const pct = Math.max(0, Math.min(100, fraction * 100));
  return h('progress.progress', { value: pct.toFixed(1), max: '100' }, Math.round(pct) + '%');
}

// The newest batches (<ns>_batch_list), each with its progress and counts.
async function renderBatches() {
  const r = await api('/api/batches');
  const rows = r.batches.map((b) => {
    const done = b.total > 0 ? (b.total - b.pending) / b.total : 1;
    const st = b.completed_at ? 'complete' : b.state;
    return h('tr', { dataset: { batch: b.id } }, h('td', {}, h('a.mono', { href: batchHref(b.id, b.queue) }, b.id)),
      h('td', {}, b.queue || ''), h('td', {}, badge(st, st)), h('td', {}, progressBar(done)),
      ...['total', 'pending', 'succeeded', 'failed', 'dead_lettered'].map((k) => h('td.num', {}, String(b[k] || 0))),
      h('td', {}, ago(b.created_at)), h('td.muted', {}, b.description || ''));
  });
  setView(h('h1', {}, 'Batches'), rows.length
    ? h('table', { id: 'batches' }, h('thead', {}, h('tr', {}, ['batch', 'queue', 'state', 'ended', 'total', 'pending', 'succeeded', 'failed', 'dead-lettered', 'created', ''].map((x) => h('th', {}, x)))),
      h('tbody', {}, rows))
    : h('p.muted', { id: 'batches-none' }, 'No batch yet (FCALL <ns>_batch, dtqctl batch create).'),
  r.more ? h('p.muted', {}, 'Only the newest ' + rows.length + ' are listed.') : '');
}

// A batch (<ns>_batch_show, reference 4.5): how far it got, its counts, its callbacks and
// its failed members, each one click from its task page.
async function renderBatch(id, queue) {
  const b = await api('/api/batches/' + enc(id) + inQueue(queue));
  const done = typeof b.progress === 'number' ? b.progress : (b.total > 0 ? (b.total - b.pending) / b.total : 1);
  const state = b.completed_at ? 'complete' : b.state;
  const parts = [h('div.toolbar', {}, h('h1', {}, 'Batch ', h('span.mono', {}, b.id)), badge(state, state)),
    h('p.muted', {}, 'queue ', h('a', { href: '#/queue/' + enc(b.queue || '') }, b.queue || '?'),
      ' · created ', ago(b.created_at), b.completed_at ? ' · complete ' + ago(b.completed_at) : '',
      b.description ? ' · ' + b.description : ''),
    h('p', { id: 'batch-progress' }, progressBar(done), ' ', h('span', { id: 'batch-done' }, Math.round(done * 100) + '%'),
      ' · ' + (b.total - b.pending) + ' of ' + b.total + ' ended'),
    h('table', { id: 'batch-counts' }, h('tbody', {}, ['total', 'pending', 'succeeded', 'failed', 'dead_lettered'].map((k) =>
      h('tr', { dataset: { count: k } }, h('th', {}, k), h('td.num', {}, String(b[k] || 0))))))];
  const cbs = ['on_success', 'on_complete'].filter((w) => b[w]);
  if (cbs.length) {
    parts.push(h('h2', {}, 'Callbacks'), h('table', { id: 'batch-callbacks' }, h('tbody', {}, cbs.map((w) =>
      h('tr', { dataset: { callback: w } }, h('th', {}, w), h('td', {}, b[w].task_type || '?'),
        h('td', {}, b[w].task_id ? h('a', { href: taskHref(b[w].task_id, b.queue) }, b[w].task_id) : h('span.muted', {}, 'not yet')))))));
  }
  parts.push(h('h2', {}, 'Failed members'));
  parts.push(b.failed_ids.length
    ? h('ul', { id: 'batch-failed' }, b.failed_ids.map((t) => h('li', {}, h('a.mono', { href: taskHref(t, b.queue) }, t))))
    : h('p.muted', { id: 'batch-failed-none' }, 'None.'));
  if (b.failed_ids_truncated) parts.push(h('p.muted', {}, 'Only the first ' + b.failed_ids.length + ' are listed.'));
  setView(...parts);
}

// ------------------------------------------------------------------ selection, bulk writes

// The checkboxes of a table: one per row (selection.box(id)) and one in its head that
// selects them all. onchange(ids) runs whenever the selection changes.
function selection(onchange) {
  const boxes = [];
  const all = h('input', { type: 'checkbox', id: 'select-all', 'aria-label': 'select all' });
  const ids = () => boxes.filter((b) => b.checked).map((b) => b.dataset.id);
  const byQueue = () => { /* the selected ids per queue (the cluster layout's calls) */
    const m = {};
    boxes.filter((b) => b.checked).forEach((b) => { (m[b.dataset.queue || ''] = m[b.dataset.queue || ''] || []).push(b.dataset.id); });
    return m;
  };
  const update = () => {
    const n = boxes.filter((b) => b.checked).length;
    all.checked = n > 0 && n === boxes.length;
    all.indeterminate = n > 0 && n < boxes.length;
    boxes.forEach((b) => b.closest('tr') && b.closest('tr').classList.toggle('selected', b.checked));
    onchange(ids());
  };
  all.addEventListener('change', () => { boxes.forEach((b) => { b.checked = all.checked; }); update(); });
  return {
    head: h('th.check', {}, all),
    box(id, queue) {
      const b = h('input', { type: 'checkbox', class: 'select-row', 'aria-label': 'select ' + id, dataset: { id, queue: queue || '' } });
      b.addEventListener('change', update);
      boxes.push(b);
      return h('td.check', {}, b);
    },
    ids,
    byQueue,
    update,
  };
}

// Buttons that write {"ids": [...]} of the selected rows to their path, and the count of
// what is selected: buttons [{label, path, action, what, danger, confirm(ids)}].
function bulkBar(buttons) {
  const count = h('span.muted', { id: 'selected-count' }, 'none selected');
  const writable = () => !(state.info && !state.info.writable);
  let sel = null;
  const els = buttons.map((o) => {
    const b = h('button.small' + (o.danger ? '.danger' : ''), { type: 'button', dataset: { action: o.action }, disabled: true,
      title: writable() ? null : 'read-only: no token file' }, o.label);
    b.addEventListener('click', async () => {
      const ids = sel.ids();
      if (!ids.length) return;
      if (o.confirm && !window.confirm(o.confirm(ids))) return;
      els.forEach((x) => { x.disabled = true; });
      try {
        if (state.info && state.info.layout === 'cluster') {
          for (const [q, qids] of Object.entries(sel.byQueue())) await write(o.path + inQueue(q), { ids: qids }, o.what);
        } else {
          await write(o.path, { ids }, o.what);
        }
      } finally { refresh(); }
    });
    return b;
  });
  sel = selection((ids) => {
    els.forEach((b) => { b.disabled = !ids.length || !writable(); });
    count.textContent = ids.length ? ids.length + ' selected' : 'none selected';
  });
  return { sel, bar: h('div.toolbar.bulk', {}, els, count) };
}

// A search form over the route's parameters: fields [[name, placeholder]]; submitting it
// (or Clear) calls go(params), which replaces them.
function searchForm(fields, params, go, extra) {
  const inputs = fields.map(([name, ph]) => h('input', { type: 'search', name, id: 'search-' + name,
    placeholder: ph, 'aria-label': ph, value: params[name] || '' }));
  const any = fields.some(([name]) => params[name]);
  return h('form.toolbar', { id: 'search', autocomplete: 'off', onsubmit: (e) => {
    e.preventDefault();
    const p = {};
    inputs.forEach((i) => { if (i.value.trim()) p[i.name] = i.value.trim(); });
    go(p);
  } }, inputs, extra, h('button.ghost', { type: 'submit', id: 'search-go' }, 'Search'),
  any && h('button.ghost', { type: 'button', onclick: () => go({}) }, 'Clear'));
}

// "in 4 min" / "2 s overdue" for a due time, its date in the title.
function dueIn(ms, now) {
  const d = Number(ms) - now;
  return h('span', { title: fmtTime(ms) }, d >= 0 ? 'in ' + fmtAge(d) : fmtAge(-d) + ' overdue');
}

// Sets the hash to #/<tab>?<params without empty values>; refreshes when it is the same.
function goTo(tab, params) {
  const q = new URLSearchParams();
  Object.entries(params).forEach(([k, v]) => { if (v) q.set(k, v); });
  const hash = '#/' + tab + (q.toString() ? '?' + q : '');
  if (location.hash === hash) refresh(); else location.hash = hash;
}

// ------------------------------------------------------------------ scheduled, retries

const SCHED_TABS = {
  scheduled: { kind: 'delayed', title: 'Scheduled', none: 'no task waiting for its due time' },
  retries: { kind: 'retrying', title: 'Retries', none: 'no task waiting for a retry' },
};
const SCHED_FILTERS = [['id_prefix', 'task id prefix'], ['task_type', 'task type'], ['class', 'error class'], ['queue', 'queue']];

// Why a scheduled task waits (the `reason` of <ns>_scheduled).
function schedWhy(e) {
  if (e.reason === 'limited') return h('span', { title: 'deferred by a limit' }, 'limited by ', h('span.mono', {}, e.limited_by || '?'));
  if (e.reason === 'handed_back') return h('span', { title: e.last_error || '' }, 'handed back: no worker has its handler yet');
  if (e.reason === 'delayed') return h('span.muted', {}, 'delay');
  return h('span.muted', {}, e.reason || e.kind || '');
}

async function renderSched(tab, params) {
  const t = SCHED_TABS[tab], retries = t.kind === 'retrying';
  const filters = {};
  SCHED_FILTERS.forEach(([f]) => { if (params[f]) filters[f] = params[f]; });
  const qs = new URLSearchParams(Object.assign({ kind: t.kind, count: '50' }, filters));
  if (params.cursor) qs.set('cursor', params.cursor);
  const d = await api('/api/scheduled?' + qs);
  const { sel, bar } = bulkBar([
    { label: 'Run now', path: '/api/scheduled/run-now', action: 'run-now', what: 'run now' },
    { label: 'Delete', path: '/api/scheduled/delete', action: 'delete', what: 'delete', danger: true,
      confirm: (ids) => 'Delete ' + ids.length + ' scheduled task' + (ids.length > 1 ? 's' : '') + '? They end cancelled.' }]);
  const rows = d.entries.map((e) => h('tr', { dataset: { task: e.task_id } },
    sel.box(e.task_id, e.queue),
    h('td', {}, dueIn(e.due_ms, d.time_ms)),
    h('td', {}, h('a.mono', { href: taskHref(e.task_id, e.queue) }, e.task_id)),
    h('td', {}, e.queue ? h('a', { href: '#/queue/' + enc(e.queue) }, e.queue) : ''),
    h('td', {}, e.task_type || ''),
    retries ? h('td.num', {}, fmtNum(e.next_attempt) + (e.max_attempts ? ' / ' + e.max_attempts : ''))
      : h('td.num', {}, fmtNum(e.priority)),
    !retries && h('td', { dataset: { col: 'why' } }, schedWhy(e)),
    retries && h('td', {}, badge(e.last_error_class || '?')),
    retries && h('td.err', { dataset: { col: 'last-error' } }, e.last_error || '')));
  const heads = retries ? ['next retry', 'task', 'queue', 'type', 'attempt', 'class', 'last error']
    : ['due', 'task', 'queue', 'type', 'priority', 'why'];
  const filtered = Object.keys(filters).length > 0;
  const table = h('table', { id: 'sched' },
    h('thead', {}, h('tr', {}, sel.head, heads.map((x) => h(['attempt', 'priority'].includes(x) ? 'th.num' : 'th', {}, x)))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: heads.length + 1 },
      h('span.muted', {}, t.none + (filtered ? ' matching the search' : ''))))));
  const pager = h('div.toolbar', {},
    params.cursor && h('button.ghost', { type: 'button', onclick: () => goTo(tab, filters) }, 'First page'),
    d.next_cursor && h('button.ghost', { type: 'button', id: 'sched-next', onclick: () => goTo(tab, Object.assign({ cursor: d.next_cursor }, filters)) }, 'Next page'),
    h('span.muted', {}, d.total + ' in the schedule, delayed and retries' + (d.claimed ? ', ' + d.claimed + ' being enqueued' : '') +
      '; ' + d.scanned + ' examined for this page'));
  setView(h('h1', {}, t.title),
    h('p.muted', {}, retries ? 'Tasks that failed and wait for their next attempt, soonest first.'
      : 'Tasks waiting for their due time, soonest first: enqueued with a delay, deferred by a limit, ' +
        'or handed back by a worker without a handler for their type.'),
    searchForm(SCHED_FILTERS, params, (p) => goTo(tab, p)), bar, table, pager);
}

// ------------------------------------------------------------------ periodic schedules

// One cell of a fire time: its local time, and how far it is from now.
function fireCell(ms, now, future) {
  if (!ms) return h('td', {}, h('span.muted', {}, future ? 'not planned' : 'never'));
  const d = Number(ms) - now;
  const rel = d >= 0 ? 'in ' + fmtAge(d) : fmtAge(-d) + (future ? ' overdue' : ' ago');
  return h('td', { title: fmtTime(ms) }, h('span.mono', {}, fmtLocal(ms)), h('br'), h('span.muted', {}, rel));
}

function cronRow(s, now) {
  const base = '/api/cron/' + enc(s.name);
  const inq = inQueue(s.queue);
  const problem = s.error ? h('span.err', {}, s.error)
    : s.last_refusal ? h('span.warn', { title: 'the last fire time was not enqueued' }, 'refused: ' + s.last_refusal) : '';
  return h('tr' + (s.error ? '.has-error' : ''), { dataset: { schedule: s.name } },
    h('td', {}, h('span.mono', {}, s.name), s.origin && s.origin !== 'runtime' ? h('div.muted', {}, s.origin) : ''),
    h('td.mono', {}, s.spec),
    h('td', {}, s.tz || 'UTC'),
    h('td', {}, h('a', { href: '#/queue/' + enc(s.queue) }, s.queue)),
    h('td', {}, s.task_type),
    s.paused ? h('td', {}, h('span.muted', {}, 'paused')) : fireCell(s.next_fire_ms, now, true),
    fireCell(s.last_fire_ms, now, false),
    h('td', {}, s.last_task_id ? h('a.mono', { href: taskHref(s.last_task_id, s.queue) }, s.last_task_id) : ''),
    h('td', {}, s.paused ? badge('paused', 'paused') : badge('active', 'active')),
    h('td', { dataset: { col: 'error' } }, problem),
    h('td', {}, s.paused
      ? writeButton('Resume', base + '/resume' + inq, {}, { what: 'resume ' + s.name })
      : writeButton('Pause', base + '/pause' + inq, {}, { what: 'pause ' + s.name }), ' ',
    writeButton('Run now', base + '/run' + inq, {}, { action: 'cron-run', what: 'run ' + s.name,
      confirm: 'Enqueue a task of ' + s.name + ' into ' + s.queue + ' now?' })));
}

async function renderPeriodic() {
  const d = await api('/api/cron');
  const heads = ['schedule', 'spec', 'zone', 'queue', 'task type', 'next fire', 'last fire', 'last task', 'state', 'error', ''];
  const table = h('table', { id: 'cron' },
    h('thead', {}, h('tr', {}, heads.map((x) => h('th', {}, x)))),
    h('tbody', {}, d.schedules.length ? d.schedules.map((s) => cronRow(s, d.now_ms))
      : h('tr', {}, h('td', { colspan: heads.length }, h('span.muted', { id: 'cron-none' },
        'No periodic schedule. Add one with dtqctl cron add, or a [cron:NAME] section in the workers\' configuration.')))));
  setView(h('h1', {}, 'Periodic'),
    h('p.muted', {}, 'Tasks enqueued on a schedule by the scheduler leader. Times are in this browser\'s zone; ' +
      'Run now enqueues one task at once without moving the schedule.'), table);
}

// ------------------------------------------------------------------ limits

// "20/s", "100/10s", "5/1500ms": a rate as `dtqctl limit set --rate` takes it.
function fmtRate(rate, periodMs) {
  if (rate === null || rate === undefined || !periodMs) return null;
  for (const [unit, ms] of [['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000], ['ms', 1]]) {
    if (periodMs % ms) continue;
    return rate + '/' + (periodMs === ms ? '' : periodMs / ms) + unit;
  }
  return rate + '/' + periodMs + 'ms';
}

// The slots held of a concurrency limit: a small bar and "1 / 3".
function useBar(used, max) {
  const fill = h('i');
  fill.style.width = Math.round(Math.min(1, used / max) * 100) + '%';
  return h('span', { title: used + ' of ' + max + ' slots held' },
    h('span.usebar' + (used >= max ? '.full' : ''), {}, fill), fmtNum(used) + ' / ' + fmtNum(max));
}

function limitRow(l) {
  const u = l.use || {};
  const rate = fmtRate(l.rate, l.period_ms);
  const until = u.deferred_until_ms, left = until ? Number(until) - Date.now() : 0;
  const body = l.task_type ? { task_type: l.task_type } : {};
  return h('tr', { dataset: { limit: l.target } },
    h('td', {}, h('a', { href: '#/queue/' + enc(l.queue) }, l.queue),
      l.task_type ? h('span.mono', {}, ':' + l.task_type) : h('div.muted', {}, 'whole queue')),
    h('td', { dataset: { col: 'rate' } }, rate ? h('span.mono', {}, rate) : h('span.muted', {}, '–'),
      rate && l.burst ? h('div.muted', {}, 'burst ' + fmtNum(l.burst)) : ''),
    h('td.num', {}, fmtNum(l.concurrency)),
    h('td', {}, l.per_key ? 'yes' : 'no'),
    h('td', { dataset: { col: 'running' } }, l.concurrency ? useBar(u.running || 0, l.concurrency)
      : h('span.muted', {}, '–')),
    h('td.num', { dataset: { col: 'tokens' }, title: rate && !l.per_key ? 'of ' + (l.burst + 1) + ' at most' : null },
      fmtNum(u.tokens_left)),
    h('td.num', {}, fmtNum(u.keys)),
    h('td', { dataset: { col: 'deferred' } }, until
      ? h('span.warn', { title: fmtTime(until) }, 'deferring until ' + fmtLocal(until),
        left > 0 ? h('div.muted', {}, 'in ' + fmtAge(left)) : '')
      : ''),
    h('td', {}, writeButton('Remove', '/api/limits/' + enc(l.queue) + '/remove', body,
      { danger: true, action: 'limit-remove', what: 'remove the limit on ' + l.target,
        confirm: 'Remove the limit on ' + l.target + '? Its deferred tasks run unlimited when due.' })));
}

async function renderLimits() {
  const d = await api('/api/limits');
  const heads = ['target', 'rate', 'concurrency', 'per key', 'running', 'tokens left', 'keys', 'deferral', ''];
  const table = h('table', { id: 'limits' },
    h('thead', {}, h('tr', {}, heads.map((x, i) => h(i === 2 || i === 5 || i === 6 ? 'th.num' : 'th', {}, x)))),
    h('tbody', {}, d.limits.length ? d.limits.map(limitRow)
      : h('tr', {}, h('td', { colspan: heads.length }, h('span.muted', { id: 'limits-none' },
        'No rate or concurrency limit. Set one with dtqctl limit set, or FCALL <ns>_limit_set.')))));
  setView(h('h1', {}, 'Limits'),
    h('p.muted', {}, 'Rate and concurrency limits of queues and task types, and their use now. ' +
      'A task over a limit is deferred, not failed; tokens left is how many could start at once. ' +
      'Set limits with dtqctl limit set; Remove takes one away.'), table);
}

// ------------------------------------------------------------------ dead letters

function parseQuery(s) {
  const out = {};
  new URLSearchParams(s || '').forEach((v, k) => { out[k] = v; });
  return out;
}

// The class is searched by dtq-web (<ns>_dead_letters); the task id prefix and the type
// within the page fetched (500 entries when they are given).
async function renderDlq(params) {
  const cls = params.class || '', order = params.order || 'newest', cursor = params.cursor || '';
  const prefix = params.id_prefix || '', type = params.task_type || '';
  const local = !!(prefix || type);
  const qs = new URLSearchParams({ count: local ? '500' : '50', order });
  if (cls) qs.set('class', cls);
  if (cursor) qs.set('cursor', cursor);
  const d = await api('/api/dlq?' + qs);
  document.getElementById('dlq-count').textContent = d.total ? d.total : '';
  const cur = { class: cls, order, id_prefix: prefix, task_type: type };
  const go = (p) => goTo('dlq', Object.assign({}, cur, p));
  const sel = h('select', { id: 'dlq-class', 'aria-label': 'failure class',
    onchange: (e) => go({ class: e.target.value, cursor: '' }) },
  h('option', { value: '' }, 'every class'), CLASSES.map((c) => h('option', { value: c, selected: c === cls }, c)));
  const ord = h('select', { id: 'dlq-order', 'aria-label': 'order', onchange: (e) => go({ order: e.target.value, cursor: '' }) },
    h('option', { value: 'newest', selected: order === 'newest' }, 'newest first'),
    h('option', { value: 'oldest', selected: order === 'oldest' }, 'oldest first'));
  const search = searchForm([['id_prefix', 'task id prefix'], ['task_type', 'task type']], params,
    (p) => goTo('dlq', Object.assign({ class: cls, order }, p)), [sel, ord]);
  const toolbar = h('div.toolbar', {},
    writeButton(cls ? 'Requeue all ' + cls : 'Requeue all', '/api/dlq/requeue-all', cls ? { class: cls } : {},
      { action: 'requeue-all', what: 'requeue all', confirm: 'Requeue every dead letter' + (cls ? ' of class ' + cls : '') + '?' }),
    writeButton('Purge', '/api/dlq/purge', {}, { action: 'purge', danger: true, what: 'purge',
      confirm: 'Delete every dead-letter entry? Task hashes stay.' }));
  const { sel: pick, bar } = bulkBar([
    { label: 'Requeue', path: '/api/dlq/requeue', action: 'bulk-requeue', what: 'requeue' },
    { label: 'Discard', path: '/api/dlq/discard', action: 'bulk-discard', what: 'discard', danger: true,
      confirm: (ids) => 'Discard ' + ids.length + ' dead letter' + (ids.length > 1 ? 's' : '') + '?' }]);
  const shown = d.entries.filter((e) => (!prefix || (e.task_id || '').startsWith(prefix)) && (!type || e.task_type === type));
  const rows = shown.map((e) => h('tr', { dataset: { task: e.task_id, entry: e.entry_id } },
    pick.box(e.task_id, e.queue),
    h('td', {}, ago(e.entry_ms)),
    h('td', {}, h('a.mono', { href: taskHref(e.task_id, e.queue) }, e.task_id)),
    h('td', {}, h('a', { href: '#/queue/' + enc(e.queue) }, e.queue)),
    h('td', {}, e.task_type), h('td.num', {}, e.attempts_made || e.attempt),
    h('td', {}, badge(e.last_error_class || '?')),
    h('td.err', {}, e.last_error),
    h('td', {}, writeButton('Requeue', '/api/tasks/' + enc(e.task_id) + '/requeue' + inQueue(e.queue), {}, { what: 'requeue ' + e.task_id }), ' ',
      writeButton('Discard', '/api/tasks/' + enc(e.task_id) + '/discard' + inQueue(e.queue), {}, { what: 'discard ' + e.task_id, danger: true, confirm: 'Discard the dead letter of ' + e.task_id + '?' }))));
  const table = h('table', { id: 'dlq' },
    h('thead', {}, h('tr', {}, pick.head, ['dead-lettered', 'task', 'queue', 'type', 'attempts', 'class', 'last error', ''].map((t) => h('th', {}, t)))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 9 }, h('span.muted', {}, 'no dead letter' + (cls ? ' of class ' + cls : '') + (local ? ' matching the search' : ''))))));
  const pager = h('div.toolbar', {},
    cursor && h('button.ghost', { type: 'button', onclick: () => go({ cursor: '' }) }, 'First page'),
    d.next_cursor && h('button.ghost', { type: 'button', id: 'dlq-next', onclick: () => go({ cursor: d.next_cursor }) }, 'Next page'),
    h('span.muted', {}, d.total + ' entries in the stream' + (cls || local ? '; ' + d.scanned + ' examined for this page' : '') +
      (local ? ', ' + shown.length + ' match the task id prefix and type' : '')));
  setView(h('h1', {}, 'Dead letters'), search, toolbar, bar, table, pager);
}

// ------------------------------------------------------------------ live events, audit

// Follows a Server-Sent Events stream with fetch rather than EventSource, which cannot
// send the Authorization header a read token needs. Reconnects 3 s after a failure, as
// EventSource would; handlers: open(), message(data), error(). Returns { close }.
function followEvents(path, handlers) {
  const ctrl = new AbortController();
  let stopped = false, timer = null;
  const connect = async () => {
    try {
      const res = await fetch(path, { headers: authHeaders({ Accept: 'text/event-stream' }),
        cache: 'no-store', signal: ctrl.signal });
      if (!res.ok) {
        if (res.status === 401) needToken();
        throw new Error(res.statusText);
      }
      handlers.open();
      const reader = res.body.getReader(), dec = new TextDecoder();
      let buf = '', data = [];
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).replace(/\r$/, '');
          buf = buf.slice(i + 1);
          if (line === '') {
            if (data.length) handlers.message(data.join('\n'));
            data = [];
          } else if (line.startsWith('data:')) {
            data.push(line.slice(5).replace(/^ /, ''));
          }
        }
      }
    } catch (e) {
      /* the stream failed or was closed: reconnect below unless closed on purpose */
    }
    if (stopped) return;
    handlers.error();
    timer = setTimeout(connect, 3000);
  };
  connect();
  return { close: () => { stopped = true; clearTimeout(timer); ctrl.abort(); } };
}

function renderEvents() {
  const list = h('tbody', { id: 'event-rows' });
  const filter = h('input', { id: 'event-filter', type: 'search', placeholder: 'filter: type, queue, task id' });
  const status = h('span.muted', { id: 'event-status' }, 'connecting…');
  let paused = false;
  const toggle = h('button.ghost', { type: 'button', onclick: () => {
    paused = !paused;
    toggle.textContent = paused ? 'Follow' : 'Pause';
  } }, 'Pause');
  setView(h('h1', {}, 'Live events'), h('div.toolbar', {}, filter, toggle, status),
    h('table', { id: 'events' }, h('thead', {}, h('tr', {}, ['time', 'type', 'task', 'queue', 'attempt', 'worker', 'metadata'].map((t) => h('th', {}, t)))), list));
  const onmessage = (data) => {
    if (paused) return;
    let e;
    try { e = JSON.parse(data); } catch (err) { return; }
    const f = filter.value.trim();
    if (f && ![e.type, e.queue, e.task_id, e.worker_id].some((x) => x && x.includes(f))) return;
    list.prepend(h('tr', { dataset: { type: e.type } }, h('td.mono', {}, e.ts), h('td.ev-type', {}, e.type),
      h('td', {}, e.task_id ? h('a.mono', { href: taskHref(e.task_id, e.queue) }, e.task_id) : ''),
      h('td', {}, e.queue || ''), h('td.num', {}, e.attempt), h('td.mono', {}, e.worker_id || ''),
      h('td.mono', {}, e.metadata ? JSON.stringify(e.metadata) : '')));
    while (list.rows.length > 500) list.deleteRow(-1);
  };
  state.source = followEvents('/api/events?backlog=100', {
    open: () => { status.textContent = 'following ' + (state.info ? state.info.prefix : '') + ':events'; },
    error: () => { status.textContent = 'reconnecting…'; },
    message: onmessage,
  });
}

async function renderAudit(params) {
  const qs = new URLSearchParams({ count: '50' });
  if (params.cursor) qs.set('cursor', params.cursor);
  const a = await api('/api/audit?' + qs);
  setView(h('h1', {}, 'Audit'),
    h('p.muted', {}, 'Every admin action through the Functions, whoever made it (redis-cli, dtqctl, dtq-web).'),
    h('table', { id: 'audit' }, h('thead', {}, h('tr', {}, ['time', 'actor', 'action', 'task'].map((t) => h('th', {}, t)))),
      h('tbody', {}, a.entries.map((e) => h('tr', {}, h('td', {}, ago(e.ts)), h('td.mono', {}, e.actor), h('td', {}, e.action),
        h('td', {}, e.task_id ? h('a.mono', { href: taskHref(e.task_id, e.queue) }, e.task_id) : ''))))),
    h('div.toolbar', {}, params.cursor && h('button.ghost', { type: 'button', onclick: () => { location.hash = '#/audit'; } }, 'Newest'),
      a.next_cursor && h('button.ghost', { type: 'button', onclick: () => { location.hash = '#/audit?cursor=' + enc(a.next_cursor); } }, 'Older')));
}

// ------------------------------------------------------------------ router

function currentRoute() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, query] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, params: parseQuery(query) };
}

async function refresh() {
  const { parts, params } = currentRoute();
  try {
    if (parts.length === 0) await renderOverview();
    else if (parts[0] === 'queue' && parts[1]) await renderQueue(parts[1]);
    else if (parts[0] === 'task' && parts[1]) await renderTask(parts[1], params.queue);
    else if (parts[0] === 'batch' && parts[1]) await renderBatch(parts[1], params.queue);
    else if (parts[0] === 'batches') await renderBatches();
    else if (parts[0] === 'dlq') await renderDlq(params);
    else if (SCHED_TABS[parts[0]]) await renderSched(parts[0], params);
    else if (parts[0] === 'periodic') await renderPeriodic();
    else if (parts[0] === 'limits') await renderLimits();
    else if (parts[0] === 'audit') await renderAudit(params);
    else if (parts[0] === 'events') { /* a stream, not polled */ }
    else showError({ status: 404, message: 'no such page' });
    setConn(true);
  } catch (e) {
    if (e.status === 503 || e instanceof TypeError) setConn(false, e.message);
    showError(e);
  }
}

function route() {
  stopTimers();
  const { parts } = currentRoute();
  const name = parts[0] || 'overview';
  document.querySelectorAll('header nav a').forEach((a) => a.classList.toggle('active', a.dataset.nav === name));
  document.getElementById('view').dataset.state = 'loading';
  if (name === 'events') { renderEvents(); return; }
  refresh();
  if (name === 'overview' || name === 'queue') every(POLL_MS, refresh);
  if (name === 'task' || name === 'batch' || name === 'batches') every(POLL_MS * 2, refresh);
  if (name === 'periodic') every(POLL_MS * 2, refresh);
  if (name === 'limits') every(POLL_MS, refresh);
}

function setConn(ok, why) {
  const c = document.getElementById('conn');
  c.className = 'badge ' + (ok ? 'up' : 'down');
  c.textContent = ok ? 'connected' : 'no connection';
  c.title = ok ? 'dtq-web and Redis answer' : (why || '');
}

// ------------------------------------------------------------------ token

function openTokenPanel() {
  document.getElementById('token-panel').hidden = false;
  document.getElementById('token-input').focus();
}

function showTokenState() {
  const s = document.getElementById('token-state');
  const writable = state.info && state.info.writable;
  if (state.readsNeedToken && !state.token) {
    s.textContent = 'dtq-web needs a token for reads: enter a read or write token';
    document.getElementById('mode').textContent = 'token needed';
    return;
  }
  s.textContent = !writable ? 'dtq-web is read-only: it was started without a token file'
    : state.token ? 'token set: writes are enabled' : 'no token: writes are refused';
  document.getElementById('mode').textContent = !writable ? 'read-only' : state.token ? 'writes enabled' : 'token needed for writes';
}

function setupToken() {
  state.token = sessionStorage.getItem('dtq-web-token') || '';
  document.getElementById('token-button').addEventListener('click', () => {
    const p = document.getElementById('token-panel');
    p.hidden = !p.hidden;
    if (!p.hidden) document.getElementById('token-input').focus();
  });
  document.getElementById('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const v = document.getElementById('token-input').value.trim();
    state.token = v;
    if (v) sessionStorage.setItem('dtq-web-token', v); else sessionStorage.removeItem('dtq-web-token');
    document.getElementById('token-input').value = '';
    showTokenState();
    toast(v ? 'token saved for this tab' : 'token cleared');
    document.getElementById('token-panel').hidden = true;
    if (state.readsNeedToken) loadInfo().then(route); /* what was refused, with the token */
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    state.token = '';
    sessionStorage.removeItem('dtq-web-token');
    showTokenState();
  });
}

async function loadInfo() {
  try {
    state.info = await api('/api/info');
    document.getElementById('ns').textContent = state.info.namespace;
    document.getElementById('version').textContent = state.info.version;
  } catch (e) {
    if (e.status !== 401) setConn(false, e.message);
  }
  showTokenState();
}

async function start() {
  setupToken();
  document.getElementById('goto').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = document.getElementById('goto-id').value.trim();
    if (id) location.hash = '#/task/' + enc(id);
  });
  await loadInfo();
  window.addEventListener('hashchange', route);
  route();
}

document.addEventListener('DOMContentLoaded', start);
