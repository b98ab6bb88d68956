// What a session view says while the proxy fails it: whether a later try may mend a failure
// (passing), and one alert for one outage, whether the view's load failed, its event stream
// was lost, or both (session.js tries again, and says when it is over).

// A failure a later try may not meet: the proxy not reached (away, restarting, the network
// down) or its answer cut short (api.js marks both `unreached`), a 5xx, a timeout or too many requests. Another 4xx (a refusal) answers the same
// again, and so does any other error with no status (an answer that is not JSON, a fault of
// the page's own): tried again, it was retried for ever.
export function passing(err) {
  if (err.status === undefined) return err.unreached === true;
  return !(err.status >= 400 && err.status < 500) || err.status === 408 || err.status === 429;
}

// One outage, one alert: a failed load and a lost event stream are said by one toast,
// whichever came first, and it goes once neither is failing (a screen reader read two
// alerts for one proxy away).
export class Outage {
  constructor(ui) {
    this.ui = ui; // {handleError}
    this.lost = null; // the toast saying the event stream stopped, until it is back
    this.failed = null; // the toast saying a load failed, until one is answered
  }

  // `which` ("lost" or "failed") fails: the toast already up says it, else a new one. The
  // toast, or null for a 401, which signed out instead.
  alert(which, err, what) {
    const shown = this.lost || this.failed;
    this[which] = shown || this.ui.handleError(err, what, 0);
    return this[which];
  }

  // `which` is no longer failing: its toast goes, unless the other still says it.
  cleared(which) {
    const other = which === "lost" ? this.failed : this.lost;
    if (this[which] && this[which] !== other) this[which].remove();
    this[which] = null;
  }

  // The view closed: what it said goes with it.
  close() {
    for (const shown of [this.lost, this.failed]) if (shown) shown.remove();
  }
}
