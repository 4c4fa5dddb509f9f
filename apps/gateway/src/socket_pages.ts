/**
 * What a socket sees on one page: watching it, and, when joined, counting as `viewer`. The topic
 * its count frames come on (`topicOf(page, encoding)`) is not stored: a string per socket would cost
 * more than the membership itself, and even the encoding would cost every membership a field.
 */
export interface PageMembership {
  /** The page id as PageViews holds it: one string per page, however many sockets see it. */
  readonly page: string;
  /** Namespaced viewer key when the socket joined; undefined when it only watches. */
  viewer: string | undefined;
  /** Whether the page is in front of its viewer on this socket (meaningful when joined). */
  active: boolean;
}

/**
 * The pages of one socket, small as most sockets are: none, one membership (a widget on a page), or
 * an array of them (several widgets sharing one socket, up to LIVECOUNT_MAX_PAGES_PER_SOCKET, so a
 * linear search is short). A Map per socket would cost four times one membership.
 */
export type SocketPages = PageMembership | PageMembership[] | undefined;

/** The socket's membership of `page`, if any. */
export function findPage(pages: SocketPages, page: string): PageMembership | undefined {
  if (pages === undefined) return undefined;
  if (!Array.isArray(pages)) return pages.page === page ? pages : undefined;
  for (const m of pages) if (m.page === page) return m;
  return undefined;
}

export function pageCount(pages: SocketPages): number {
  if (pages === undefined) return 0;
  return Array.isArray(pages) ? pages.length : 1;
}

/** `pages` with `m` added (the caller checked it has no membership of `m.page` yet). */
export function withPage(pages: SocketPages, m: PageMembership): SocketPages {
  if (pages === undefined) return m;
  if (!Array.isArray(pages)) return [pages, m];
  pages.push(m);
  return pages;
}

/** `pages` without `m`. */
export function withoutPage(pages: SocketPages, m: PageMembership): SocketPages {
  if (pages === m) return undefined;
  if (!Array.isArray(pages)) return pages;
  const i = pages.indexOf(m);
  if (i >= 0) pages.splice(i, 1);
  return pages.length === 0 ? undefined : pages;
}

/** Every membership, as an array the caller may keep while `pages` changes. */
export function pagesOf(pages: SocketPages): PageMembership[] {
  if (pages === undefined) return [];
  return Array.isArray(pages) ? [...pages] : [pages];
}

/** A membership other than `except` that counts the socket as `viewer`, if any. */
export function joinedAs(
  pages: SocketPages,
  viewer: string,
  except: PageMembership,
): PageMembership | undefined {
  if (pages === undefined || !Array.isArray(pages))
    return pages !== except && pages?.viewer === viewer ? pages : undefined;
  for (const m of pages) if (m !== except && m.viewer === viewer) return m;
  return undefined;
}
