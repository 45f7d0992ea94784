// A build's comment (PUT /api/v1/builds/N/comment): its limits, checked
// here before the server refuses them, and how a list shows one.

// COMMENT_MAX is the server's cap, in UTF-8 bytes (commentserver.MaxBytes).
export const COMMENT_MAX = 10 << 10;

// commentProblem names what the server would refuse in text, '' if nothing.
export function commentProblem(text) {
  const n = new TextEncoder().encode(text).length;
  if (n > COMMENT_MAX) return `the comment is ${n} bytes, over the ${COMMENT_MAX} bytes (10 KiB) a build's comment may hold`;
  if (text.includes('\u0000')) return 'the comment holds a NUL character, which a comment may not';
  return '';
}

// commentSummary is a comment as a list's cell shows it: its first
// non-blank line, cut at max characters (whole code points) with an
// ellipsis, and whether anything was left out (the cell's title shows
// the whole).
export function commentSummary(text, max = 80) {
  const lines = (text || '').split(/\r?\n/).map((l) => l.trim()).filter((l) => l);
  if (!lines.length) return { text: '', more: false };
  const chars = Array.from(lines[0]);
  if (chars.length > max) return { text: chars.slice(0, max - 1).join('') + '…', more: true };
  return { text: lines[0], more: lines.length > 1 };
}
