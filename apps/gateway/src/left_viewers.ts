/**
 * The viewer ids a socket left pages as, for the grace window: the owner still counts such an id
 * for that long, so a socket that joins the page again as another id must end it at once, or
 * cycling ids would keep ghosts counting (one socket is at most one viewer of a page).
 */

/** A viewer key a socket counted as on a page it left, remembered until the grace window ends. */
export interface LeftViewer {
  readonly viewer: string;
  /** When (monotonic) the owner stops counting it anyway. */
  readonly until: number;
}

/** Page -> viewer it was left as; created on a socket's first leave, so idle sockets pay nothing. */
export type LeftViewers = Map<string, LeftViewer>;

/**
 * Remembers that `viewer` left `page` until `now + graceMs` (monotonic), forgetting what has
 * expired. At most `max` are kept: past that the oldest is handed to `evict`, to be ended now
 * instead.
 */
export function rememberLeft(
  left: LeftViewers,
  page: string,
  viewer: string,
  now: number,
  graceMs: number,
  max: number,
  evict: (page: string, viewer: string) => void,
): void {
  for (const [p, l] of left) if (l.until <= now) left.delete(p);
  left.delete(page);
  if (left.size >= max) {
    const [oldestPage, oldest] = left.entries().next().value!;
    left.delete(oldestPage);
    evict(oldestPage, oldest.viewer);
  }
  left.set(page, { viewer, until: now + graceMs });
}

/** The viewer `page` was left as, if still within the grace window; forgotten either way. */
export function takeLeft(left: LeftViewers | undefined, page: string, now: number): string | undefined {
  const l = left?.get(page);
  if (l === undefined) return undefined;
  left!.delete(page);
  return l.until > now ? l.viewer : undefined;
}
