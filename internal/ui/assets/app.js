// hookd dashboard. Everything it shows or does goes through the public /v1
// API with the token the user signed in with (kept in sessionStorage, so it
// dies with the tab). Data is only ever put in the page as text, never as
// HTML: payloads, endpoint answers and URLs are attacker-controlled. No
// third-party code: charts are SVG drawn here.
'use strict';

const store = window.sessionStorage;
const main = document.getElementById('main');

// ---- Talking to the API ----

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || ('HTTP ' + status));
    this.status = status;
    this.code = e.code;
    this.field = e.field;
  }
}

async function call(method, url, body, token) {
  const headers = {};
  if (token) headers.Authorization = 'Bearer ' + token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(url, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const data = resp.status === 204 ? null : await resp.json().catch(() => null);
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

async function api(method, path, body) {
  try {
    return await call(method, '/v1' + path, body, store.getItem('hookd.token'));
  } catch (e) {
    if (e.status === 401) {
      signOut(portal() ? 'Your portal session has ended: ask for a new link.' : 'The token was refused: sign in again.');
    }
    throw e;
  }
}

// query builds ?k=v&…, leaving out empty values; an array repeats its
// key, empty values kept (a pager's trail begins with the first page's '').
function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else if (v !== undefined && v !== null && v !== '') q.set(k, v);
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

const admin = () => store.getItem('hookd.admin') === '1';
const portal = () => store.getItem('hookd.portal') === '1';
const tenantParam = () => (admin() ? store.getItem('hookd.tenant') || '' : '');
const tenantName = () => store.getItem('hookd.tenant') || (admin() ? 'default' : 'your tenant');

// ---- Time: relative, with the exact time on hover, in one zone ----

const zone = () => localStorage.getItem('hookd.zone') === 'utc' ? 'utc' : 'local';
const pad = (n) => String(n).padStart(2, '0');

function exact(d) {
  if (zone() === 'utc') return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  const off = -d.getTimezoneOffset();
  return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + pad(d.getHours()) + ':' +
    pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + ' UTC' + (off < 0 ? '−' : '+') + pad(Math.floor(Math.abs(off) / 60)) +
    ':' + pad(Math.abs(off) % 60);
}

// clock is a time of day in the zone, for sentences ("since 13:11").
function clock(d) {
  const h = zone() === 'utc' ? d.getUTCHours() : d.getHours();
  const m = zone() === 'utc' ? d.getUTCMinutes() : d.getMinutes();
  const t = pad(h) + ':' + pad(m);
  return Math.abs(Date.now() - d) < 20 * 3600e3 ? t : exact(d).slice(0, 10) + ' ' + t;
}

function relative(d) {
  const s = (d - Date.now()) / 1000;
  const a = Math.abs(s);
  if (a < 5) return 'just now';
  const units = [['day', 86400], ['h', 3600], ['min', 60], ['s', 1]];
  const [u, n] = units.find(([, n]) => a >= n);
  const v = Math.round(a / n);
  const text = v + ' ' + (u === 'day' && v !== 1 ? 'days' : u);
  return s < 0 ? text + ' ago' : 'in ' + text;
}

// when is an element showing a time relative to now, exact on hover.
function when(iso, words) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return el('time', {datetime: d.toISOString(), title: exact(d)}, words ? words(d) : relative(d));
}

// A datetime-local value (to the second) read and written in the chosen zone.
function inputValue(d) {
  const local = zone() === 'utc' ? d : new Date(d - d.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 19);
}
function fromInput(v) {
  if (!v) return null;
  const d = new Date(zone() === 'utc' ? v + (v.length === 16 ? ':00Z' : 'Z') : v);
  return isNaN(d) ? null : d;
}

// utcDay is a UTC day's date (MM-DD): the stats' days are UTC days, so
// a local zone west of UTC must not name the day before.
const utcDay = (d) => d.toISOString().slice(5, 10);

// ---- Words for what happened ----

const reasons = {200: 'OK', 201: 'Created', 202: 'Accepted', 204: 'No Content', 301: 'Moved Permanently', 302: 'Found', 307: 'Temporary Redirect', 308: 'Permanent Redirect',
  400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed',
  408: 'Request Timeout', 409: 'Conflict', 410: 'Gone', 413: 'Payload Too Large', 415: 'Unsupported Media Type',
  422: 'Unprocessable Entity', 425: 'Too Early', 429: 'Too Many Requests', 500: 'Internal Server Error',
  501: 'Not Implemented', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout'};
const httpStatus = (n) => 'HTTP ' + n + (reasons[n] ? ' ' + reasons[n] : '');

// cause says, in words, why the last attempt failed.
function cause(f) {
  if (!f) return '';
  const st = f.status ? httpStatus(f.status) : '';
  switch (f.class) {
    case 'http_5xx': return st + ': the endpoint fails on its side';
    case 'http_4xx':
      if (f.status === 429) return st + ': the endpoint asks hookd to slow down';
      if (f.status === 401 || f.status === 403) return st + ': the endpoint refuses hookd (check the signing secret or credentials)';
      if (f.status === 404 || f.status === 410) return st + ': nothing answers at this URL';
      return st + ': the endpoint rejects the requests (not retried)';
    case 'http_3xx': return st + ': a redirect, which hookd does not follow (use the final URL)';
    case 'timeout': return 'No answer in time (' + f.error + ')';
    case 'connection_refused': return 'Connection refused: nothing listens at this address';
    case 'connection_reset': return 'Connection reset by the endpoint';
    case 'connection_closed': return 'The endpoint closed the connection without answering';
    case 'unreachable': return 'The host cannot be reached';
    case 'dns': return 'The host name does not resolve (' + f.error + ')';
    case 'tls': return 'TLS failed: ' + f.error;
    case 'blocked': return 'hookd may not deliver to this address (' + f.error + ')';
    case 'proxy': return 'hookd\'s egress proxy failed, not the endpoint (' + f.error + ')';
  }
  return st || f.error || 'failed';
}

// Health's one word, and one of the dashboard's own: unmatched, an
// endpoint that is healthy only because nothing it asks for is ever sent.
const statusWords = {healthy: 'Healthy', failing: 'Failing', held: 'Held back', paused: 'Paused', disabled: 'Disabled', shed: 'Shedding',
  unmatched: 'No matching events'};
const statusOrder = ['failing', 'disabled', 'held', 'shed', 'unmatched', 'paused', 'healthy'];

// holdWords says what holds the next attempt back, and until when.
function holdWords(h) {
  const until = h.held_until ? ' (until about ' + clock(new Date(h.held_until)) + ')' : '';
  switch (h.held_by) {
    case 'endpoint_circuit': return h.held_until ? 'its circuit breaker holds it after repeated failures' + until : 'a probe is checking whether it recovered';
    case 'host_circuit': return h.held_until ? 'its host cannot be reached; hookd probes it before sending more' + until : 'a probe is checking whether its host recovered';
    case 'retry_after': return 'it asked hookd to wait (Retry-After)' + until;
    case 'recovery_ramp': return 'it is recovering: hookd sends its backlog gradually, so as not to overwhelm it' + until;
  }
  return '';
}

// sentTypes is what the tenant sent, hookd's own aside, and whether that
// is all of it (a list cut at limit may miss the type a pattern matches).
function sentTypes(types, limit) {
  return {sent: types.filter((t) => !t.startsWith('hookd.')), all: types.length < limit};
}

// unmatched: none of the patterns matches a type the tenant has sent
// (while it has sent some): a typo, or a plan. Patterns naming hookd's own
// events wait for those, and are not judged.
function unmatched(patterns, {sent, all}) {
  return all && sent.length > 0 && !patterns.some((p) => p.startsWith('hookd.')) &&
    !sent.some((t) => patterns.some((p) => matches(p, t)));
}

function noMatchWords(patterns, {sent}) {
  return 'None of the ' + sent.length + ' event types this tenant has sent (' + sent.slice(0, 5).join(', ') +
    (sent.length > 5 ? ', …' : '') + ') matches ' + patterns.join(', ') + ': nothing is delivered here. Check the patterns (Edit).';
}

// statusOf is the word the dashboard shows: health's, or unmatched.
function statusOf(s, h, types) {
  return h.status === 'healthy' && unmatched(s.event_types, types) ? 'unmatched' : h.status;
}

function nextTry(h) {
  if (!h.next_attempt_at) return '';
  const d = new Date(h.next_attempt_at);
  return d <= Date.now() ? 'next try any moment' : 'next try about ' + clock(d);
}

// ---- Building the page: elements hold text only ----

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  set(e, attrs);
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const svgNS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(svgNS, tag);
  set(e, attrs);
  for (const c of children.flat(Infinity)) if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  return e;
}

// set applies attributes (on*: listeners; data: dataset). Never style:
// the policy allows no inline style.
function set(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.setAttribute('class', v);
    else if (k === 'data') Object.assign(e.dataset, v);
    else if (k === 'value' && 'value' in e) e.value = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
}

function flash(msg, kind) {
  const f = document.getElementById('flash');
  f.replaceChildren(...[msg].flat().filter(Boolean).map((m) => m instanceof Node ? m : document.createTextNode(m)));
  f.className = kind || 'error';
  f.hidden = !msg;
}

function badge(text, kind) { return el('span', {class: 'badge ' + (kind || text)}, text); }
function statusBadge(status) { return badge(statusWords[status] || status, 'st-' + status); }
function link(href, ...text) { return el('a', {href}, ...text); }

// table makes a table that turns into cards on a narrow screen: each
// cell carries its column's name for that.
function table(cls, headers, rows, empty) {
  if (rows.length === 0) return el('div', {class: 'empty'}, empty || 'Nothing here.');
  for (const tr of rows) {
    [...tr.children].forEach((td, i) => { if (headers[i]) td.dataset.label = headers[i]; });
  }
  return el('table', {class: 'cards ' + (cls || '')},
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {scope: 'col'}, h)))),
    el('tbody', {}, rows));
}

