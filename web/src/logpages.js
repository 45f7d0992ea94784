// A step's output read by range (GET /api/v1/builds/N/log): the page holds
// a window of pages, contiguous in the log, never the whole of a huge log.
// A page's pieces (log events) cut lines anywhere; lines are put together
// across pieces and pages here. Each line is named by where it ends: the
// k-th newline of record id's piece (as the server's search names hits);
// the window's last line, if not over, by where it stops.

// MAX_LINES bounds the lines a window holds: pages beyond it are dropped
// at the other end (and read again if scrolled back to).
export const MAX_LINES = 20000;

// splitPieces turns pieces ({id, time, payload}) into lines, the last one
// open (the text after the last newline, maybe '').
export function splitPieces(logs, into = { lines: [], open: null }) {
  let open = into.open;
  for (const p of logs) {
    const parts = (p.payload || '').split('\n');
    for (let k = 0; k < parts.length - 1; k++) {
      const text = (open ? open.text : '') + parts[k];
      into.lines.push({ t: open && open.text ? open.t : p.time, text: text.replace(/\r$/, ''), id: p.id, k });
      open = null;
    }
    const rest = parts[parts.length - 1];
    if (!open) open = { t: p.time, text: '', id: p.id, k: parts.length - 1 };
    if (rest) {
      if (!open.text) open.t = p.time;
      open.text += rest;
    }
    open.id = p.id;
    open.k = parts.length - 1;
  }
  into.open = open;
  return into;
}

// flatten is a window's lines: its pages' pieces put together, the open
// line last (when it holds text).
export function flatten(pages) {
  const acc = { lines: [], open: null };
  for (const pg of pages) splitPieces(pg.logs, acc);
  const lines = acc.lines;
  if (acc.open && acc.open.text) lines.push({ ...acc.open, text: acc.open.text.replace(/\r$/, ''), open: true });
  return lines;
}

function lineCount(pg) {
  let n = 0;
  for (const p of pg.logs) n += (p.payload.match(/\n/g) || []).length;
  return n;
}

// newWindow is a window holding one page (the step's end, or a hit's).
export function newWindow(page) {
  return withLines({ pages: [page], start: page.start, end: page.end });
}

function withLines(w) {
  w.lines = flatten(w.pages);
  w.from = w.pages[0].from;
  w.to = w.pages[w.pages.length - 1].to;
  return w;
}

// addBefore puts an earlier page in front of the window, dropping pages at
// the end beyond max lines; added is how many lines came in front.
export function addBefore(w, page, max = MAX_LINES) {
  const pages = [page, ...w.pages];
  let end = w.end;
  let total = pages.reduce((n, p) => n + lineCount(p), 0);
  while (pages.length > 2 && total - lineCount(pages[pages.length - 1]) >= max) {
    total -= lineCount(pages.pop());
    end = false;
  }
  const before = w.lines.length;
  const next = withLines({ pages, start: page.start, end });
  // Lines in front: all but the ones the window had, less the ones dropped
  // at the end (counted by where the old first line is now).
  const first = w.lines[0];
  const at = first ? next.lines.findIndex((l) => l.id === first.id && l.k === first.k) : -1;
  next.added = at >= 0 ? at : Math.max(next.lines.length - before, 0);
  return next;
}

// addAfter puts a later page behind the window, dropping pages in front
// beyond max lines; dropped is how many lines went from the front.
export function addAfter(w, page, max = MAX_LINES) {
  const pages = [...w.pages, page];
  let start = w.start;
  let total = pages.reduce((n, p) => n + lineCount(p), 0);
  while (pages.length > 2 && total - lineCount(pages[0]) >= max) {
    total -= lineCount(pages.shift());
    start = false;
  }
  const next = withLines({ pages, start, end: page.end });
  // Lines gone from the front: where the old last complete line was, less
  // where it is now.
  const lastDone = w.lines.length - 1 - (w.lines.length && w.lines[w.lines.length - 1].open ? 1 : 0);
  const l = w.lines[lastDone];
  const at = l ? findLine(next.lines, l.id, l.k) : -1;
  next.dropped = l && at >= 0 ? lastDone - at : 0;
  return next;
}

// findLine is the index of the line that ends (or stops) at record id's
// k-th newline, or -1.
export function findLine(lines, id, k) {
  for (let i = lines.length - 1; i >= 0; i--) {
    const l = lines[i];
    if (l.id === id && l.k === k) return i;
    if (l.id < id) break;
  }
  return -1;
}
