// hookd dashboard. Everything it shows or does goes through the public /v1
// API with the token the user signed in with (kept in sessionStorage, so it
// dies with the tab). Data is only ever put in the page as text, never as
// HTML: payloads and endpoint answers are attacker-controlled.
'use strict';

const store = window.sessionStorage;
const main = document.getElementById('main');

// el builds an element: attrs set properties (on*: listeners), children are
// nodes or strings (as text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (k === 'data') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function flash(msg, kind) {
  const f = document.getElementById('flash');
  f.textContent = msg || '';
  f.className = kind || 'error';
  f.hidden = !msg;
}

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || ('HTTP ' + status));
    this.status = status;
    this.code = e.code;
  }
}

async function api(method, path, body) {
  const headers = {Authorization: 'Bearer ' + store.getItem('hookd.token')};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch('/v1' + path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const data = resp.status === 204 ? null : await resp.json().catch(() => null);
  if (resp.status === 401) {
    signOut('The token was refused: sign in again.');
    throw new APIError(401, data);
  }
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
}

function tenantParam() { return store.getItem('hookd.tenant') || ''; }

// Formatting.
function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}
function pct(x) { return x === null || x === undefined ? '—' : (x * 100).toFixed(1) + ' %'; }
function ago(seconds) {
  if (!seconds) return '0 s';
  const units = [['d', 86400], ['h', 3600], ['min', 60]];
  for (const [u, n] of units) if (seconds >= n) return (seconds / n).toFixed(1) + ' ' + u;
  return seconds.toFixed(1) + ' s';
}
function badge(text, kind) { return el('span', {class: 'badge ' + (kind || text)}, text); }
function link(href, text) { return el('a', {href}, text); }
function table(headers, rows, empty) {
  if (rows.length === 0) return el('p', {class: 'empty'}, empty || 'Nothing here.');
  return el('table', {}, el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows));
}
function dl(pairs) {
  return el('dl', {}, pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

// Views. Each renders into main; a route is the part of the hash after '#'.
function signIn() {
  document.getElementById('signout').hidden = true;
  document.getElementById('nav').replaceChildren();
  const token = el('input', {type: 'password', name: 'token', id: 'token', required: true, autocomplete: 'off'});
  const tenant = el('input', {type: 'text', name: 'tenant', id: 'tenant', placeholder: 'default', value: tenantParam()});
  const form = el('form', {id: 'signin', onsubmit: async (ev) => {
    ev.preventDefault();
    store.setItem('hookd.token', token.value.trim());
    store.setItem('hookd.tenant', tenant.value.trim());
    try {
      await api('GET', '/subscriptions' + query({limit: 1, tenant_id: tenantParam()}));
      flash('');
      route();
    } catch (e) {
      if (e.status !== 401) flash(e.message);
    }
  }},
  el('h1', {}, 'Sign in'),
  el('p', {}, 'With the admin token or a tenant key (hk_…). It stays in this tab only.'),
  el('label', {for: 'token'}, 'Token'), token,
  el('label', {for: 'tenant'}, 'Tenant (admin only; empty: default)'), tenant,
  el('button', {type: 'submit'}, 'Sign in'));
  main.replaceChildren(form);
  token.focus();
}

function signOut(msg) {
  store.removeItem('hookd.token');
  flash(msg || '', 'info');
  location.hash = '#/';
  signIn();
}

async function subscriptionsView(params) {
  const page = await api('GET', '/subscriptions' + query({limit: 50, cursor: params.get('cursor'), tenant_id: tenantParam()}));
  const health = await Promise.all(page.data.map((s) =>
    api('GET', '/subscriptions/' + encodeURIComponent(s.id) + '/health').catch(() => null)));
  const rows = page.data.map((s, i) => {
    const h = health[i] || {};
    return el('tr', {data: {id: s.id}},
      el('td', {}, link('#/subscriptions/' + s.id, s.url)),
      el('td', {}, s.event_types.join(', ')),
      el('td', {}, badge(s.state)),
      el('td', {}, h.circuit ? badge(h.circuit) : '—'),
      el('td', {class: 'num'}, pct(h.success_rate)),
      el('td', {class: 'num'}, h.pending ?? '—'),
      el('td', {class: 'num'}, h.lag_seconds === undefined ? '—' : ago(h.lag_seconds)),
      el('td', {class: 'num failed-count'}, h.failed ?? '—'),
      el('td', {}, h.likely_configuration_error ? badge('answers ' + h.configuration_error_status, 'warn') : '',
        h.shedding ? badge('shedding', 'failed') : ''));
  });
  main.replaceChildren(
    el('h1', {}, 'Subscriptions', tenantParam() ? ' of ' + tenantParam() : ''),
    table(['Endpoint', 'Event types', 'State', 'Circuit', 'Success (1 h)', 'Pending', 'Oldest pending', 'Failed', ''],
      rows, 'No subscriptions yet: create one with POST /v1/subscriptions.'),
    page.next_cursor ? link('#/' + query({cursor: page.next_cursor}), 'Next page →') : '');
}

const states = ['', 'pending', 'delivered', 'failed', 'skipped'];

async function subscriptionView(id, params) {
  const p = '/subscriptions/' + encodeURIComponent(id);
  const state = params.get('state') || '';
  const [s, h, page] = await Promise.all([
    api('GET', p), api('GET', p + '/health'),
    api('GET', p + '/deliveries' + query({limit: 50, state, cursor: params.get('cursor')}))]);

  const setState = (to) => async () => {
    await act(() => api('PATCH', p, {state: to}), 'Subscription is now ' + to + '.');
  };
  const since = el('input', {type: 'datetime-local', id: 'replay-since', required: true,
    value: localInput(new Date(Date.now() - 24 * 3600 * 1000))});
  const replayForm = el('form', {id: 'replay', onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const job = await api('POST', p + '/replay', {since: new Date(since.value).toISOString()});
      flash('Replay ' + job.job_id + ' started.', 'info');
      location.hash = '#/replays/' + job.job_id;
    } catch (e) { flash(e.message); }
  }}, el('label', {for: 'replay-since'}, 'Replay failed and skipped deliveries created since'), since,
  el('button', {type: 'submit'}, 'Replay'));

  const filter = el('select', {id: 'state-filter', onchange: () => {
    location.hash = '#/subscriptions/' + id + query({state: filter.value});
  }}, states.map((st) => el('option', {value: st, selected: st === state}, st || 'all states')));

  const rows = page.data.map((d) => el('tr', {data: {id: d.id}},
    el('td', {}, link('#/deliveries/' + d.id, when(d.created_at))),
    el('td', {}, d.event_type),
    el('td', {}, badge(d.state)),
    el('td', {class: 'num'}, d.attempt_count),
    el('td', {class: 'num'}, d.last_status || '—'),
    el('td', {}, d.last_error || ''),
    el('td', {}, when(d.next_attempt_at))));

  main.replaceChildren(
    el('h1', {}, s.url),
    el('p', {class: 'actions'},
      s.state === 'active'
        ? el('button', {type: 'button', id: 'pause', onclick: setState('paused')}, 'Pause')
        : el('button', {type: 'button', id: 'resume', onclick: setState('active')}, 'Resume')),
    el('div', {class: 'columns'},
      el('section', {}, el('h2', {}, 'Health'), dl([
        ['State', [badge(s.state), s.disabled_reason ? ' ' + s.disabled_reason : '']],
        ['Circuit', badge(h.circuit)],
        ['Success (last hour)', pct(h.success_rate)],
        ['Pending', String(h.pending)],
        ['Oldest pending', ago(h.lag_seconds)],
        ['Failed (replayable)', String(h.failed)],
        ['Oldest failed', when(h.oldest_failed_at)],
        ['Shedding', h.shedding
          ? badge('new deliveries skipped since ' + when(h.shedding_since) + ': backlog not shrinking', 'failed') : 'no'],
        ['Configuration', h.likely_configuration_error
          ? badge('endpoint rejects hookd: mostly ' + h.configuration_error_status, 'warn') : 'no sign of a problem'],
      ])),
      el('section', {}, el('h2', {}, 'Settings'), dl([
        ['ID', s.id],
        ['Event types', s.event_types.join(', ')],
        ['Ordered', s.ordered ? 'yes' : 'no'],
        ['Retry schedule', (s.retry_schedule || []).join(', ') || 'no retries'],
        ['Timeout', s.timeout],
        ['Max concurrency', s.max_concurrency || 'host default'],
        ['Rate limit', s.rate_limit ? s.rate_limit + '/s' : 'none'],
        ['Headers', Object.keys(s.headers || {}).sort().join(', ') || 'none'], // names only: values are never shown
      ]))),
    replayForm,
    el('h2', {}, 'Deliveries ', filter),
    table(['Created', 'Event type', 'State', 'Attempts', 'Last status', 'Last error', 'Next attempt'], rows,
      'No deliveries' + (state ? ' in state ' + state : '') + '.'),
    page.next_cursor ? link('#/subscriptions/' + id + query({state, cursor: page.next_cursor}), 'Next page →') : '');
}

