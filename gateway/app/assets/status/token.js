// Wardgate status page, requests to the admin API and the admin token: kept in
// sessionStorage, sent with every request, and asked for when the API answers 401.

import { $ } from '/ui/dom.js';

const TOKEN_KEY = 'wardgate-admin-token';

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function readToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) ?? ''; } catch { return ''; }
}

export function writeToken(token) {
  // sessionStorage only: the token dies with the tab and is never sent as a cookie.
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lasts until the dialog asks again */ }
}

/** Every request goes through here: same origin, never cached, with the token if any. */
export async function api(path, options = {}) {
  const headers = new Headers(options.headers);
  const token = readToken();
  if (token) headers.set('Authorization', `Bearer ${token}`);
  const response = await fetch(path, { cache: 'no-store', credentials: 'same-origin', ...options, headers });
  // Only for the token in use: a late answer to a request with a replaced token says nothing.
  if (response.status === 401 && readToken() === token) {
    const body = await response.clone().json().catch(() => null);
    askForToken(body?.error ?? 'The admin API needs a token.');
  }
  return response;
}

async function errorText(response) {
  const body = await response.json().catch(() => null);
  return body?.error ?? `HTTP ${response.status}`;
}

export async function getJSON(path) {
  const response = await api(path);
  if (!response.ok) throw new HttpError(response.status, await errorText(response));
  return response.json();
}

// Streams stopped by a 401 wait here until a token is entered or forgotten.
let tokenWaiters = [];
export const tokenChanged = () => new Promise((resolve) => tokenWaiters.push(resolve));

export function notifyTokenChanged() {
  const waiters = tokenWaiters;
  tokenWaiters = [];
  for (const resolve of waiters) resolve();
}

export function askForToken(message) {
  const dialog = $('#token-dialog');
  // The API asks for a token: keep a way back to this dialog after Cancel.
  $('#enter-token').hidden = false;
  $('#forget-token').hidden = false;
  $('#token-error').textContent = message;
  if (!dialog.open) {
    dialog.showModal();
    $('#token-form').elements.namedItem('token').focus();
  }
}
