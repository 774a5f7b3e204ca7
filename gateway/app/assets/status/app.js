// Wardgate status page, the entry module. Plain ES2022 modules, no build step, no
// dependencies: the browser loads each from /ui/NAME.js.
//
// Data flow: one load of every resource at start, then one Server-Sent Event stream
// (`/live`: gateway events and policy decisions) says what changed; each change refetches
// only the resource it concerns, debounced. The one thing polled is `/metrics`, every
// METRICS_MS (traffic.js), for the traffic sparklines; the one-second ticker only redraws
// countdowns and ages from data already here.
//
// Truth: when the stream drops and cannot be opened again, the page says the gateway is
// unreachable and since when, and shows nothing as current that it no longer knows: rows
// turn "unknown" (their last known status beside it), counters stop, the header stops
// saying Ready. It keeps trying, and comes back by itself.
//
// Security: the page runs under a strict CSP, so no inline script or style; server data
// only ever reaches the DOM through textContent, attributes and dataset, never innerHTML.
//
// Modules: feed.js (loads, the /live stream, reachability), rows.js (the servers table),
// timeline.js (decision timelines and the events log), traffic.js (/metrics sparklines),
// health.js (the header), panels.js (policies and commands), actions.js (operator buttons),
// token.js (requests and the admin token), and the shared state.js, dom.js and format.js.
// Imports run one way (no cycles). Where a module must call one that imports it (an opened
// row loads its server; an action refetches what it changed), the call is passed in from
// here. This module wires the others together and starts the page.

import { showResult, wireActions } from '/ui/actions.js';
import { $ } from '/ui/dom.js';
import { followMetrics, loadServer, refetch, reloadAll, renderUnreachableSince, streams, updateLive } from '/ui/feed.js';
import { renderGatewayUptime } from '/ui/health.js';
import { renderTicking, useServerLoader } from '/ui/rows.js';
import { state } from '/ui/state.js';
import { renderAllTimelines } from '/ui/timeline.js';
import { askForToken, notifyTokenChanged, writeToken } from '/ui/token.js';

function tick() {
  for (const entry of state.servers.values()) renderTicking(entry);
  renderGatewayUptime();
  renderUnreachableSince();
}

function wire() {
  const tokenDialog = $('#token-dialog');
  const tokenForm = $('#token-form');
  tokenForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const input = tokenForm.elements.namedItem('token');
    const token = input.value.trim();
    if (!token) return;
    writeToken(token);
    input.value = '';
    tokenDialog.close();
    for (const stream of streams) stream.restart();
    notifyTokenChanged();
    reloadAll();
  });
  $('#token-cancel').addEventListener('click', () => tokenDialog.close());
  $('#enter-token').addEventListener('click', () => askForToken(''));
  $('#forget-token').addEventListener('click', () => {
    writeToken('');
    showResult('Token forgotten for this tab.', 'ok');
    // Stop using it at once; if the API needs one, the next answer asks again.
    for (const stream of streams) stream.restart();
    notifyTokenChanged();
  });

  wireActions(refetch);
  // An opened row loads its tool list; the loads are feed.js's, which rows.js cannot import.
  useServerLoader(loadServer);

  $('#decision-server-filter').addEventListener('change', renderAllTimelines);
  $('#decision-kind-filter').addEventListener('change', renderAllTimelines);
}

async function start() {
  wire();
  updateLive();
  setInterval(tick, 1000);
  await reloadAll();
  // Events from the start of the gateway's replay buffer, so the rows' event lists and
  // the log have history; decisions after the ones just loaded.
  for (const stream of streams) stream.run();
  followMetrics();
}

start();
