// settle gives the steps still in flight when the build ended the end they
// had: the build's own (an aborted task was not left running, a failed
// check not initializing); a step that never began did not run (a retry's
// later attempts, a hook not taken).
// Without the build's status (its events not readable) nothing changes.
export function settle(steps, buildStatus) {
  if (!buildStatus) return;
  for (const s of steps.values()) {
    if (s.status === 'pending') s.status = 'not run';
    else if (s.status === 'running' || s.status === 'initializing') s.status = buildStatus;
  }
}