async function deliveryView(id) {
  const d = await api('GET', '/deliveries/' + encodeURIComponent(id));
  const replay = el('button', {type: 'button', id: 'replay-delivery', disabled: d.state === 'pending', onclick: () =>
    act(() => api('POST', '/deliveries/' + encodeURIComponent(id) + '/replay'),
      'Replay queued: same webhook-id, signed afresh.')}, 'Replay');
  const rows = (d.attempts || []).map((a) => el('tr', {},
    el('td', {class: 'num'}, a.n),
    el('td', {}, when(a.started_at)),
    el('td', {class: 'num'}, a.duration_ms + ' ms'),
    el('td', {class: 'num'}, a.status_code || '—'),
    el('td', {}, a.error || ''),
    el('td', {}, el('pre', {class: 'response'}, a.response || ''))));
  main.replaceChildren(
    el('h1', {}, 'Delivery ', id),
    el('p', {class: 'actions'}, replay, d.state === 'pending' ? ' (pending: it is still being tried)' : ''),
    dl([
      ['State', badge(d.state)],
      ['Event', link('#/events/' + d.event_id, d.event_id + ' (' + d.event_type + ')')],
      ['Subscription', link('#/subscriptions/' + d.subscription_id, d.subscription_id)],
      ['Attempts', String(d.attempt_count)],
      ['Next attempt', when(d.next_attempt_at)],
      ['Last error', d.last_error || '—'],
      ['Created', when(d.created_at)],
    ]),
    el('h2', {}, 'Attempts'),
    table(['#', 'Started', 'Took', 'Status', 'Error', 'Response (first KiB)'], rows, 'Not attempted yet.'));
}