function dl(pairs) {
  return el('dl', {}, pairs.filter(Boolean).flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

// confirmPanel shows what an action will do and asks once.
function confirmPanel(where, text, label, action) {
  const panel = el('div', {class: 'confirm', role: 'alertdialog', 'aria-label': label},
    el('p', {}, text),
    el('p', {class: 'actions'},
      label ? el('button', {type: 'button', id: 'confirm', onclick: async () => {
        panel.querySelectorAll('button').forEach((b) => { b.disabled = true; });
        await action();
        panel.remove();
      }}, label) : '',
      el('button', {type: 'button', id: 'cancel', class: 'secondary', onclick: () => panel.remove()}, label ? 'Cancel' : 'Close')));
  where.querySelector('.confirm')?.remove();
  where.append(panel);
  panel.querySelector('button').focus();
  return panel;
}

// secretBox shows a secret once, with a copy button.
function secretBox(secret, note) {
  const input = el('input', {id: 'secret', type: 'text', readonly: true, value: secret, 'aria-label': 'Signing secret'});
  return el('div', {class: 'secret', role: 'status'},
    el('p', {}, el('strong', {}, 'Signing secret'), ' (shown only now: keep it in your receiver\'s configuration)'),
    el('p', {class: 'copyline'}, input, el('button', {type: 'button', id: 'copy', onclick: async () => {
      input.select();
      try { await navigator.clipboard.writeText(secret); flash('Copied.', 'info'); } catch { flash('Selected: copy it with Ctrl+C.', 'info'); }
    }}, 'Copy')),
    note ? el('p', {}, note) : '');
}

// ---- Charts: plain SVG ----

// sparkline draws the last hour's deliveries a minute each (by when they
// were created, in their state now, from the stats API): delivered,
// pending and skipped up, failed down, so a failing endpoint shows red and
// a held one amber at a glance.
function sparkline(minutes) {
  const sum = (k) => minutes.reduce((a, m) => a + (m[k] || 0), 0);
  const [ok, bad, waiting, skipped] = ['delivered', 'failed', 'pending', 'skipped'].map(sum);
  const any = ok + bad + waiting + skipped > 0;
  const words = any ? ok + ' delivered, ' + bad + ' failed, ' + waiting + ' pending in the last hour' : 'No deliveries in the last hour';
  const w = 120, h = 24, mid = 14;
  const max = Math.max(1, ...minutes.map((m) => Math.max(m.delivered + m.pending + m.skipped, m.failed)));
  const bw = w / Math.max(1, minutes.length);
  const tall = (v, room) => (v ? Math.max(1, v / max * room) : 0);
  const bars = minutes.flatMap((m, i) => {
    let y = mid;
    const up = ['delivered', 'pending', 'skipped'].map((k) => {
      const t = tall(m[k], mid - 1);
      y -= t;
      return t ? svg('rect', {class: k, x: i * bw, y, width: bw * 0.8, height: t}) : null;
    });
    const down = tall(m.failed, h - mid - 1);
    return up.concat(down ? svg('rect', {class: 'failed', x: i * bw, y: mid, width: bw * 0.8, height: down}) : null);
  });
  return el('span', {class: 'spark', data: {delivered: ok, failed: bad, pending: waiting}},
    svg('svg', {viewBox: '0 0 ' + w + ' ' + h, width: w, height: h, role: 'img', 'aria-label': words},
      svg('title', {}, words), svg('line', {class: 'axis', x1: 0, x2: w, y1: mid, y2: mid}), bars),
    el('span', {class: 'spark-words'}, any ? ok + ' ok · ' + bad + ' failed · ' + waiting + ' pending' : 'idle'));
}

const series = [['delivered', 'Delivered'], ['failed', 'Failed'], ['skipped', 'Skipped'], ['pending', 'Pending']];

// barChart draws buckets ({start, delivered, failed, skipped, pending})
// as stacked bars, with the numbers in a table beside it.
function barChart(buckets, label, fmt) {
  const w = 600, h = 160, top = 10, bottom = 20, left = 34;
  const total = (b) => series.reduce((a, [k]) => a + (b[k] || 0), 0);
  const max = Math.max(1, ...buckets.map(total));
  const bw = (w - left) / Math.max(1, buckets.length);
  const y = (v) => top + (h - top - bottom) * (1 - v / max);
  const groups = buckets.map((b, i) => {
    let acc = 0;
    const rects = series.map(([k]) => {
      const v = b[k] || 0;
      if (!v) return null;
      const r = svg('rect', {class: k, x: left + i * bw + 1, y: y(acc + v), width: Math.max(1, bw - 2), height: y(acc) - y(acc + v)});
      acc += v;
      return r;
    });
    const words = fmt(new Date(b.start)) + ': ' + series.map(([k, n]) => (b[k] || 0) + ' ' + n.toLowerCase()).join(', ');
    return svg('g', {class: 'bucket'}, svg('title', {}, words), rects);
  });
  // The first label starts at the axis and the last ends at the edge, so
  // neither is cut off.
  const last = buckets.length - 1;
  const ticks = [[0, 'start', left], [Math.floor(last / 2), 'mid', left + Math.floor(last / 2) * bw + bw / 2], [last, 'end', w]]
    .filter(([i], j, a) => buckets[i] && a.findIndex(([k]) => k === i) === j);
  const chart = svg('svg', {class: 'chart', viewBox: '0 0 ' + w + ' ' + h, role: 'img', 'aria-label': label},
    svg('line', {class: 'axis', x1: left, x2: w, y1: h - bottom, y2: h - bottom}),
    svg('text', {x: left - 4, y: top + 8, class: 'tick end'}, String(max)),
    svg('text', {x: left - 4, y: h - bottom, class: 'tick end'}, '0'),
    ticks.map(([i, anchor, x]) => svg('text', {x, y: h - 4, class: 'tick ' + anchor}, fmt(new Date(buckets[i].start)))),
    groups);
  const rows = buckets.map((b) => el('tr', {data: {start: b.start}},
    el('td', {}, when(b.start, (d) => fmt(d))), series.map(([k]) => el('td', {class: 'num ' + k}, b[k] || 0))));
  return el('figure', {class: 'chartbox'}, chart,
    el('figcaption', {}, series.map(([k, n]) => el('span', {class: 'key ' + k}, n))),
    el('details', {}, el('summary', {}, 'The numbers'),
      table('chart-data', ['From'].concat(series.map(([, n]) => n)), rows)));
}

// ---- Views. Each renders into main; a route is the part of the hash after '#'. ----

let refresher = null; // the current view's auto-refresh
let updatedAt = 0;

// refreshing keeps a view fresh (every 10 s, unless the user is typing or
// deciding) and says how old what it shows is.
function refreshing(every) {
  updatedAt = Date.now();
  const again = () => {
    refresher = setTimeout(() => {
      const busy = document.activeElement && ['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement.tagName);
      if (busy || main.querySelector('.confirm, .secret')) return again();
      route(true, true);
    }, every || 10000);
  };
  again();
  return el('p', {class: 'updated'}, el('span', {id: 'updated'}, 'Updated just now'), ' ',
    el('button', {type: 'button', id: 'refresh', class: 'secondary', onclick: () => route(true, true)}, 'Refresh'));
}
setInterval(() => {
  const u = document.getElementById('updated');
  if (u) u.textContent = 'Updated ' + Math.round((Date.now() - updatedAt) / 1000) + ' s ago';
}, 1000);

// Paging: the API's cursors go forward; the way back is kept in the
// address, one back= per page before this one (the first page's is ''),
// so "Previous" works after a reload too. to(cursor, back) is a page's
// address. An address with a cursor but no trail goes back to the first
// page, and says so.
function pager(params, next, to) {
  const cursor = params.get('cursor') || '';
  const back = params.getAll('back');
  if (!cursor && !next) return '';
  const prev = !cursor ? null : back.length ? link(to(back[back.length - 1], back.slice(0, -1)), '← Previous')
    : link(to('', []), '← First page');
  return el('nav', {class: 'pager', 'aria-label': 'Pages'},
    prev || el('span', {class: 'muted'}, '← Previous'),
    el('span', {class: 'muted'}, 'page ' + (cursor && !back.length ? '?' : back.length + 1)),
    next ? link(to(next, back.concat([cursor])), 'Next →') : el('span', {class: 'muted'}, 'Next →'));
}

function signIn(message) {
  header();
  const token = el('input', {type: 'password', name: 'token', id: 'token', required: true, autocomplete: 'off'});
  const tenant = el('input', {type: 'text', name: 'tenant', id: 'tenant', placeholder: 'default', value: store.getItem('hookd.tenant') || ''});
  const form = el('form', {id: 'signin', onsubmit: async (ev) => {
    ev.preventDefault();
    for (const k of ['hookd.admin', 'hookd.portal', 'hookd.expires', 'hookd.tenants']) store.removeItem(k);
    store.setItem('hookd.token', token.value.trim());
    store.setItem('hookd.tenant', tenant.value.trim());
    try {
      await whoAmI();
      flash('');
      route();
    } catch (e) {
      if (e.status !== 401) flash(e.message);
    }
  }},
  el('h1', {}, 'Sign in'),
  el('p', {}, 'With the admin token or a tenant key (hk_…). It stays in this tab only. A link from your platform signs you in by itself.'),
  el('label', {for: 'token'}, 'Token'), token,
  el('label', {for: 'tenant'}, 'Tenant (admin only; empty: default)'), tenant,
  el('button', {type: 'submit'}, 'Sign in'));
  main.replaceChildren(form);
  if (message) flash(message);
  token.focus();
}

// whoAmI learns whether the token is the admin's (it may list tenants)
// and checks it works.
async function whoAmI() {
  try {
    await loadTenants();
    store.setItem('hookd.admin', '1');
  } catch (e) {
    if (e.status !== 403) throw e;
    store.removeItem('hookd.admin');
    const s = await api('GET', '/subscriptions?limit=1');
    store.setItem('hookd.tenant', (s.data[0] && s.data[0].tenant_id) || store.getItem('hookd.tenant') || '');
  }
}

// loadTenants reads the admin's tenant list (at sign-in, and again each
// time the switcher is opened, so a tenant created since shows).
async function loadTenants() {
  const t = await api('GET', '/tenants?limit=100');
  const ids = t.data.map((x) => x.id);
  store.setItem('hookd.tenants', JSON.stringify(ids));
  return ids;
}

function tenantOptions(tenants) {
  const current = tenantName();
  if (!tenants.includes(current)) tenants.push(current);
  return tenants.map((t) => el('option', {value: t, selected: t === current}, t));
}

function signOut(msg) {
  for (const k of ['hookd.token', 'hookd.admin', 'hookd.portal', 'hookd.expires', 'hookd.tenants', 'hookd.tenant']) store.removeItem(k);
  clearTimeout(refresher);
  if (location.hash !== '#/') history.replaceState(null, '', '#/');
  signIn();
  flash(msg || '', 'info');
}

// leaveForLink forgets the tab's session when a portal link is opened,
// whether or not the link turns out valid.
function leaveForLink() {
  for (const k of ['hookd.token', 'hookd.admin', 'hookd.tenants']) store.removeItem(k);
}

// portalSignIn exchanges a portal link's token, once, for a session of
// its tenant. The token leaves the address bar and history first.
async function portalSignIn(token) {
  history.replaceState(null, '', '#/');
  leaveForLink();
  try {
    const s = await call('POST', '/portal/session', {token});
    store.setItem('hookd.token', s.api_key);
    store.setItem('hookd.tenant', s.tenant_id);
    store.setItem('hookd.portal', '1');
    store.setItem('hookd.expires', s.expires_at);
    flash('');
    route();
  } catch (e) {
    signIn(e.status === 401 ? 'This link is not valid: it was used already, or it has expired. Ask for a new one.' : e.message);
  }
}

let sessionTimer = null;
function header() {
  const signedIn = !!store.getItem('hookd.token');
  document.getElementById('signout').hidden = !signedIn;
  const nav = document.getElementById('nav');
  if (!signedIn) return nav.replaceChildren();
  const items = [link('#/', 'Endpoints'), link('#/log', 'Event log')];
  if (admin()) items.push(link('#/failing', 'All failing'));
  if (admin()) {
    const known = JSON.parse(store.getItem('hookd.tenants') || '[]');
    items.push(el('label', {for: 'tenant-switch', class: 'tenant'}, 'Tenant'),
      el('select', {id: 'tenant-switch', onfocus: async (ev) => {
        const sel = ev.target;
        const now = await loadTenants().catch(() => null);
        const had = [...sel.options].map((o) => o.value);
        if (now && JSON.stringify(tenantOptions(now).map((o) => o.value)) !== JSON.stringify(had)) sel.replaceChildren(...tenantOptions(now));
      }, onchange: (ev) => {
        store.setItem('hookd.tenant', ev.target.value === 'default' ? '' : ev.target.value);
        location.hash = '#/';
        route();
      }}, tenantOptions(known)));
  } else {
    items.push(el('span', {class: 'tenant', id: 'tenant-name'}, tenantName()));
  }
  if (portal()) {
    const ends = new Date(store.getItem('hookd.expires'));
    items.push(el('span', {class: 'tenant'}, 'session ends ', when(ends.toISOString())));
    clearTimeout(sessionTimer);
    sessionTimer = setTimeout(() => signOut('Your portal session has ended: ask for a new link.'), Math.max(0, ends - Date.now()) + 500);
  }
  items.push(el('button', {type: 'button', id: 'zone', class: 'secondary', 'aria-pressed': zone() === 'utc' ? 'true' : 'false',
    title: 'Show times in UTC or in this browser\'s zone', onclick: () => {
      localStorage.setItem('hookd.zone', zone() === 'utc' ? 'local' : 'utc');
      route(true);
    }}, zone() === 'utc' ? 'Times: UTC' : 'Times: local'));
  nav.replaceChildren(...items);
}

// ---- Endpoints ----

function why(s, h, status, types) {
  switch (status) {
    case 'failing': return cause(h.last_failure);
    case 'held': return holdWords(h) || 'held back';
    case 'disabled': return h.disabled_reason;
    case 'shed': return 'backlog over the limit and not shrinking: new deliveries are skipped';
    case 'paused': return h.pending ? h.pending + ' waiting until you resume' : 'nothing is sent until you resume';
    case 'unmatched': return el('span', {class: 'warn-text'}, noMatchWords(s.event_types, types));
  }
  return '';
}

// subscriptionsView lists the endpoints, failing first, in three requests
// however many there are: every failing endpoint of the tenant (so they
// come first, and their count is exact, not one page's), the page, then
// in one stats call every row's last hour and the types the tenant sent.
async function subscriptionsView(params) {
  const cursor = params.get('cursor') || '';
  const [page, failing] = await Promise.all([
    api('GET', '/subscriptions' + query({include: 'health', limit: 50, cursor, tenant_id: tenantParam()})),
    api('GET', '/failing' + query({limit: 100, tenant_id: admin() ? tenantName() : ''}))]);
  const byID = new Map();
  for (const s of cursor ? [] : failing.data) byID.set(s.id, s); // all of them on the first page
  for (const s of page.data) byID.set(s.id, s);
  const ids = [...byID.keys()];
  const st = ids.length ? await api('GET', '/stats' + query({granularity: 'minute', subscription_ids: ids.join(','),
    include: 'event_types', tenant_id: tenantParam()})).catch((e) => { if (e.status === 401) throw e; return null; }) : null;
  const types = sentTypes(st ? st.event_types : [], st ? 1000 : 0);
  const minutes = new Map((st ? st.subscriptions : []).map((x) => [x.subscription_id, x.data]));
  const subs = [...byID.values()].map((s) => ({s, h: s.health, status: statusOf(s, s.health, types)}))
    .sort((a, b) => statusOrder.indexOf(a.status) - statusOrder.indexOf(b.status) || a.s.url.localeCompare(b.s.url));
  const counts = {};
  for (const {status} of subs) counts[status] = (counts[status] || 0) + 1;
  const rows = subs.map(({s, h, status}) => el('tr', {data: {id: s.id, status}, class: 'st-' + status},
    el('td', {class: 'endpoint'}, link('#/subscriptions/' + encodeURIComponent(s.id), s.url),
      el('div', {class: 'muted small'}, s.event_types.join(', '))),
    el('td', {}, statusBadge(status)),
    el('td', {class: 'why wide'}, why(s, h, status, types) || '—',
      status === 'failing' && h.last_failure && h.last_failure.response ? el('code', {class: 'answer'}, snippet(h.last_failure.response)) : ''),
    el('td', {}, minutes.has(s.id) ? sparkline(minutes.get(s.id)) : '—'),
    el('td', {class: 'num'}, h.pending),
    el('td', {}, h.next_attempt_at ? when(h.next_attempt_at, (d) => d <= Date.now() ? 'any moment' : relative(d)) : '—'),
    el('td', {class: 'num failed-count'}, h.failed)));
  // Failing is counted over the tenant; "of" only when one page holds every endpoint.
  const failingN = failing.data.filter((s) => s.health.status === 'failing').length;
  const failingText = failingN + (failing.next_cursor ? '+' : '') +
    (!cursor && !page.next_cursor ? ' of ' + page.data.length : '') + ' endpoint' + (failingN === 1 && !failing.next_cursor ? '' : 's') + ' failing';
  main.replaceChildren(
    el('div', {class: 'titlebar'}, el('h1', {}, 'Endpoints'),
      el('a', {href: '#/new', id: 'new-endpoint', class: 'button'}, 'Add an endpoint')),
    subs.length ? el('p', {class: 'summary ' + (failingN ? 'bad' : 'ok'), id: 'summary'},
      failingN ? failingText : 'No endpoint failing',
      Object.entries(counts).filter(([k]) => k !== 'failing' && k !== 'healthy').map(([k, n]) => ' · ' + n + ' ' + statusWords[k].toLowerCase()),
      cursor && failingN ? ' (listed first on the first page)' : '') : '',
    table('subs', ['Endpoint', 'Status', 'Why', 'Last hour', 'Waiting', 'Next try', 'Failed'], rows,
      el('div', {}, el('p', {}, 'No endpoints yet.'),
        el('p', {}, 'Add the URL that should receive this tenant\'s events; hookd signs each one and retries for a day.'),
        el('p', {}, el('a', {href: '#/new', class: 'button', id: 'empty-new'}, 'Add an endpoint')))),
    pager(params, page.next_cursor, (c, back) => '#/' + query({cursor: c, back})),
    refreshing());
}

const snippet = (s) => (s.length > 120 ? s.slice(0, 120) + '…' : s).replace(/\s+/g, ' ');

// matches is the API's matching of one pattern to an event type.
function matches(pattern, type) {
  if (pattern === '*') return !type.startsWith('hookd.');
  if (pattern.endsWith('.*')) return type.startsWith(pattern.slice(0, -1));
  return pattern === type;
}

async function eventTypes() {
  try {
    return (await api('GET', '/event-types' + query({limit: 100, tenant_id: tenantParam()}))).data;
  } catch (e) {
    if (e.status === 401) throw e;
    return [];
  }
}

// banner says in one sentence how the endpoint is doing, and why; its
// last hour comes from the stats API.
function banner(s, h, status, types, lastHour) {
  const parts = [];
  const since = h.failing_since ? new Date(h.failing_since) : null;
  const f = h.last_failure;
  switch (status) {
    case 'failing':
      parts.push('Failing since ', when(h.failing_since, clock), ': ', cause(f));
      break;
    case 'held': parts.push('Held back: ', holdWords(h)); break;
    case 'paused': parts.push('Paused: nothing is sent until you resume'); break;
    case 'disabled': parts.push('Disabled: ', s.disabled_reason || 'by request', '. New deliveries are skipped (replayable once it is active again)'); break;
    case 'shed': parts.push('Shedding since ', when(h.shedding_since, clock), ': its backlog is over the limit and not shrinking, so new deliveries are skipped (replayable)'); break;
    case 'unmatched': parts.push('No matching events: none of the types this tenant sends matches ', s.event_types.join(', ')); break;
    default: {
      const ok = (lastHour || []).reduce((a, m) => a + m.delivered, 0);
      parts.push('Healthy', ok ? ': ' + ok + ' delivered in the last hour' : '');
    }
  }
  const tail = [];
  if (h.pending) tail.push(h.pending + ' waiting');
  if (status !== 'paused' && status !== 'disabled' && h.pending) {
    tail.push(nextTry(h) + (h.held_by && status === 'failing' ? ' (' + holdWords(h) + ')' : ''));
  }
  if (h.failed) tail.push(h.failed + ' failed (replayable)');
  if (since && status !== 'failing') tail.push('failing since ' + clock(since));
  const rest = tail.filter(Boolean);
  return el('div', {id: 'banner', role: 'status', class: 'banner st-' + status},
    el('p', {class: 'lead'}, parts, '.'),
    f && f.response && status === 'failing' ? el('code', {class: 'answer'}, snippet(f.response)) : '',
    rest.length ? el('p', {}, rest.join('; ') + '.') : '');
}

const states = ['', 'pending', 'delivered', 'failed', 'skipped'];

async function subscriptionView(id, params) {
  const p = '/subscriptions/' + encodeURIComponent(id);
  const state = params.get('state') || '';
  const eventType = params.get('event_type') || '';
  const cursor = params.get('cursor') || '';
  const lastHour = statsPath(p, 'minute');
  const [s, h, page, types, minutes] = await Promise.all([
    api('GET', p), api('GET', p + '/health'),
    api('GET', p + '/deliveries' + query({limit: 50, state, event_type: eventType, cursor})), eventTypes(),
    api('GET', lastHour).catch((e) => { if (e.status === 401) throw e; return null; })]);
  const sent = sentTypes(types, 100);
  const status = statusOf(s, h, sent);

  const actions = el('div', {class: 'actions', id: 'actions'});
  const act = (label, elID, fn, cls) => el('button', {type: 'button', id: elID, class: cls, onclick: fn}, label);
  actions.append(
    el('a', {href: '#/subscriptions/' + encodeURIComponent(id) + '/edit', class: 'button', id: 'edit'}, 'Edit'),
    act('Send test event', 'send-test', () => run(async () => {
      const t = await api('POST', p + '/test');
      flash(['Test event sent: ', link('#/deliveries/' + t.delivery_id, t.delivery_id), t.state === 'skipped' ? ' (skipped: the endpoint is disabled)' : ''], 'info');
    })),
    act('Rotate secret', 'rotate', () => confirmPanel(actions,
      'Issue a new signing secret? The current one keeps signing beside it for 24 hours, so your receiver can switch without missing a delivery.',
      'Rotate', () => run(async () => {
        const r = await api('POST', p + '/rotate-secret');
        actions.after(secretBox(r.secret, ['The previous secret signs too until ', when(r.previous_secret_expires_at, exact), '.']));
      })), 'secondary'),
    s.state === 'active'
      ? act('Pause', 'pause', () => confirmPanel(actions,
        'Pause sending to this endpoint? ' + (h.pending ? h.pending + ' deliveries are waiting; they' : 'New deliveries') +
        ' stay pending, unsent, until you resume.', 'Pause', () => change({state: 'paused'}, 'Paused.')), 'secondary')
      : act(s.state === 'disabled' ? 'Enable' : 'Resume', 'resume', () => change({state: 'active'}, 'Sending again.'), 'secondary'),
    act('Delete', 'delete', () => confirmPanel(actions,
      'Delete this endpoint? ' + (h.pending ? 'Its ' + h.pending + ' waiting deliveries are skipped. ' : '') +
      'Nothing more is sent to it; its records stay for the retention window.', 'Delete', () => run(async () => {
        await api('DELETE', p);
        await goTo('#/', 'Deleted ' + s.url + '.');
      })), 'danger'));
  async function change(body, ok) {
    await run(async () => { await api('PATCH', p, body); flash(ok, 'info'); });
    await route(true);
  }

  // Patterns that match none of the types this tenant sends are a typo, or a plan.
  const hint = status === 'unmatched' ? el('p', {class: 'warn', id: 'no-match'}, noMatchWords(s.event_types, sent)) : '';

  const typeFilter = el('select', {id: 'type-filter', onchange: filter},
    el('option', {value: ''}, 'all event types'), types.map((t) => el('option', {value: t, selected: t === eventType}, t)));
  const stateFilter = el('select', {id: 'state-filter', onchange: filter},
    states.map((st) => el('option', {value: st, selected: st === state}, st || 'all states')));
  function filter() {
    location.hash = '#/subscriptions/' + encodeURIComponent(id) + query({state: stateFilter.value, event_type: typeFilter.value});
  }
  const rows = page.data.map((d) => el('tr', {data: {id: d.id}, class: d.state},
    el('td', {}, link('#/deliveries/' + encodeURIComponent(d.id), when(d.created_at))),
    el('td', {}, d.event_type),
    el('td', {}, badge(d.state)),
    el('td', {class: 'num'}, d.attempt_count),
    el('td', {}, d.last_status ? httpStatus(d.last_status) : (d.last_error || '—')),
    el('td', {}, nextAttempt(d, h))));

  const historyBox = el('section', {id: 'history'}, el('h2', {}, 'History'));
  main.replaceChildren(
    el('p', {class: 'crumbs'}, link('#/', '← Endpoints')),
    el('h1', {}, s.url),
    banner(s, h, status, sent, minutes && minutes.data),
    hint,
    actions,
    historyBox,
    replayForm(p, s, h),
    el('h2', {}, 'Deliveries'),
    el('div', {class: 'filters'}, el('label', {for: 'state-filter'}, 'State'), stateFilter,
      el('label', {for: 'type-filter'}, 'Event type'), typeFilter),
    table('deliveries', ['Created', 'Event type', 'State', 'Attempts', 'Last answer', 'Next attempt'], rows,
      emptyDeliveries(state, eventType, hint)),
    pager(params, page.next_cursor,
      (c, back) => '#/subscriptions/' + encodeURIComponent(id) + query({state, event_type: eventType, cursor: c, back})),
    el('h2', {}, 'Settings'),
    dl([
      ['ID', s.id],
      ['Event types', s.event_types.join(', ')],
      ['Ordered', s.ordered ? 'yes' : 'no'],
      ['Retry schedule', (s.retry_schedule || []).join(', ') || 'no retries'],
      ['Timeout', s.timeout],
      ['Max concurrency', s.max_concurrency || 'host default'],
      ['Rate limit', s.rate_limit ? s.rate_limit + '/s' : 'none'],
      ['Headers', Object.keys(s.headers || {}).sort().join(', ') || 'none'], // names only: values are never shown
      ['Created', when(s.created_at)],
    ]),
    refreshing(15000));
  drawHistory(historyBox, p, minutes && {path: lastHour, st: minutes});
}

function emptyDeliveries(state, eventType, hint) {
  if (state || eventType) return 'No deliveries match these filters.';
  return hint ? 'No deliveries: no event this tenant sent matches its patterns.'
    : 'No deliveries yet: they appear when the platform sends a matching event. "Send test event" sends one now.';
}

// nextAttempt says when a pending delivery goes next, and why not yet.
function nextAttempt(d, h) {
  if (d.state !== 'pending') return '—';
  const at = new Date(d.next_attempt_at);
  if (at > Date.now()) return when(d.next_attempt_at);
  if (h.held_by) return el('span', {}, 'waiting: ', holdWords(h) || h.held_by);
  return 'due now';
}

// statsPath asks for p's last hour by minute, 24 hours by hour or 30
// UTC days by day, the range named in full so the same address answers
// the same buckets later.
function statsPath(p, granularity) {
  const [unit, n] = {minute: [60e3, 60], hour: [3600e3, 24], day: [86400e3, 30]}[granularity];
  const end = Math.floor(Date.now() / unit) * unit + unit;
  return p + '/stats' + query({granularity, since: new Date(end - n * unit).toISOString(), until: new Date(end).toISOString()});
}

// drawHistory draws the endpoint's deliveries over time from the stats
// API: the last hour a minute each (already read, for the banner), 24
// hours, or 30 UTC days.
async function drawHistory(box, p, lastHour) {
  // A draw still reading when another starts (a click on a period) must
  // not add its chart beside the newer one.
  const draw = (box.draws = (box.draws || 0) + 1);
  const choice = localStorage.getItem('hookd.chart') || 'hour';
  const pick = el('div', {class: 'segmented', role: 'group', 'aria-label': 'Period'},
    [['minute', 'Last hour'], ['hour', 'Last 24 h'], ['day', 'Last 30 days']].map(([g, label]) =>
      el('button', {type: 'button', class: 'secondary', id: 'chart-' + g, 'aria-pressed': g === choice ? 'true' : 'false',
        onclick: () => { localStorage.setItem('hookd.chart', g); box.replaceChildren(box.firstChild); drawHistory(box, p); }}, label)));
  box.append(pick);
  const path = choice === 'minute' && lastHour ? lastHour.path : statsPath(p, choice);
  try {
    const st = choice === 'minute' && lastHour ? lastHour.st : await api('GET', path);
    if (box.draws !== draw) return;
    const fmt = choice === 'day' ? utcDay : clock;
    const chart = barChart(st.data, {minute: 'Deliveries in the last hour, a minute each', hour: 'Deliveries by hour',
      day: 'Deliveries by UTC day'}[choice], fmt);
    chart.dataset.src = '/v1' + path;
    box.append(chart, el('p', {class: 'muted small'}, 'Deliveries by when they were created, in their state now' +
      (choice === 'day' ? '; days are UTC days.' : '.')));
  } catch (e) {
    if (e.status === 401 || box.draws !== draw) return;
    box.append(el('p', {class: 'empty', id: 'no-stats'}, 'History could not be read: ' + e.message));
  }
}

// replayForm asks for a range, says how many deliveries it would send
// again and whether the endpoint still fails, then asks once.
function replayForm(p, s, h) {
  const since = el('input', {type: 'datetime-local', step: 1, id: 'replay-since', required: true, value: inputValue(new Date(Date.now() - 24 * 3600e3))});
  const until = el('input', {type: 'datetime-local', step: 1, id: 'replay-until'});
  const form = el('form', {id: 'replay', class: 'inline', onsubmit: async (ev) => {
    ev.preventDefault();
    const from = fromInput(since.value), to = fromInput(until.value);
    if (!from) return flash('Pick when the replay starts.');
    if (from > Date.now()) return flash('The start is in the future: no delivery was created after it yet.');
    if (to && to <= from) return flash('The end must come after the start.');
    await run(async () => {
      const range = {since: from.toISOString(), until: to ? to.toISOString() : undefined};
      const c = await api('GET', p + '/deliveries/count' + query(range));
      const n = c.count + (c.exact ? '' : '+');
      if (c.count === 0) return confirmPanel(form, 'No failed or skipped deliveries since ' + exact(from) + (to ? ' until ' + exact(to) : '') + ': nothing to replay.');
      const still = h.status === 'failing' && h.last_failure
        ? ' This endpoint still fails (' + cause(h.last_failure) + '): fix it first, or they fail again.' : '';
      confirmPanel(form, n + ' failed or skipped deliveries since ' + exact(from) + (to ? ' until ' + exact(to) : '') +
        ' will be sent again, same webhook-id, at most 500 a second.' + still, 'Replay ' + n + ' deliveries', () => run(async () => {
        const job = await api('POST', p + '/replay', range);
        await goTo('#/replays/' + job.job_id, 'Replay started.');
      }));
    });
  }},
  el('h2', {}, 'Replay'),
  el('p', {class: 'muted'}, 'Send failed and skipped deliveries again (times ' + (zone() === 'utc' ? 'in UTC' : 'in your zone') + ').'),
  el('label', {for: 'replay-since'}, 'Created since'), since,
  el('label', {for: 'replay-until'}, 'until (optional)'), until,
  el('button', {type: 'submit', id: 'replay-preview'}, 'Replay…'));
  return form;
}

// goTo shows another view, then a message: a hash change would route
// (clearing any message) after it was shown.
async function goTo(hash, msg) {
  history.pushState(null, '', hash);
  await route(true);
  flash(msg, 'info');
}

// run does an action, showing its error.
async function run(fn) {
  try {
    await fn();
  } catch (e) {
    if (e.status !== 401) flash(e.message);
  }
}

// ---- Create and edit ----

async function formView(id) {
  const p = id ? '/subscriptions/' + encodeURIComponent(id) : '';
  const [s, types] = await Promise.all([id ? api('GET', p) : null, eventTypes()]);
  const known = [...new Set(types.filter((t) => !t.startsWith('hookd.')))];
  const current = s ? s.event_types : [];
  const url = el('input', {type: 'url', id: 'f-url', name: 'url', required: true, value: s ? s.url : '', placeholder: 'https://api.example.com/webhooks',
    'aria-describedby': 'err-url'});
  const boxes = known.map((t, i) => el('label', {class: 'check', for: 't-' + i},
    el('input', {type: 'checkbox', id: 't-' + i, value: t, checked: current.includes(t)}), t));
  const all = el('label', {class: 'check', for: 't-all'}, el('input', {type: 'checkbox', id: 't-all', value: '*', checked: current.includes('*')}), 'Every event (*)');
  const other = el('input', {type: 'text', id: 'f-types', value: current.filter((t) => t !== '*' && !known.includes(t)).join(', '),
    placeholder: 'order.*, invoice.paid', 'aria-describedby': 'err-event_types'});
  const rate = el('input', {type: 'number', id: 'f-rate', min: 0, step: 'any', value: s ? s.rate_limit : 0, 'aria-describedby': 'err-rate_limit'});
  const headerRows = el('div', {id: 'f-headers'});
  const addHeader = () => {
    const n = headerRows.children.length;
    headerRows.append(el('div', {class: 'header-row'},
      el('label', {for: 'h-name-' + n}, 'Name'), el('input', {type: 'text', id: 'h-name-' + n, class: 'h-name', placeholder: 'Authorization'}),
      el('label', {for: 'h-value-' + n}, 'Value'), el('input', {type: 'password', id: 'h-value-' + n, class: 'h-value', autocomplete: 'off'})));
  };
  addHeader();
  const errs = {};
  const err = (f) => (errs[f] = el('p', {class: 'field-error', id: 'err-' + f, hidden: true}));
  const existing = s ? Object.keys(s.headers || {}).sort() : [];
  const form = el('form', {id: 'endpoint-form', class: 'stacked', novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    Object.values(errs).forEach((e) => { e.hidden = true; });
    form.querySelectorAll('[aria-invalid]').forEach((i) => i.removeAttribute('aria-invalid'));
    const patterns = [...form.querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value)
      .concat(other.value.split(',').map((t) => t.trim()).filter(Boolean));
    const body = {url: url.value.trim(), event_types: patterns, rate_limit: Number(rate.value) || 0};
    const headers = {};
    for (const row of headerRows.children) {
      const n = row.querySelector('.h-name').value.trim();
      if (n) headers[n] = row.querySelector('.h-value').value;
    }
    if (Object.keys(headers).length || (!id && existing.length === 0)) body.headers = headers;
    if (!id && tenantParam()) body.tenant_id = tenantParam();
    try {
      const out = await api(id ? 'PATCH' : 'POST', id ? p : '/subscriptions', body);
      if (id) {
        await goTo('#/subscriptions/' + encodeURIComponent(id), 'Saved.');
        return;
      }
      main.replaceChildren(el('h1', {}, 'Endpoint added'), el('p', {}, out.url), secretBox(out.secret),
        el('p', {class: 'actions'},
          el('button', {type: 'button', id: 'send-test', onclick: () => run(async () => {
            const t = await api('POST', '/subscriptions/' + encodeURIComponent(out.id) + '/test');
            flash(['Test event sent: ', link('#/deliveries/' + t.delivery_id, t.delivery_id)], 'info');
          })}, 'Send test event'),
          el('a', {href: '#/subscriptions/' + encodeURIComponent(out.id), class: 'button secondary', id: 'open-endpoint'}, 'Open the endpoint')));
    } catch (e) {
      if (e.status === 401) return;
      const field = (e.field || '').replace(/[[.].*$/, '');
      const box = errs[field] || errs.form;
      box.textContent = e.message;
      box.hidden = false;
      ({url, event_types: other, rate_limit: rate})[field]?.setAttribute('aria-invalid', 'true');
      (({url, event_types: other, rate_limit: rate})[field] || box).focus?.();
    }
  }},
  el('p', {class: 'crumbs'}, link(id ? '#/subscriptions/' + encodeURIComponent(id) : '#/', '← Back')),
  el('h1', {}, id ? 'Edit endpoint' : 'Add an endpoint'),
  err('form'),
  el('label', {for: 'f-url'}, 'URL'), url, err('url'),
  el('fieldset', {}, el('legend', {}, 'Event types'),
    known.length ? el('p', {class: 'muted small'}, 'Types this tenant has sent:') : el('p', {class: 'muted small'}, 'This tenant has sent no events yet: name the types, or patterns like order.*'),
    el('div', {class: 'checks'}, boxes, all),
    el('label', {for: 'f-types'}, 'Other types or patterns (comma-separated; prefix.* matches a family)'), other, err('event_types')),
  el('label', {for: 'f-rate'}, 'Rate limit (deliveries a second; 0: unlimited)'), rate, err('rate_limit'),
  el('fieldset', {}, el('legend', {}, 'Headers sent with every delivery (e.g. credentials)'),
    el('p', {class: 'muted small'}, existing.length
      ? 'Now: ' + existing.join(', ') + '. Values are never shown again; fill these to replace them all, leave them empty to keep them.'
      : 'Values are sealed and never shown again.'),
    headerRows, el('button', {type: 'button', class: 'secondary', onclick: addHeader}, 'Another header'), err('headers')),
  el('button', {type: 'submit', id: 'save'}, id ? 'Save' : 'Add endpoint'));
  main.replaceChildren(form);
  url.focus();
}

// ---- The event log ----

async function logView(params) {
  const tab = params.get('tab') === 'events' ? 'events' : 'deliveries';
  const f = Object.fromEntries(['state', 'event_type', 'status', 'since', 'until', 'cursor'].map((k) => [k, params.get(k) || '']));
  const since = fromInput(f.since), until = fromInput(f.until);
  const range = {since: since && since.toISOString(), until: until && until.toISOString(), tenant_id: tenantParam()};
  const [page, types, subs] = await Promise.all([
    tab === 'events'
      ? api('GET', '/events' + query({type: f.event_type, limit: 50, cursor: f.cursor, ...range}))
      : api('GET', '/deliveries' + query({state: f.state, event_type: f.event_type, status: f.status, limit: 50, cursor: f.cursor, ...range})),
    eventTypes(),
    api('GET', '/subscriptions' + query({limit: 100, tenant_id: tenantParam()}))]);
  const urls = Object.fromEntries(subs.data.map((s) => [s.id, s.url]));
  const go = (changes) => '#/log' + query({...f, tab, cursor: '', ...changes});

  const input = (id, label, attrs) => [el('label', {for: id}, label), el('input', {id, ...attrs})];
  const filters = el('form', {id: 'log-filters', class: 'filters', onsubmit: (ev) => {
    ev.preventDefault();
    const v = (id) => filters.querySelector('#' + id)?.value || '';
    location.hash = go({state: v('lf-state'), event_type: v('lf-type'), status: v('lf-status'), since: v('lf-since'), until: v('lf-until')});
  }},
  tab === 'deliveries' ? [el('label', {for: 'lf-state'}, 'State'),
    el('select', {id: 'lf-state'}, states.map((st) => el('option', {value: st, selected: st === f.state}, st || 'all states')))] : '',
  el('label', {for: 'lf-type'}, 'Event type'),
  el('select', {id: 'lf-type'}, el('option', {value: ''}, 'all'), types.map((t) => el('option', {value: t, selected: t === f.event_type}, t))),
  tab === 'deliveries' ? input('lf-status', 'Status code', {type: 'number', min: 100, max: 599, value: f.status, class: 'short'}) : '',
  input('lf-since', 'Since', {type: 'datetime-local', step: 1, value: f.since}),
  input('lf-until', 'Until', {type: 'datetime-local', step: 1, value: f.until}),
  el('button', {type: 'submit', id: 'lf-apply'}, 'Filter'));

  const search = el('input', {id: 'lookup', type: 'search', placeholder: 'evt_…, dlv_…, sub_… or an idempotency key'});
  const lookup = el('form', {id: 'lookup-form', class: 'filters', onsubmit: async (ev) => {
    ev.preventDefault();
    const v = search.value.trim();
    for (const [prefix, route] of [['evt_', 'events'], ['dlv_', 'deliveries'], ['sub_', 'subscriptions'], ['rpl_', 'replays']]) {
      if (v.startsWith(prefix)) { location.hash = '#/' + route + '/' + encodeURIComponent(v); return; }
    }
    await run(async () => {
      const r = await api('GET', '/events' + query({idempotency_key: v, tenant_id: tenantParam()}));
      if (r.data.length) location.hash = '#/events/' + encodeURIComponent(r.data[0].id);
      else flash('No event with the idempotency key "' + v + '" (IDs start with evt_, dlv_ or sub_).');
    });
  }}, el('label', {for: 'lookup'}, 'Find'), search, el('button', {type: 'submit'}, 'Find'));

  const rows = tab === 'events'
    ? page.data.map((e) => el('tr', {data: {id: e.id}},
      el('td', {}, link('#/events/' + encodeURIComponent(e.id), when(e.created_at))),
      el('td', {}, e.type), el('td', {}, e.idempotency_key || '—'), el('td', {class: 'mono'}, e.id)))
    : page.data.map((d) => el('tr', {data: {id: d.id}, class: d.state},
      el('td', {}, link('#/deliveries/' + encodeURIComponent(d.id), when(d.created_at))),
      el('td', {}, d.event_type),
      el('td', {class: 'endpoint wide'}, link('#/subscriptions/' + encodeURIComponent(d.subscription_id), urls[d.subscription_id] || d.subscription_id)),
      el('td', {}, badge(d.state)),
      el('td', {}, d.last_status ? httpStatus(d.last_status) : (d.last_error || '—')),
      el('td', {class: 'num'}, d.attempt_count)));
  const filtered = f.state || f.event_type || f.status || f.since || f.until;
  main.replaceChildren(
    el('h1', {}, 'Event log'),
    el('nav', {class: 'tabs', 'aria-label': 'Log'},
      el('a', {href: go({tab: 'deliveries'}), 'aria-current': tab === 'deliveries' ? 'page' : false}, 'Deliveries'),
      el('a', {href: go({tab: 'events'}), 'aria-current': tab === 'events' ? 'page' : false}, 'Events')),
    lookup, filters,
    tab === 'events'
      ? table('log', ['Created', 'Type', 'Idempotency key', 'ID'], rows, filtered ? 'No event matches these filters.' : 'No events yet: the platform posts them with POST /v1/events.')
      : table('log', ['Created', 'Event type', 'Endpoint', 'State', 'Last answer', 'Attempts'], rows,
        filtered ? 'No delivery matches these filters.' : 'No deliveries yet.'),
    pager(params, page.next_cursor, (c, back) => go({cursor: c, back})),
    f.cursor ? '' : refreshing());
}

// ---- One delivery, one event, one replay job ----

function successNotKept(a) {
  return a.status_code >= 200 && a.status_code < 300 && !a.response && !Object.keys(a.response_headers || {}).length;
}

async function deliveryView(id) {
  const d = await api('GET', '/deliveries/' + encodeURIComponent(id));
  // A pending delivery due in the past waits on something: health says what.
  const h = d.state === 'pending' ? await api('GET', '/subscriptions/' + encodeURIComponent(d.subscription_id) + '/health').catch(() => ({})) : {};
  const replay = el('button', {type: 'button', id: 'replay-delivery', disabled: d.state === 'pending', onclick: () =>
    run(async () => {
      await api('POST', '/deliveries/' + encodeURIComponent(id) + '/replay');
      flash('Replay queued: same webhook-id, signed afresh.', 'info');
      await route(true);
    })}, 'Replay');
  const req = d.request || {headers: {}, body: ''};
  const attempts = (d.attempts || []).map((a) => el('section', {class: 'attempt', data: {n: a.n}},
    el('h3', {}, 'Attempt ' + a.n, ' · ', when(a.started_at), ' · ', a.duration_ms + ' ms',
      d.replayed_at && a.n > d.round_start ? [' ', badge('after the replay', 'replay')] : ''),
    dl([
      ['Answer', a.status_code ? httpStatus(a.status_code) : ['No answer: ', a.error]],
      Object.keys(a.response_headers || {}).length ? ['Headers', el('pre', {class: 'headers'},
        Object.entries(a.response_headers).map(([k, v]) => k + ': ' + v).join('\n'))] : null,
      // Every HTTP answer has headers: a success with none is one whose
      // answer hookd did not keep (serve --keep-success-response).
      successNotKept(a) ? ['Body', el('span', {class: 'muted'}, 'not kept for a success')]
        : ['Body (first KiB)', el('pre', {class: 'response'}, a.response || '')],
    ])));
  main.replaceChildren(
    el('p', {class: 'crumbs'}, link('#/subscriptions/' + encodeURIComponent(d.subscription_id), '← Endpoint')),
    el('h1', {}, 'Delivery ', el('span', {class: 'mono'}, id)),
    el('p', {class: 'actions'}, replay, d.state === 'pending' ? ' (pending: it is still being tried)' : ''),
    dl([
      ['State', [badge(d.state), d.replayed_at ? [' ', badge('replayed', 'replay'), ' ', when(d.replayed_at)] : '']],
      ['Event', link('#/events/' + encodeURIComponent(d.event_id), d.event_id + ' (' + d.event_type + ')')],
      ['Endpoint', link('#/subscriptions/' + encodeURIComponent(d.subscription_id), d.subscription_id)],
      ['Attempts', String(d.attempt_count)],
      ['Next attempt', nextAttempt(d, h)],
      ['Last error', d.last_error || '—'],
      ['Created', when(d.created_at)],
    ]),
    el('h2', {}, 'What hookd sends'),
    el('pre', {class: 'headers', id: 'request-headers'}, Object.entries(req.headers).sort().map(([k, v]) => k + ': ' + v).join('\n')),
    el('pre', {class: 'payload', id: 'request-body'}, pretty(req.body)),
    el('h2', {}, 'What came back'),
    el('div', {id: 'attempts'}, attempts.length ? attempts : el('p', {class: 'empty'}, 'Not attempted yet.')));
}

function pretty(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

async function eventView(id) {
  const e = await api('GET', '/events/' + encodeURIComponent(id));
  const rows = (e.deliveries || []).map((d) => el('tr', {data: {id: d.id}},
    el('td', {}, link('#/deliveries/' + encodeURIComponent(d.id), d.id)),
    el('td', {}, link('#/subscriptions/' + encodeURIComponent(d.subscription_id), d.subscription_id)),
    el('td', {}, badge(d.state)),
    el('td', {class: 'num'}, d.attempt_count),
    el('td', {}, d.last_status ? httpStatus(d.last_status) : '—')));
  main.replaceChildren(
    el('p', {class: 'crumbs'}, link('#/log?tab=events', '← Event log')),
    el('h1', {}, 'Event ', el('span', {class: 'mono'}, id)),
    dl([
      ['Type', e.type],
      ['Created', when(e.created_at)],
      ['Idempotency key', e.idempotency_key || '—'],
      ['Ordering key', e.ordering_key || '—'],
    ]),
    el('h2', {}, 'Payload'),
    el('pre', {class: 'payload'}, JSON.stringify(e.payload, null, 2)),
    el('h2', {}, 'Deliveries'),
    table('', ['Delivery', 'Endpoint', 'State', 'Attempts', 'Last answer'], rows, 'No endpoint\'s patterns matched it.'));
}

async function replayView(id) {
  const j = await api('GET', '/replays/' + encodeURIComponent(id));
  main.replaceChildren(
    el('p', {class: 'crumbs'}, link('#/subscriptions/' + encodeURIComponent(j.subscription_id), '← Endpoint')),
    el('h1', {}, 'Replay ', el('span', {class: 'mono'}, id)),
    dl([
      ['State', badge(j.state)],
      ['Put back in line', String(j.replayed)],
      ['Endpoint', link('#/subscriptions/' + encodeURIComponent(j.subscription_id), j.subscription_id)],
      ['Since', when(j.since, exact)],
      ['Until', j.until ? when(j.until, exact) : 'now'],
      ['Event types', (j.event_types || []).join(', ') || 'all'],
      ['Updated', when(j.updated_at)],
    ]),
    j.state === 'running' ? refreshing(2000) : '');
}

// failingView is the operator's view: every failing endpoint, every tenant.
async function failingView(params) {
  const cursor = params.get('cursor') || '';
  const page = await api('GET', '/failing' + query({limit: 50, cursor}));
  const rows = page.data.map((s) => el('tr', {data: {id: s.id}},
    el('td', {}, s.tenant_id),
    el('td', {class: 'endpoint'}, el('a', {href: '#/subscriptions/' + encodeURIComponent(s.id), onclick: () => {
      if (admin()) store.setItem('hookd.tenant', s.tenant_id === 'default' ? '' : s.tenant_id);
    }}, s.url)),
    el('td', {}, statusBadge(s.health.status)),
    el('td', {class: 'why'}, cause(s.health.last_failure)),
    el('td', {}, when(s.health.failing_since)),
    el('td', {class: 'num'}, s.health.pending)));
  main.replaceChildren(
    el('h1', {}, 'Failing endpoints, every tenant'),
    table('', ['Tenant', 'Endpoint', 'Status', 'Why', 'Failing since', 'Waiting'], rows, 'No endpoint is failing.'),
    pager(params, page.next_cursor, (c, back) => '#/failing' + query({cursor: c, back})),
    refreshing());
}

// ---- Routing ----

const routes = [
  [/^\/portal\/([^/?]+)$/, portalSignIn, 'public'],
  [/^\/subscriptions\/([^/?]+)\/edit$/, formView],
  [/^\/subscriptions\/([^/?]+)$/, subscriptionView],
  [/^\/new$/, () => formView(null)],
  [/^\/deliveries\/([^/?]+)$/, deliveryView],
  [/^\/events\/([^/?]+)$/, eventView],
  [/^\/replays\/([^/?]+)$/, replayView],
  [/^\/log$/, logView],
  [/^\/failing$/, failingView],
  [/^\/?$/, subscriptionsView],
];

async function route(keepFlash, quiet) {
  clearTimeout(refresher);
  const [path, q] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(q || '');
  const found = routes.find(([re]) => re.test(path));
  if (found && found[2] === 'public') {
    let arg;
    try {
      arg = decodeURIComponent(found[0].exec(path)[1]);
    } catch (e) {
      history.replaceState(null, '', '#/');
      leaveForLink();
      return signIn('This link is not valid: it was cut or changed. Ask for a new one.');
    }
    return found[1](arg);
  }
  if (!store.getItem('hookd.token')) return signIn();
  if (keepFlash !== true) flash('');
  header();
  if (!found) {
    main.replaceChildren(el('h1', {}, 'Not found'), el('p', {}, link('#/', 'Back to the endpoints')));
    return;
  }
  const [re, view] = found;
  const m = re.exec(path);
  if (!quiet) main.setAttribute('aria-busy', 'true');
  main.dataset.page = '';
  try {
    await (m[1] ? view(decodeURIComponent(m[1]), params) : view(params));
    main.dataset.page = path || '/'; // which view is shown, once it is
  } catch (e) {
    if (e.status !== 401) {
      main.replaceChildren(el('h1', {}, e.status === 404 ? 'Not found' : 'Something went wrong'), el('p', {class: 'error'}, e.message),
        el('p', {}, link('#/', 'Back to the endpoints')));
    }
  } finally {
    main.removeAttribute('aria-busy');
  }
}

// A portal session's key is revoked on the server too: cleared from the
// tab alone, it would stay valid until its link's expiry.
document.getElementById('signout').addEventListener('click', async () => {
  if (portal()) {
    try {
      await call('DELETE', '/portal/session', undefined, store.getItem('hookd.token'));
    } catch (e) {
      // Ended already (401), or unreachable: the tab forgets it all the same.
    }
  }
  signOut('Signed out.');
});
window.addEventListener('hashchange', () => route());
route();
