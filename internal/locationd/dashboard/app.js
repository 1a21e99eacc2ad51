// meshloc's dashboard: a page of locationd (GET /). It reads the API's
// snapshots once (owners, relocations, the recovery controller), then
// follows the live event stream (GET /v1/events) and redraws at most
// twice a second. Every value is written as text, never as HTML.
'use strict';

const WINDOW_S = 300;          // the charts' last five minutes
const RECENT = 40;             // rows of recent relocations
const HIST_EDGES_MS = [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

const st = {
  owners: new Map(),   // id → api.Owner
  stats: new Map(),    // id → stats event
  live: new Map(),     // id → watch event
  inflight: new Map(), // relocation id → source report
  recent: [],          // ended, newest first
  recentSel: [],       // ended relocations of the selected object, newest first
  done: [],            // {t: ms, id, us, outcome} of ended relocations (charts)
  targetUs: new Map(), // relocation id → its target's interruption (the one definition: seal → admission)
  loaded: false,       // the first snapshots arrived (until then the tables say loading)
  selectedRecord: null, // the record of the object shown
  ended: new Set(),    // ids seen ended: a snapshot read before may still list them in flight
  selected: '',        // the object shown
  objectStream: null,
  dirty: true,
};

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function fill(tbody, rows) { tbody.replaceChildren(...rows); }

// interruption is a relocation's interruption, by its one definition: from
// the seal on the source to the admission on the target, as the target
// measured it; until the target's report arrived, the source's (the seal
// to hearing the target admitted it: one hop more), marked ≈.
function interruption(id, sourceUs) {
  const t = st.targetUs.get(id);
  if (t) return { us: t, text: ms(t) };
  return sourceUs ? { us: sourceUs, text: '≈' + ms(sourceUs) } : { us: 0, text: '-' };
}

function noteTarget(r) {
  if (r.role !== 'target' || !r.interruptionMicros) return;
  st.targetUs.set(r.relocationId, r.interruptionMicros);
  if (st.targetUs.size > 20000) st.targetUs = new Map([...st.targetUs].slice(-10000));
}

// syncRows makes tbody's rows those of rows ({key, attrs, onclick, cells}),
// keeping the row element of each key and changing only the cells that
// changed: a row or button under the pointer is never replaced by a
// redraw, so no click is lost. A cell is a value, {text, class, title}, or
// a function making its element once (a button).
function syncRows(tbody, rows, none) {
  if (rows.length === 0) {
    // Before the first snapshot a table says it is loading; then, that it
    // is empty: never an empty table that looks broken.
    const text = st.loaded ? (none || 'none') : 'loading…';
    const cols = tbody.closest('table').querySelectorAll('thead th').length;
    if (tbody.children.length !== 1 || tbody.firstChild.textContent !== text) {
      fill(tbody, [el('tr', { class: st.loaded ? 'none' : 'loading' }, el('td', { colspan: cols }, text))]);
    }
    return;
  }
  for (const tr of [...tbody.children]) if (!tr.dataset.key) tr.remove(); // the placeholder
  const old = new Map([...tbody.children].map((tr) => [tr.dataset.key, tr]));
  rows.forEach((r, i) => {
    let tr = old.get(r.key);
    if (tr) old.delete(r.key);
    else {
      tr = el('tr', {});
      tr.dataset.key = r.key;
      if (r.onclick) tr.addEventListener('click', r.onclick);
    }
    for (const [k, v] of Object.entries(r.attrs || {})) if (tr.getAttribute(k) !== String(v)) tr.setAttribute(k, v);
    r.cells.forEach((c, j) => {
      let td = tr.children[j];
      if (!td) { td = document.createElement('td'); tr.append(td); }
      if (typeof c === 'function') { if (!td.firstChild) td.append(c()); return; }
      const cell = c !== null && typeof c === 'object' ? c : { text: c };
      const text = String(cell.text);
      if (td.textContent !== text) td.textContent = text;
      if (td.className !== (cell.class || '')) td.className = cell.class || '';
      if (cell.title) td.title = cell.title; else td.removeAttribute('title');
    });
    if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
  });
  for (const tr of old.values()) tr.remove();
}

function showError(msg) {
  $('#error').textContent = msg || '';
}

// api fetches a JSON answer; an error answer throws its code and message.
async function api(path, opts) {
  const r = await fetch(path, opts);
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
  if (!r.ok) {
    const e = body && body.error;
    throw new Error(e ? `${e.code}: ${e.message}` : `HTTP ${r.status}`);
  }
  return body;
}

function post(path, body) {
  return api(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
}

const ms = (us) => (us / 1000).toFixed(us < 10000 ? 2 : 1) + ' ms';
const short = (id) => (id || '').slice(-8);
// ownerText is a record's owner pair, "-" for a sleeping object (no owner).
const ownerText = (r) => (r.state === 'sleeping' ? '-' : `${r.owner.id}@${r.owner.generation}`);
const name = (pair) => (pair || '').split('@')[0];

// --- snapshots -----------------------------------------------------------

async function loadSnapshots() {
  try {
    const [owners, rels] = await Promise.all([api('/v1/owners'), api('/v1/relocations')]);
    st.owners.clear();
    for (const o of owners.owners) st.owners.set(o.id, o);
    // Merged with what the stream already brought: each relocation once.
    for (const r of rels.relocations) {
      noteTarget(r);
      if (r.role !== 'source' || st.ended.has(r.relocationId)) continue;
      if (!r.outcome) { st.inflight.set(r.relocationId, r); continue; }
      st.ended.add(r.relocationId);
      st.recent.push(r);
      st.done.push({ t: r.endedUnixMs, id: r.relocationId, us: r.interruptionMicros, outcome: r.outcome });
    }
    st.recent.sort((a, b) => b.endedUnixMs - a.endedUnixMs);
    if (st.recent.length > RECENT) st.recent.length = RECENT;
    st.done.sort((a, b) => a.t - b.t);
    fillTargets();
    st.loaded = true;
    st.dirty = true;
    showError('');
  } catch (e) {
    showError('loading: ' + e.message);
  }
  loadController();
}

let controllerTimer = 0;
function scheduleController(delay) {
  clearTimeout(controllerTimer);
  controllerTimer = setTimeout(loadController, delay);
}

async function loadController() {
  try {
    const [c, orphans] = await Promise.all([api('/v1/controllers'), api('/v1/objects?orphaned=true')]);
    const rec = (c.controllers || []).find((x) => x.name === 'recovery') || c.controllers[0];
    const box = $('#controller');
    box.replaceChildren();
    if (rec) {
      const l = rec.leader;
      box.append(el('dl', {},
        el('dt', {}, 'leader'), el('dd', {}, l ? `${l.id} (${l.http || '-'}) since ${l.since}` : 'none'),
        el('dt', {}, 'asleep'), el('dd', {}, l ? `${l.asleep || 0} objects (no owner; a call wakes one)` : '-'),
        el('dt', {}, 'recovers orphans'), el('dd', {}, l && l.recoverOrphans ? 'yes' : 'no (reports them)'),
        el('dt', {}, 'recovered'), el('dd', {}, l ? `${l.recovered} (failed ${l.failed})` : '-'),
        el('dt', {}, 'this locationd'), el('dd', {}, `${rec.self.id}${rec.self.leader ? ', leader' : ''}`)));
    }
    $('#orphan-count').textContent = `(${orphans.objects.length})`;
    syncRows($('#orphans tbody'), orphans.objects.slice(0, 20).map((o) => ({
      key: o.object, attrs: { class: 'click' }, onclick: () => selectObject(o.object),
      cells: [o.object, { text: `${o.record.owner.id}@${o.record.owner.generation}`, class: 'dead' }, o.record.state] })));
    if (orphans.objects.length > 0) scheduleController(5000); // until they are recovered
  } catch (e) {
    showError('controller: ' + e.message);
  }
}

// --- etcd ------------------------------------------------------------------

const mib = (n) => (n / 1048576).toFixed(n < 10485760 ? 1 : 0) + ' MiB';

// loadEtcd shows how full etcd is, and its alarms (NOSPACE: every write
// refused) in a banner that says what to do; read every 10 seconds.
async function loadEtcd() {
  const pill = $('#etcd'), banner = $('#etcd-alarm');
  try {
    const e = await api('/v1/etcd');
    const ok = e.members.filter((m) => !m.error);
    const inUse = Math.max(0, ...ok.map((m) => m.dbSizeInUse)), quota = Math.max(0, ...ok.map((m) => m.quotaBytes));
    pill.textContent = ok.length ? `etcd ${mib(inUse)} of ${mib(quota)}` : 'etcd unreachable';
    const off = e.compaction.auto === 'off';
    pill.title = `the etcd locationd uses (GET /v1/etcd): data in use against its quota; compaction ${e.compaction.auto}` +
      (off ? ': nothing compacts it, its history grows until the quota' : '');
    pill.className = 'pill ' + (e.alarms.length || !ok.length ? 'bad' : off ? 'off' : 'on');
    banner.hidden = e.alarms.length === 0;
    banner.textContent = e.alarms.map((a) => `etcd ${a.type} alarm (member ${a.member})`).join('; ') + (e.hint ? ': ' + e.hint : '');
  } catch (err) {
    pill.textContent = 'etcd ?';
    pill.className = 'pill off';
    pill.title = err.message;
  }
}

// --- the live stream -----------------------------------------------------

function connect() {
  const es = new EventSource('/v1/events?types=owner,relocation,stats,watch,reset');
  const pill = $('#stream');
  es.onopen = () => { pill.textContent = 'live'; pill.className = 'pill on'; };
  es.onerror = () => { pill.textContent = 'reconnecting…'; pill.className = 'pill off'; };
  const on = (type, f) => es.addEventListener(type, (m) => { f(JSON.parse(m.data)); st.dirty = true; });
  on('hello', (h) => { if (!h.resumed) loadSnapshots(); });
  on('reset', () => loadSnapshots());
  on('owner', (o) => {
    if (o.kind === 'put') st.owners.set(o.id, o.owner);
    else { st.owners.delete(o.id); st.stats.delete(o.id); st.live.delete(o.id); }
    fillTargets();
    scheduleController(1000);
  });
  on('stats', (s) => st.stats.set(s.node, s));
  on('watch', (w) => st.live.set(w.node, w));
  on('relocation', relocationEvent);
}

function relocationEvent(r) {
  noteTarget(r);
  if (r.role !== 'source') return; // one row per relocation: its source's
  if (!r.outcome) { if (!st.ended.has(r.relocationId)) st.inflight.set(r.relocationId, r); return; }
  st.inflight.delete(r.relocationId);
  st.ended.add(r.relocationId);
  if (st.ended.size > 20000) st.ended = new Set([...st.ended].slice(-10000));
  for (const list of r.object === st.selected ? [st.recent, st.recentSel] : [st.recent]) {
    list.unshift(r);
    if (list.length > RECENT) list.length = RECENT;
  }
  st.done.push({ t: Date.now(), id: r.relocationId, us: r.interruptionMicros, outcome: r.outcome });
}

// --- drawing -------------------------------------------------------------

function render() {
  if (!st.dirty) return;
  st.dirty = false;
  const now = Date.now();
  while (st.done.length && st.done[0].t < now - WINDOW_S * 1000) st.done.shift();
  for (const [id, r] of st.inflight) if (now - r.startedUnixMs > 30000) st.inflight.delete(id); // its node went away (relocations end within their deadline, 10 s by default)

  const ids = [...st.owners.keys()].sort();
  syncRows($('#nodes tbody'), ids.map((id) => {
    const o = st.owners.get(id), s = st.stats.get(id), w = st.live.get(id);
    return { key: id, attrs: { 'data-node': id }, cells: [
      `${id}@${o.generation}`,
      { text: o.state, class: 'state-' + o.state },
      o.weight,
      { text: (o.types || []).join(', ') || '-', title: 'the object types it hosts' },
      s ? s.hostedObjects : '-',
      s ? Math.round(s.callsPerSecond) : '-',
      s ? s.relocationsInFlight : '-',
      o.address,
      { text: w ? (w.connected ? 'yes' : 'no') : '…', class: w && !w.connected ? 'dead' : '', title: w && w.error ? w.error : '' },
      () => el('button', { type: 'button', onclick: () => drain(id) }, 'drain'),
    ] };
  }));

  const recentSec = st.done.filter((d) => d.t >= now - 5000 && d.outcome === 'completed').length / 5;
  $('#rate').textContent = `${recentSec.toFixed(0)} relocations/s`;
  const failed = st.done.filter((d) => d.outcome !== 'completed').length;
  $('#counts').textContent = `(${st.inflight.size} in flight; last 5 min: ${st.done.length - failed} completed, ${failed} other)`;

  const row = (r, ...last) => ({
    key: r.relocationId, onclick: () => showTimeline(r.relocationId),
    attrs: { class: 'click', 'data-id': r.relocationId, 'data-outcome': r.outcome || 'in-flight' },
    cells: [{ text: short(r.relocationId), title: r.relocationId }, { text: r.object, title: r.object }, `${name(r.source)} → ${name(r.target)}`, ...last],
  });
  const only = $('#only-selected').checked && st.selected;
  const infl = [...st.inflight.values()].filter((r) => !only || r.object === st.selected)
    .sort((a, b) => b.startedUnixMs - a.startedUnixMs).slice(0, 12);
  syncRows($('#inflight tbody'), infl.map((r) => row(r, r.phase, `${Math.max(0, now - r.startedUnixMs)} ms`)), 'none in flight');
  syncRows($('#recent tbody'), (only ? st.recentSel : st.recent).slice(0, 16).map((r) =>
    row(r, { text: r.outcome, class: 'outcome-' + r.outcome, title: r.message || '' }, interruption(r.relocationId, r.interruptionMicros).text)), 'none yet');
  drawRate(now);
  drawHistogram();
}

function canvas(sel) {
  const c = $(sel), ctx = c.getContext('2d');
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.font = '10px system-ui, sans-serif';
  return [c, ctx];
}

function drawRate(now) {
  const [c, ctx] = canvas('#rate-chart');
  const per = new Array(WINDOW_S).fill(0);
  for (const d of st.done) {
    const i = WINDOW_S - 1 - Math.floor((now - d.t) / 1000);
    if (i >= 0 && i < WINDOW_S && d.outcome === 'completed') per[i]++;
  }
  const max = Math.max(1, ...per), h = c.height - 16, w = c.width / WINDOW_S;
  ctx.fillStyle = '#2b6cb0';
  per.forEach((v, i) => { const bh = (v / max) * h; ctx.fillRect(i * w, h - bh, Math.max(1, w - 0.5), bh); });
  ctx.fillStyle = '#6b7385';
  ctx.fillText(`max ${max}/s`, 4, 10);
  ctx.fillText('-5 min', 2, c.height - 3);
  ctx.fillText('now', c.width - 20, c.height - 3);
}

function drawHistogram() {
  const [c, ctx] = canvas('#hist-chart');
  const done = st.done.filter((d) => d.outcome === 'completed' && d.us > 0);
  const counts = new Array(HIST_EDGES_MS.length + 1).fill(0);
  for (const d of done) {
    let i = HIST_EDGES_MS.findIndex((e) => d.us / 1000 < e);
    counts[i < 0 ? HIST_EDGES_MS.length : i]++;
  }
  const max = Math.max(1, ...counts), h = c.height - 18, w = c.width / counts.length;
  counts.forEach((v, i) => {
    const bh = (v / max) * h;
    ctx.fillStyle = '#805ad5';
    ctx.fillRect(i * w + 2, h - bh, w - 4, bh);
    ctx.fillStyle = '#6b7385';
    const label = i < HIST_EDGES_MS.length ? '<' + HIST_EDGES_MS[i] : '≥1s';
    ctx.fillText(label, i * w + 3, c.height - 4);
  });
  const us = done.map((d) => interruption(d.id, d.us).us).filter((u) => u > 0).sort((a, b) => a - b);
  $('#interruption-summary').textContent = us.length
    ? `(ms, the source's seal → the target's admission; p50 ${ms(us[Math.floor(us.length / 2)])}, p99 ${ms(us[Math.floor(us.length * 0.99)])}, ${us.length} moves)`
    : '(ms, no relocation yet)';
}

// --- one relocation's timeline ---------------------------------------------

async function showTimeline(id) {
  try {
    const r = await api('/v1/relocations/' + encodeURIComponent(id));
    $('#timeline').hidden = false;
    $('#timeline-id').textContent = `${short(id)} ${r.object}`;
    const tgt = r.role === 'source' ? r.counterpart : r;
    if (tgt) noteTarget({ ...tgt, role: 'target', relocationId: id });
    const src = r.role === 'source' ? r : r.counterpart;
    const iv = interruption(id, src ? src.interruptionMicros : 0);
    $('#timeline-summary').textContent = `${r.source} → ${r.target}: ${r.outcome || 'in flight (' + r.phase + ')'}` +
      (iv.us ? `; interruption ${iv.text} (the source's seal to the target's admission)` : '') +
      (r.payloadBytes ? `; ${r.payloadBytes} bytes` : '');
    const trace = r.traceId || (r.counterpart && r.counterpart.traceId) || '';
    $('#timeline-trace').textContent = trace ? 'trace ' + trace : '';
    // A side's start is absent (omitted) where it was not in the phase.
    const spans = r.phases.flatMap((p) => [[p.sourceStartUnixMicros || 0, p.sourceMicros || 0], [p.targetStartUnixMicros || 0, p.targetMicros || 0]])
      .filter(([start]) => start > 0);
    const t0 = Math.min(...spans.map(([start]) => start));
    const t1 = Math.max(...spans.map(([start, len]) => start + len));
    const scale = 245 / Math.max(1, t1 - t0);
    // One SVG per phase: the source's span above, the target's below, on
    // one time axis (SVG attributes, which the page's CSP allows).
    const NS = 'http://www.w3.org/2000/svg';
    const bars = (p) => {
      const svg = document.createElementNS(NS, 'svg');
      svg.setAttribute('width', '250');
      svg.setAttribute('height', '18');
      for (const [start, len, y, cls] of [[p.sourceStartUnixMicros, p.sourceMicros, 1, 'src'], [p.targetStartUnixMicros, p.targetMicros, 10, 'tgt']]) {
        if (!(start > 0)) continue;
        const r = document.createElementNS(NS, 'rect');
        r.setAttribute('x', String(Math.round((start - t0) * scale)));
        r.setAttribute('y', String(y));
        r.setAttribute('width', String(Math.max(1, Math.round(len * scale))));
        r.setAttribute('height', '7');
        r.setAttribute('class', 'bar ' + cls);
        svg.append(r);
      }
      return svg;
    };
    const cell = (us, start) => el('td', {}, start > 0 ? ms(us || 0) : '-');
    fill($('#timeline-table tbody'), r.phases.map((p) => el('tr', { 'data-phase': p.phase },
      el('td', {}, p.phase), cell(p.sourceMicros, p.sourceStartUnixMicros), cell(p.targetMicros, p.targetStartUnixMicros),
      el('td', {}, bars(p)))));
  } catch (e) {
    showError('relocation ' + short(id) + ': ' + e.message);
  }
}

// --- objects ---------------------------------------------------------------

const FULL_NAME = /^(actor\/[^/\s]+\/[^/\s]+|group\/[^/\s]+)$/;

async function search(ev) {
  ev.preventDefault();
  const q = $('#search-input').value.trim();
  const box = $('#matches');
  box.replaceChildren();
  if (!q) return;
  if (FULL_NAME.test(q)) { selectObject(q); return; }
  try {
    // locationd filters and pages: the page never carries every object.
    const page = await api('/v1/objects?limit=30&contains=' + encodeURIComponent(q));
    const hits = page.objects;
    if (hits.length === 0 && !page.next) box.append(el('span', { class: 'muted' }, `no object's name contains "${q}"`));
    for (const o of hits) box.append(el('a', { href: '#', onclick: (e) => { e.preventDefault(); selectObject(o.object); } }, o.object));
    if (page.next) box.append(el('span', { class: 'muted' }, hits.length ? 'and more: type more of the name' : 'none in the first objects read: type more of the name'));
    if (hits.length === 1 && !page.next) selectObject(hits[0].object);
  } catch (e) {
    showError('search: ' + e.message);
  }
}

async function selectObject(obj) {
  try {
    const o = await api('/v1/objects/' + obj + '?history=16');
    if (st.selected !== obj) {
      followObject(obj);
      st.recentSel = st.recent.filter((r) => r.object === obj);
    }
    st.selected = obj;
    $('#only-selected').disabled = false;
    $('#only-name').textContent = `(${obj})`;
    $('#object').hidden = false;
    $('#object-name').textContent = o.object;
    const r = o.record;
    st.selectedRecord = r;
    fillTargets();
    const kv = [
      ['owner', r.state === 'sleeping' ? 'none: asleep, its next call wakes it' : `${ownerText(r)} (id@owner generation)`],
      ['owner alive', r.state === 'sleeping' ? '-' : o.ownerAlive ? 'yes' : 'no'],
      ['state', r.state], ['object generation', r.objectGeneration], ['authority generation', `${r.ownerGeneration} (owner changes)`],
      ['store version', o.storeVersion], ['address', r.node.address || '-'], ['last relocation', r.lastRelocation || '-'],
    ];
    if (r.group) kv.push(['group', r.group]);
    if (r.members) kv.push(['members', r.members.join(', ')]);
    $('#object-record').replaceChildren(...kv.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    fill($('#history tbody'), (o.history || []).map((h) => el('tr', {},
      el('td', {}, h.storeVersion), el('td', {}, ownerText(h.record)),
      el('td', {}, h.record.ownerGeneration), el('td', {}, h.record.state), el('td', {}, short(h.record.lastRelocation)))));
    if (o.historyCompacted) $('#history tbody').append(el('tr', {}, el('td', { colspan: 5, class: 'muted' }, 'older versions were compacted by etcd')));
  } catch (e) {
    showError(obj + ': ' + e.message);
  }
}

// followObject streams the selected object's record changes only: the
// view is read again at each.
function followObject(obj) {
  if (st.objectStream) st.objectStream.close();
  const es = new EventSource('/v1/events?types=record&object=' + encodeURIComponent(obj));
  let again = 0;
  es.addEventListener('record', () => { clearTimeout(again); again = setTimeout(() => selectObject(obj), 300); });
  st.objectStream = es;
}

// fillTargets offers the nodes the shown object may move to, by the one
// placement rule: serving, weight above 0, the owner's application version,
// hosting the object's type, not its owner.
function fillTargets() {
  const sel = $('#relocate-target'), keep = sel.value, r = st.selectedRecord;
  const owner = r && st.owners.get(r.owner.id);
  const ok = (o) => o.state === 'serving' && o.weight > 0 && (!r || (o.id !== r.owner.id &&
    (!owner || o.applicationVersion === owner.applicationVersion) && (!r.type || (o.types || []).includes(r.type))));
  const ids = [...st.owners.values()].filter(ok).map((o) => o.id).sort();
  sel.replaceChildren(el('option', { value: '' }, ids.length ? 'placement chooses' : 'no node can take it now'),
    ...ids.map((id) => el('option', { value: id }, id)));
  sel.value = ids.includes(keep) ? keep : '';
}

async function relocate(ev) {
  ev.preventDefault();
  const res = $('#relocate-result');
  // The answer comes when the relocation ended (most take milliseconds);
  // the live lists show it meanwhile.
  const body = { object: st.selected };
  if ($('#relocate-target').value) body.target = $('#relocate-target').value;
  res.dataset.outcome = '';
  res.textContent = 'relocating…';
  try {
    const r = await post('/v1/relocations', body);
    res.textContent = `relocation ${short(r.relocationId)} ${r.outcome}` +
      (r.interruptionMicros ? ` (interruption ${ms(r.interruptionMicros)})` : '') + (r.message ? `: ${r.message}` : '');
    res.dataset.outcome = r.outcome;
  } catch (e) {
    res.textContent = e.message;
    res.dataset.outcome = 'error';
  }
}

async function drain(id) {
  if (!confirm(`Drain ${id}? Its objects move to other nodes, then it stops.`)) return;
  try {
    const r = await fetch(`/v1/owners/${encodeURIComponent(id)}/drain`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    const text = await r.text();
    if (!r.ok) { const e = JSON.parse(text).error; throw new Error(`${e.code}: ${e.message}`); }
    const last = JSON.parse(text.trim().split('\n').pop());
    showError(last.kind === 'report' ? `${id} drained: ${last.report.movedCount} moved, ${last.report.failedCount} not` : `${id}: ${JSON.stringify(last)}`);
  } catch (e) {
    showError(`drain ${id}: ${e.message}`);
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('#search').addEventListener('submit', search);
  $('#relocate').addEventListener('submit', relocate);
  $('#timeline-close').addEventListener('click', () => { $('#timeline').hidden = true; });
  $('#only-selected').addEventListener('change', () => { st.dirty = true; });
  connect();
  setInterval(render, 500);
  loadEtcd();
  setInterval(loadEtcd, 10000);
});