async function eventView(id) {
  const e = await api('GET', '/events/' + encodeURIComponent(id));
  const rows = (e.deliveries || []).map((d) => el('tr', {},
    el('td', {}, link('#/deliveries/' + d.id, d.id)),
    el('td', {}, link('#/subscriptions/' + d.subscription_id, d.subscription_id)),
    el('td', {}, badge(d.state)),
    el('td', {class: 'num'}, d.attempt_count),
    el('td', {class: 'num'}, d.last_status || '—')));
  main.replaceChildren(
    el('h1', {}, 'Event ', id),
    dl([
      ['Type', e.type],
      ['Created', when(e.created_at)],
      ['Idempotency key', e.idempotency_key || '—'],
      ['Ordering key', e.ordering_key || '—'],
    ]),
    el('h2', {}, 'Payload'),
    el('pre', {class: 'payload'}, JSON.stringify(e.payload, null, 2)),
    el('h2', {}, 'Deliveries'),
    table(['Delivery', 'Subscription', 'State', 'Attempts', 'Last status'], rows, 'No subscription matched it.'));
}

async function replayView(id) {
  const j = await api('GET', '/replays/' + encodeURIComponent(id));
  main.replaceChildren(
    el('h1', {}, 'Replay ', id),
    dl([
      ['State', badge(j.state)],
      ['Put back in line', String(j.replayed)],
      ['Subscription', link('#/subscriptions/' + j.subscription_id, j.subscription_id)],
      ['Since', when(j.since)],
      ['Until', when(j.until)],
      ['Event types', (j.event_types || []).join(', ') || 'all'],
      ['Updated', when(j.updated_at)],
    ]),
    el('p', {}, el('button', {type: 'button', onclick: route}, 'Refresh')));
}

// act runs a change, says how it went, and shows the view again.
async function act(fn, ok) {
  try {
    await fn();
    flash(ok, 'info');
  } catch (e) {
    flash(e.message);
    return;
  }
  await route(true);
}

function localInput(d) {
  const off = d.getTimezoneOffset() * 60000;
  return new Date(d - off).toISOString().slice(0, 16);
}

const routes = [
  [/^\/subscriptions\/([^/?]+)$/, subscriptionView],
  [/^\/deliveries\/([^/?]+)$/, deliveryView],
  [/^\/events\/([^/?]+)$/, eventView],
  [/^\/replays\/([^/?]+)$/, replayView],
  [/^\/?$/, subscriptionsView],
];

async function route(keepFlash) {
  if (!store.getItem('hookd.token')) return signIn();
  if (keepFlash !== true) flash('');
  document.getElementById('signout').hidden = false;
  document.getElementById('nav').replaceChildren(link('#/', 'Subscriptions'),
    tenantParam() ? el('span', {class: 'tenant'}, 'tenant ' + tenantParam()) : '');
  const [path, q] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(q || '');
  for (const [re, view] of routes) {
    const m = re.exec(path);
    if (!m) continue;
    main.setAttribute('aria-busy', 'true');
    try {
      await (m[1] ? view(decodeURIComponent(m[1]), params) : view(params));
    } catch (e) {
      if (e.status !== 401) {
        main.replaceChildren(el('h1', {}, e.status === 404 ? 'Not found' : 'Something went wrong'), el('p', {class: 'error'}, e.message));
      }
    } finally {
      main.removeAttribute('aria-busy');
    }
    return;
  }
  main.replaceChildren(el('h1', {}, 'Not found'), el('p', {}, link('#/', 'Back to subscriptions')));
}

document.getElementById('signout').addEventListener('click', () => signOut('Signed out.'));
window.addEventListener('hashchange', () => route());
route();
