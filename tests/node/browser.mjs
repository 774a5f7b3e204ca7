// A headless browser for the status page tests: the system's Chromium
// (Debian's /usr/bin/chromium) driven by playwright-core, which never
// downloads a browser of its own.
//
// Usage: node browser.mjs
//   WARDGATE_CHROMIUM      the executable to launch (default /usr/bin/chromium)
//   WARDGATE_VIEWPORT      WIDTHxHEIGHT of the page (default 1280x900)
//   WARDGATE_COLOR_SCHEME  light, dark or no-preference (default light)
//
// Once the browser is up, the first line on stdout is
//   {"ready": true, "version": "<browser version>"}
// or, if it could not be launched, {"ready": false, "error": "..."} (naming
// the executable tried) and the process exits 1.
//
// Then commands are read from stdin, one JSON object per line, and run
// strictly one at a time in order:
//   {"id": 1, "op": "goto", "url": "http://..."}
// Each gets exactly one line on stdout, carrying the command's id back:
//   {"id": 1, "ok": true, "value": ...}   or   {"id": 1, "ok": false, "error": "..."}
// A line that is not a JSON object is answered with "id": null.
//
// Ops (timeout_ms defaults to 30000 wherever it is accepted):
//   goto {url, timeout_ms?}                  -> HTTP status of the main response (null if none)
//   wait {selector, state?, timeout_ms?}     -> true; state: visible (default), attached, hidden, detached
//   wait_text {selector, text, timeout_ms?}  -> textContent of the first element matching the CSS
//                                               selector whose textContent contains text
//   wait_attr {selector, name, value, timeout_ms?}
//                                            -> true once an element matching the CSS selector has
//                                               attribute name equal to value (a string)
//   wait_function {expression, timeout_ms?}  -> the expression's first truthy value (as JSON)
//   eval {expression}                        -> the expression's value (as JSON; undefined is null)
//     expression is a JavaScript expression run in the page, such as
//     "document.title"; one whose value is a function ("() => x") is refused.
//   click {selector, timeout_ms?}            -> true (the first match)
//   fill {selector, value, timeout_ms?}      -> true
//   press {selector, key, timeout_ms?}       -> true (key as in Playwright: "Enter", "Control+A", ...)
//   keyboard {key}                           -> true (a key press on the focused element)
//   count {selector}                         -> number of matches, now
//   text {selector}                          -> textContent of the first match, now, or null
//   attr {selector, name}                    -> attribute name of the first match, now, or null
//   screenshot {path, full_page?, selector?} -> path; a PNG of the viewport, the whole page,
//                                               or the first element matching selector
//   set_viewport {width, height}             -> true
//   emulate {color_scheme}                   -> true (light, dark, no-preference or null)
//   errors {clear?}                          -> the uncaught page errors seen so far, as strings
//                                               (then forgotten if clear is true)
//   close {}                                 -> true; the browser is closed first, the process
//                                               exits 0 after the answer
// Selectors are Playwright selectors (CSS being the usual case), except for
// wait_text and wait_attr, which run document.querySelectorAll in the page
// and so take plain CSS. A wait that times out says what it found instead.
//
// Diagnostics, the page's console messages and its uncaught errors (prefixed
// "[page]") go to stderr. The browser is closed, and the process exits 0,
// when stdin is closed or on SIGTERM, SIGINT or SIGHUP; Playwright also kills
// it if this process exits any other way.
import { createInterface } from 'node:readline';

// Nothing but the protocol may reach stdout.
console.log = console.info = console.debug = console.error;

const { chromium, errors: playwrightErrors } = await import('playwright-core');

const DEFAULT_TIMEOUT_MS = 30000;

const write = (object) =>
  new Promise((resolve) => process.stdout.write(`${JSON.stringify(object)}\n`, () => resolve()));
const log = (message) => process.stderr.write(`[browser] ${message}\n`);

// --- launch ---------------------------------------------------------------

const executablePath = process.env.WARDGATE_CHROMIUM || '/usr/bin/chromium';
const viewportSpec = process.env.WARDGATE_VIEWPORT || '1280x900';
const colorScheme = process.env.WARDGATE_COLOR_SCHEME || 'light';

