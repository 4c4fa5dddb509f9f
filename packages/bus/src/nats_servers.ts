/**
 * NATS server addresses as LIVECOUNT_NATS_URL gives them: an address may carry the connection's
 * credentials (`nats://user:password@host:4222`, or a token: `nats://token@host:4222`), which nats.js
 * does not read from it, and which no log or error may show.
 */

/** Everything before the last '@' ahead of the path: a password may hold '@'. */
const USERINFO = /^([a-z][a-z0-9+.-]*:\/\/)?([^/]*)@/i;

export interface NatsCredentials {
  readonly user?: string;
  readonly pass?: string;
  readonly token?: string;
}

/**
 * The addresses without their credentials, and the credentials as nats.js takes them: one set for
 * the connection, the first address's that has any (percent-decoded).
 */
export function withoutCredentials(servers: string | readonly string[]): {
  servers: string[];
  credentials: NatsCredentials;
} {
  let credentials: NatsCredentials | undefined;
  const bare = [servers].flat().map((server) => {
    const match = USERINFO.exec(server);
    if (match === null) return server;
    const [whole, scheme = "", info = ""] = match;
    if (credentials === undefined) {
      const colon = info.indexOf(":");
      credentials =
        colon < 0
          ? { token: decodeURIComponent(info) }
          : {
              user: decodeURIComponent(info.slice(0, colon)),
              pass: decodeURIComponent(info.slice(colon + 1)),
            };
    }
    return scheme + server.slice(whole.length);
  });
  return { servers: bare, credentials: credentials ?? {} };
}

/** The addresses as a log or an error may show them: their credentials masked. */
export function maskedServers(servers: string | readonly string[]): string {
  return [servers]
    .flat()
    .map((s) => s.replace(USERINFO, "$1***@"))
    .join(",");
}
