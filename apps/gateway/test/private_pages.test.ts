/**
 * Private pages (LIVECOUNT_PRIVATE_PREFIXES): a join or watch needs a join token (HS256 JWT signed
 * with LIVECOUNT_JOIN_SECRET, minted here with the SDK's helper) naming the page or a prefix of it;
 * its `sub` is the viewer counted. Missing, forged, expired or other-page tokens get an
 * `unauthorized` error frame with the page, and nothing is counted or watched. HTTP reads of a
 * private page need a token or a publisher key.
 */
import { signJoinToken } from "@livecount/sdk";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { sleep } from "../../../test/support/eventually.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import type { TestClient } from "../../../test/support/ws_client.js";

const SECRET = "private-pages-test-secret-0123456789";
const OTHER_SECRET = "another-secret-that-nobody-was-given!";
const PREFIX = "user-";

describe("gateway - private pages", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_PRIVATE_PREFIXES: `${PREFIX},team-`,
      LIVECOUNT_JOIN_SECRET: SECRET,
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  /** Viewers of a page as a publisher reads them (the key opens private pages). */
  async function viewers(page: string): Promise<number> {
    const res = await fetch(`${platform.url}/v1/pages/${page}/counter`, {
      headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}` },
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { viewers: number }).viewers;
  }

  /** Sends a frame and returns the error frame it earned; the socket must stay usable. */
  async function refusal(
    client: TestClient,
    frame: Record<string, unknown>,
  ): Promise<{ code: string; page?: string }> {
    const from = client.received.length;
    client.send(frame);
    const error = await client.nextError(from);
    await client.ping();
    return error;
  }

  test("tokens - missing, forged, expired, for another page, or alg none: unauthorized with the page, nothing counted or watched", async () => {
    const page = `${PREFIX}7`;
    const now = Date.now();
    const forged = await signJoinToken({ secret: OTHER_SECRET, viewer: "alice", page });
    const expired = await signJoinToken({
      secret: SECRET,
      viewer: "alice",
      page,
      expiresInS: 60,
      now: now - 120_000,
    });
    const otherPage = await signJoinToken({ secret: SECRET, viewer: "alice", page: `${PREFIX}8` });
    const otherPrefix = await signJoinToken({ secret: SECRET, viewer: "alice", prefix: "team-" });
    // Both claims (the SDK mints one or the other): the page claim holds, so the prefix opens no more.
    const bothClaims = await new SignJWT({ page: `${PREFIX}8`, prefix: PREFIX })
      .setProtectedHeader({ alg: "HS256" })
      .setSubject("alice")
      .setExpirationTime(Math.floor(now / 1000) + 60)
      .sign(new TextEncoder().encode(SECRET));
    const noClaim = await new SignJWT({})
      .setProtectedHeader({ alg: "HS256" })
      .setSubject("alice")
      .setExpirationTime(Math.floor(now / 1000) + 60)
      .sign(new TextEncoder().encode(SECRET));
    const unsigned = `${Buffer.from('{"alg":"none"}').toString("base64url")}.${Buffer.from(
      JSON.stringify({ page, sub: "alice", exp: Math.floor(now / 1000) + 60 }),
    ).toString("base64url")}.x`;
    const noExpiry = await new SignJWT({ page })
      .setProtectedHeader({ alg: "HS256" })
      .setSubject("alice")
      .sign(new TextEncoder().encode(SECRET));
    const client = await platform.connect();
    for (const type of ["join", "watch"]) {
      for (const token of [
        undefined,
        forged,
        expired,
        otherPage,
        otherPrefix,
        bothClaims,
        noClaim,
        unsigned,
        noExpiry,
        "not-a-jwt",
      ]) {
        const frame = { type, page, viewer: "alice", ...(token !== undefined ? { token } : {}) };
        const error = await refusal(client, frame);
        expect(error, `${type} ${String(token)}`).toMatchObject({ code: "unauthorized", page });
      }
    }
    expect(client.counts(page)).toEqual([]);
    expect(await viewers(page)).toBe(0);
    // A count frame of the page would come now if the socket were watching it.
    await fetch(`${platform.url}/v1/pages/${page}/counter`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ action: "increment", counter: "unread" }),
    });
    await sleep(200);
    expect(client.counts(page)).toEqual([]);
  });

  test("tokens - a valid token counts its sub, whatever viewer the client names; a prefix token opens every page under it", async () => {
    const page = `${PREFIX}42`;
    const token = await signJoinToken({ secret: SECRET, viewer: "alice", page });
    const first = await platform.connect();
    first.send({ type: "join", page, viewer: "mallory-1", token });
    await first.waitForViewers(page, 1);
    // The same token on another socket with another claimed viewer is still alice: one viewer.
    const second = await platform.connect({ encoding: "msgpack" });
    second.send({ type: "join", page, viewer: "mallory-2", token });
    await second.waitForViewers(page, 1);
    const bob = await platform.connect();
    bob.send({
      type: "join",
      page,
      token: await signJoinToken({ secret: SECRET, viewer: "bob", prefix: PREFIX }),
    });
    await first.waitForViewers(page, 2);
    expect(await viewers(page)).toBe(2);
    // A watch with a valid token gets counts without counting.
    const watcher = await platform.connect();
    watcher.send({ type: "watch", page, token: await signJoinToken({ secret: SECRET, viewer: "w", page }) });
    await watcher.waitForViewers(page, 2);
    // A token naming the page and a prefix of it opens that page.
    const both = await new SignJWT({ page, prefix: PREFIX })
      .setProtectedHeader({ alg: "HS256" })
      .setSubject("carol")
      .setExpirationTime("1 min")
      .sign(new TextEncoder().encode(SECRET));
    const carol = await platform.connect();
    carol.send({ type: "join", page, token: both });
    await first.waitForViewers(page, 3);
  });

  test("tokens - frames after a private join wait for its verification: join then leave at once ends not counted", async () => {
    const page = `${PREFIX}order`;
    const token = await signJoinToken({ secret: SECRET, viewer: "carol", page });
    const watcher = await platform.connect();
    watcher.send({ type: "watch", page, token });
    await watcher.waitForViewers(page, 0);
    const client = await platform.connect();
    client.send({ type: "join", page, token });
    client.leave(page);
    client.send({ type: "join", page, token });
    client.leave(page);
    await client.ping();
    await sleep(100);
    expect(Math.max(...watcher.viewerHistory(page))).toBeLessThanOrEqual(1);
    expect(await viewers(page)).toBe(0);
    // Public pages need nothing, and a token sent with one is ignored.
    client.send({ type: "join", page: "public-page", token });
    await client.waitForViewers("public-page", 1);
  });

  test("http - a private page's counter needs a token (?token= or Bearer) or a publisher key; public pages stay open", async () => {
    const page = `${PREFIX}http`;
    const url = `${platform.url}/v1/pages/${page}/counter`;
    const token = await signJoinToken({ secret: SECRET, viewer: "dave", page });
    const anonymous = await fetch(url);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.json()).toMatchObject({ error: { code: "unauthorized" } });
    expect((await fetch(`${url}?token=${token}`)).status).toBe(200);
    expect((await fetch(url, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    expect((await fetch(url, { headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}` } })).status).toBe(
      200,
    );
    const forged = await signJoinToken({ secret: OTHER_SECRET, viewer: "dave", page });
    expect((await fetch(`${url}?token=${forged}`)).status).toBe(401);
    const otherPage = await signJoinToken({ secret: SECRET, viewer: "dave", page: `${PREFIX}other` });
    expect((await fetch(`${url}?token=${otherPage}`)).status).toBe(401);
    // Protocol v1's bound on tokens holds over HTTP as over WebSocket: 2048 characters.
    const [header, payload, signature] = token.split(".");
    const padded = `${header}.${payload}${"A".repeat(2049 - token.length)}.${signature}`;
    expect(padded.length).toBe(2049);
    const long = await fetch(url, { headers: { authorization: `Bearer ${padded}` } });
    expect(long.status).toBe(401);
    expect(await long.json()).toMatchObject({
      error: { code: "unauthorized", message: expect.stringContaining("at most 2048 characters") },
    });
    // Several pages at once: the token must cover every private one.
    const many = `${platform.url}/v1/counters?page=${page}&page=public-x`;
    expect((await fetch(many)).status).toBe(401);
    expect((await fetch(`${many}&token=${token}`)).status).toBe(200);
    expect((await fetch(`${platform.url}/v1/pages/public-x/counter`)).status).toBe(200);
  });
});