let browser;
let page;
const pageErrors = [];
let closing = false;

try {
  const size = /^(\d+)x(\d+)$/.exec(viewportSpec);
  if (!size) throw new Error(`WARDGATE_VIEWPORT must be WIDTHxHEIGHT, not ${JSON.stringify(viewportSpec)}`);
  if (!['light', 'dark', 'no-preference'].includes(colorScheme))
    throw new Error(`WARDGATE_COLOR_SCHEME must be light, dark or no-preference, not ${JSON.stringify(colorScheme)}`);
  try {
    browser = await chromium.launch({
      executablePath,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--disable-dev-shm-usage',
      ],
      // Signals are handled below, so the answer to them is ours.
      handleSIGINT: false,
      handleSIGTERM: false,
      handleSIGHUP: false,
      timeout: 60000,
    });
  } catch (e) {
    throw new Error(
      `could not launch Chromium at ${executablePath} (WARDGATE_CHROMIUM selects another executable): ${e.message}`,
    );
  }
  browser.on('disconnected', () => {
    if (!closing) log('the browser went away');
  });
  const context = await browser.newContext({
    viewport: { width: Number(size[1]), height: Number(size[2]) },
    colorScheme,
  });
  context.setDefaultTimeout(DEFAULT_TIMEOUT_MS);
  context.setDefaultNavigationTimeout(DEFAULT_TIMEOUT_MS);
  page = await context.newPage();
} catch (e) {
  if (browser) await browser.close().catch(() => {});
  await write({ ready: false, error: e.message });
  process.exit(1);
}

page.on('console', (message) => {
  process.stderr.write(`[page] console.${message.type()}: ${message.text()}\n`);
});
page.on('pageerror', (error) => {
  const text = String(error);
  pageErrors.push(text);
  process.stderr.write(`[page] error: ${error.stack || text}\n`);
});
page.on('crash', () => process.stderr.write('[page] crashed\n'));

// --- shutting down --------------------------------------------------------

// Close the browser (giving up on a polite close after 5 s; Playwright's
// exit hook then kills it) and exit.
let shutdownStarted = false;
async function shutdown(code) {
  if (!shutdownStarted) {
    shutdownStarted = true;
    closing = true;
    await Promise.race([browser.close().catch(() => {}), new Promise((r) => setTimeout(r, 5000))]);
  }
  process.exit(code);
}

for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  process.on(signal, () => {
    log(`${signal}: closing the browser`);
    shutdown(0);
  });
}

// --- commands -------------------------------------------------------------

class CommandError extends Error {}

function field(command, name, type, optional = false) {
  const value = command[name];
  if (value === undefined || value === null) {
    if (optional) return undefined;
    throw new CommandError(`${command.op}: missing "${name}"`);
  }
  if (type && typeof value !== type) throw new CommandError(`${command.op}: "${name}" must be a ${type}`);
  return value;
}

function timeoutOf(command) {
  const ms = field(command, 'timeout_ms', 'number', true);
  if (ms === undefined) return DEFAULT_TIMEOUT_MS;
  if (!(ms >= 0)) throw new CommandError(`${command.op}: "timeout_ms" must not be negative`);
  return ms;
}

const isTimeout = (e) => e instanceof playwrightErrors.TimeoutError || e?.name === 'TimeoutError';

const shorten = (text, limit = 200) =>
  typeof text === 'string' && text.length > limit ? `${text.slice(0, limit)}…` : text;

// Describe what is there now, for the error of a wait that timed out; never
// fails (the page may be gone).
async function sighting(describe) {
  try {
    return `; ${await describe()}`;
  } catch (e) {
    return `; could not look at the page: ${e.message.split('\n')[0]}`;
  }
}

// The page functions of wait_attr and wait_text: data travels as arguments.
function hasAttribute({ selector, name, value }) {
  for (const element of document.querySelectorAll(selector)) if (element.getAttribute(name) === value) return true;
  return false;
}
function attributeValues({ selector, name }) {
  return Array.from(document.querySelectorAll(selector), (element) => element.getAttribute(name));
}
function containingText({ selector, text }) {
  for (const element of document.querySelectorAll(selector)) {
    const content = element.textContent ?? '';
    if (content.includes(text)) return { content };
  }
  return null;
}
function textContents({ selector }) {
  return Array.from(document.querySelectorAll(selector), (element) => element.textContent);
}

// The JSON value behind a handle. An expression such as "() => x" is a
// function, not a call of one: refuse it rather than answer null (for a
// wait, a function is truthy, so it would pass at once).
async function valueOf(handle, op) {
  if (await handle.evaluate((value) => typeof value === 'function'))
    throw new CommandError(`${op}: the expression is a function; give an expression, such as its body, instead`);
  return handle.jsonValue();
}

const ops = {
  async goto(command) {
    const url = field(command, 'url', 'string');
    const response = await page.goto(url, { timeout: timeoutOf(command) });
    return response ? response.status() : null;
  },

  async wait(command) {
    const selector = field(command, 'selector', 'string');
    const state = field(command, 'state', 'string', true) ?? 'visible';
    if (!['visible', 'attached', 'hidden', 'detached'].includes(state))
      throw new CommandError(`wait: "state" must be visible, attached, hidden or detached, not ${JSON.stringify(state)}`);
    const timeout = timeoutOf(command);
    try {
      await page.waitForSelector(selector, { state, timeout });
    } catch (e) {
      if (!isTimeout(e)) throw e;
      throw new CommandError(
        `wait ${JSON.stringify(selector)} (state ${state}) timed out after ${timeout} ms at ${page.url()}` +
          (await sighting(async () => {
            const matches = page.locator(selector);
            const count = await matches.count();
            let visible = 0;
            for (let i = 0; i < count; i++) if (await matches.nth(i).isVisible()) visible++;
            return `now ${count} match(es), ${visible} visible`;
          })),
      );
    }
    return true;
  },

  async wait_text(command) {
    const selector = field(command, 'selector', 'string');
    const text = field(command, 'text', 'string');
    const timeout = timeoutOf(command);
    try {
      const handle = await page.waitForFunction(containingText, { selector, text }, { timeout });
      const { content } = await handle.jsonValue();
      await handle.dispose();
      return content;
    } catch (e) {
      if (!isTimeout(e)) throw e;
      throw new CommandError(
        `wait_text ${JSON.stringify(selector)} containing ${JSON.stringify(text)} timed out after ${timeout} ms at ${page.url()}` +
          (await sighting(async () => {
            const contents = await page.evaluate(textContents, { selector });
            return `now ${contents.length} match(es) with textContent ${JSON.stringify(contents.slice(0, 20).map((c) => shorten(c)))}`;
          })),
      );
    }
  },

  async wait_attr(command) {
    const selector = field(command, 'selector', 'string');
    const name = field(command, 'name', 'string');
    let value = field(command, 'value');
    if (typeof value !== 'string') value = String(value);
    const timeout = timeoutOf(command);
    try {
      const handle = await page.waitForFunction(hasAttribute, { selector, name, value }, { timeout });
      await handle.dispose();
    } catch (e) {
      if (!isTimeout(e)) throw e;
      throw new CommandError(
        `wait_attr ${JSON.stringify(selector)} [${name}=${JSON.stringify(value)}] timed out after ${timeout} ms at ${page.url()}` +
          (await sighting(async () => {
            const values = await page.evaluate(attributeValues, { selector, name });
            return `now ${values.length} match(es) with ${name} ${JSON.stringify(values.slice(0, 20).map((v) => shorten(v)))}`;
          })),
      );
    }
    return true;
  },

  async wait_function(command) {
    const expression = field(command, 'expression', 'string');
    const timeout = timeoutOf(command);
    try {
      const handle = await page.waitForFunction(expression, undefined, { timeout });
      try {
        return await valueOf(handle, 'wait_function');
      } finally {
        await handle.dispose().catch(() => {});
      }
    } catch (e) {
      if (!isTimeout(e)) throw e;
      throw new CommandError(
        `wait_function ${JSON.stringify(expression)} timed out after ${timeout} ms at ${page.url()}` +
          (await sighting(async () => `now it is ${shorten(JSON.stringify(await page.evaluate(expression)) ?? 'undefined')}`)),
      );
    }
  },

  async eval(command) {
    const handle = await page.evaluateHandle(field(command, 'expression', 'string'));
    try {
      return await valueOf(handle, 'eval');
    } finally {
      await handle.dispose().catch(() => {});
    }
  },

  async click(command) {
    await page.click(field(command, 'selector', 'string'), { timeout: timeoutOf(command) });
    return true;
  },

  async fill(command) {
    await page.fill(field(command, 'selector', 'string'), field(command, 'value', 'string'), {
      timeout: timeoutOf(command),
    });
    return true;
  },

  async press(command) {
    await page.press(field(command, 'selector', 'string'), field(command, 'key', 'string'), {
      timeout: timeoutOf(command),
    });
    return true;
  },

  async keyboard(command) {
    await page.keyboard.press(field(command, 'key', 'string'));
    return true;
  },

  async count(command) {
    return page.$$eval(field(command, 'selector', 'string'), (elements) => elements.length);
  },

  async text(command) {
    return page.$$eval(field(command, 'selector', 'string'), (elements) =>
      elements.length ? elements[0].textContent : null,
    );
  },

  async attr(command) {
    return page.$$eval(
      field(command, 'selector', 'string'),
      (elements, name) => (elements.length ? elements[0].getAttribute(name) : null),
      field(command, 'name', 'string'),
    );
  },

  async screenshot(command) {
    const path = field(command, 'path', 'string');
    const fullPage = field(command, 'full_page', 'boolean', true) ?? false;
    const selector = field(command, 'selector', 'string', true);
    if (selector !== undefined) {
      await page.locator(selector).first().screenshot({ path, type: 'png', timeout: timeoutOf(command) });
    } else {
      await page.screenshot({ path, type: 'png', fullPage, timeout: timeoutOf(command) });
    }
    return path;
  },

  async set_viewport(command) {
    const width = field(command, 'width', 'number');
    const height = field(command, 'height', 'number');
    await page.setViewportSize({ width, height });
    return true;
  },

  async emulate(command) {
    if (!('color_scheme' in command)) throw new CommandError('emulate: missing "color_scheme"');
    const scheme = command.color_scheme;
    if (![null, 'light', 'dark', 'no-preference'].includes(scheme))
      throw new CommandError('emulate: "color_scheme" must be light, dark, no-preference or null');
    await page.emulateMedia({ colorScheme: scheme });
    return true;
  },

  async errors(command) {
    const seen = [...pageErrors];
    if (field(command, 'clear', 'boolean', true)) pageErrors.length = 0;
    return seen;
  },
};

async function run(line) {
  let command;
  try {
    command = JSON.parse(line);
  } catch (e) {
    return { id: null, ok: false, error: `not JSON: ${e.message}` };
  }
  if (typeof command !== 'object' || command === null || Array.isArray(command))
    return { id: null, ok: false, error: 'a command must be a JSON object' };
  const id = command.id ?? null;
  const op = command.op;
  if (op === 'close') return { id, ok: true, value: true, close: true };
  if (typeof op !== 'string' || !Object.hasOwn(ops, op))
    return { id, ok: false, error: `unknown op ${JSON.stringify(op)}` };
  try {
    const value = await ops[op](command);
    // Make sure the answer can be written before claiming success.
    JSON.stringify(value);
    return { id, ok: true, value: value === undefined ? null : value };
  } catch (e) {
    // Playwright's call logs are coloured for a terminal; the colours are noise here.
    const message = (e instanceof CommandError ? e.message : `${op}: ${e?.message ?? String(e)}`).replace(
      /\u001b\[[0-9;]*m/g,
      '',
    );
    return { id, ok: false, error: message };
  }
}

await write({ ready: true, version: browser.version() });

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity, terminal: false });
for await (const line of lines) {
  if (!line.trim()) continue;
  const answer = await run(line);
  if (answer.close) {
    closing = true;
    shutdownStarted = true;
    await browser.close().catch((e) => log(`close: ${e.message}`));
    await write({ id: answer.id, ok: true, value: true });
    process.exit(0);
  }
  await write(answer);
}

// stdin was closed.
await shutdown(0);
